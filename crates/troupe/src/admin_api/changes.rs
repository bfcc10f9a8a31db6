//! The admin calls that change an actor or the clock, apart from the trait
//! impl in `mod.rs`, which audits each around these (`audit.rs`).

use tonic::{Request, Response, Status};
use troupe_proto::v1 as pb;
use troupe_runtime::input::range;

use super::AdminApi;
use crate::convert;
use crate::convert::errors::status_of;

impl AdminApi {
    pub(super) async fn deactivate(
        &self,
        request: Request<pb::DeactivateActorRequest>,
    ) -> Result<Response<pb::DeactivateActorResponse>, Status> {
        let (metadata, _, message) = request.into_parts();
        let actor = convert::actor_id(message.actor.clone())?;
        if let Some(mut owner) = self.remote(&actor, &metadata)? {
            let answer = owner.client.deactivate_actor(owner.request(message)).await;
            return owner.answer(answer).map(Response::new);
        }
        let deactivated = self
            .runtime
            .deactivate_actor(&actor)
            .await
            .map_err(status_of)?;
        Ok(Response::new(pb::DeactivateActorResponse { deactivated }))
    }

    pub(super) async fn purge(
        &self,
        request: Request<pb::PurgeActorRequest>,
    ) -> Result<Response<pb::PurgeActorResponse>, Status> {
        let (metadata, _, message) = request.into_parts();
        let actor = convert::actor_id(message.actor.clone())?;
        if let Some(mut owner) = self.remote(&actor, &metadata)? {
            let answer = owner.client.purge_actor(owner.request(message)).await;
            return owner.answer(answer).map(Response::new);
        }
        let purged = self.runtime.purge_actor(&actor).await.map_err(status_of)?;
        Ok(Response::new(pb::PurgeActorResponse {
            was_active: purged.was_active,
            state_keys: purged.stored.state_keys,
            inbox_entries: purged.stored.inbox_entries,
            dead_letters: purged.stored.dead_letters,
            call_records: purged.stored.call_records,
            reminders: purged.reminders,
        }))
    }

    pub(super) async fn edit_state(
        &self,
        request: Request<pb::EditActorStateRequest>,
    ) -> Result<Response<pb::EditActorStateResponse>, Status> {
        let (metadata, _, message) = request.into_parts();
        let actor = convert::actor_id(message.actor.clone())?;
        if let Some(mut owner) = self.remote(&actor, &metadata)? {
            let answer = owner.client.edit_actor_state(owner.request(message)).await;
            return owner.answer(answer).map(Response::new);
        }
        let changes = convert::state_changes(message.changes)?;
        let expect = convert::state_changes(message.expect)?;
        let edited = self
            .runtime
            .edit_actor_state(&actor, &changes, &expect)
            .await
            .map_err(status_of)?;
        Ok(Response::new(pb::EditActorStateResponse {
            was_active: edited.was_active,
            before: edited
                .before
                .into_iter()
                .map(|change| pb::StateChange {
                    ttl_ms: None,
                    key: change.key,
                    op: Some(match change.value {
                        Some(value) => pb::state_change::Op::Set(value),
                        None => pb::state_change::Op::Delete(true),
                    }),
                })
                .collect(),
        }))
    }

    pub(super) async fn move_clock(
        &self,
        request: Request<pb::AdvanceClockRequest>,
    ) -> Result<Response<pb::AdvanceClockResponse>, Status> {
        if !self.runtime.has_test_clock() {
            return Err(Status::failed_precondition(
                "the daemon was not started with --test-clock; only a test daemon's time can be \
                 moved (docs/testing.md)",
            ));
        }
        let by = convert::time::duration("by", &request.into_inner().by, &range::ANY)?;
        let advanced = self
            .runtime
            .advance_clock(by.get())
            .await
            .map_err(status_of)?;
        Ok(Response::new(pb::AdvanceClockResponse {
            now_unix_ms: advanced.now_unix_ms,
            reminders_fired: advanced.reminders_fired,
            alarms_fired: advanced.alarms_fired,
            timers_fired: advanced.timers_fired,
        }))
    }
}
