//! `troupe.v1.Admin`: what operators and the CLI inspect.

mod audit;
mod backup;
mod changes;
mod dead_letters;
mod delivery;
mod owner;
mod security;

pub use owner::Owners;
pub use security::Security;

use tonic::{Request, Response, Status};
use troupe_proto::v1 as pb;
use troupe_runtime::{ActivationState, ActorId, MemoryBounds, Runtime, StateMode};
use troupe_storage_sled::SledStore;
use troupe_transport::link::{ChannelStats, Links};

use crate::convert;
use crate::convert::errors::status_of;
use crate::convert::paging;
use crate::convert::reminders::reminder_to_pb;
use crate::store_metrics::StoreMetrics;
use audit::Audit;

#[derive(Debug, Clone)]
pub struct AdminApi {
    runtime: Runtime,
    /// The address the daemon serves on, as bound.
    listen: String,
    /// Links to other daemons (cluster only).
    links: Option<Links>,
    /// The cgroup's memory limit, if any (`config::memory_limit`).
    memory_limit: Option<u64>,
    /// The store, when it is sled: the one `Backup` copies.
    sled: Option<SledStore>,
    /// Where requests about actors other daemons own go (cluster only).
    owners: Option<Owners>,
    /// Counts the backups for the metrics endpoint.
    store_metrics: StoreMetrics,
    /// What `Status` tells of the daemon's credentials and TLS.
    security: Security,
}

impl AdminApi {
    pub fn new(
        runtime: Runtime,
        listen: String,
        links: Option<Links>,
        memory_limit: Option<u64>,
    ) -> Self {
        Self {
            runtime,
            listen,
            links,
            memory_limit,
            sled: None,
            owners: None,
            store_metrics: StoreMetrics::default(),
            security: Security::default(),
        }
    }

    /// Tells the credentials and TLS the daemon's guards use in `Status`.
    pub fn with_security(self, security: Security) -> Self {
        Self { security, ..self }
    }

    /// Backs up `sled` when asked to, counting the backups in `metrics`.
    pub fn with_sled(self, sled: Option<SledStore>, store_metrics: StoreMetrics) -> Self {
        Self {
            sled,
            store_metrics,
            ..self
        }
    }

    /// Passes requests about actors other daemons own to `owners`.
    pub fn with_owners(self, owners: Option<Owners>) -> Self {
        Self { owners, ..self }
    }

    /// The owner's admin API when another daemon owns `actor`.
    fn remote(
        &self,
        actor: &ActorId,
        metadata: &tonic::metadata::MetadataMap,
    ) -> Result<Option<owner::Remote>, Status> {
        match &self.owners {
            Some(owners) => owners.remote(actor, metadata),
            None => Ok(None),
        }
    }
}

fn link_to_pb(s: ChannelStats) -> pb::PeerLinkStatus {
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    pb::PeerLinkStatus {
        peer: s.peer,
        channel: s.channel,
        connections: count(s.connections),
        connected: count(s.connected),
        connected_grpc: count(s.connected_grpc),
        bytes_sent: s.bytes_sent,
        bytes_received: s.bytes_received,
        messages_sent: s.messages_sent,
        messages_received: s.messages_received,
        queued_bytes: s.queued_bytes as u64,
        in_flight: s.in_flight as u64,
        reconnects: s.reconnects,
        rtt_us: s.rtt_us,
    }
}

/// The runtime's bounds, with the process's resident memory read now.
fn memory_to_pb(m: &MemoryBounds, limit: Option<u64>) -> pb::MemoryBounds {
    let wide = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    pb::MemoryBounds {
        resident_bytes: crate::process_stats::resident_bytes().unwrap_or(0),
        memory_limit_bytes: limit.unwrap_or(0),
        call_records_bytes: wide(m.call_records_bytes),
        call_records_limit_bytes: wide(m.call_records_limit_bytes),
        call_records_shed: m.call_records_shed,
        max_activations: m.max_activations.map_or(0, wide),
        capacity_deactivations: m.capacity_deactivations,
        shed_percent: u32::from(m.shedding.shed_percent),
        shed_at_bytes: m.shedding.shed_at_bytes,
        resume_percent: u32::from(m.shedding.resume_percent),
        shedding: m.shedding.shedding,
        shed_requests: m.shedding.refused,
        shed_episodes: m.shedding.episodes,
        shed_deactivations: m.shedding.deactivated,
    }
}

fn state_mode_to_pb(mode: StateMode) -> pb::StateMode {
    match mode {
        StateMode::WriteBehind => pb::StateMode::WriteBehind,
        StateMode::Durable => pb::StateMode::Durable,
    }
}

fn activation_status(state: ActivationState) -> pb::ActivationStatus {
    match state {
        ActivationState::Inactive => pb::ActivationStatus::Inactive,
        ActivationState::Activating => pb::ActivationStatus::Activating,
        ActivationState::Idle => pb::ActivationStatus::Idle,
        ActivationState::Running => pb::ActivationStatus::Running,
        ActivationState::Deactivating => pb::ActivationStatus::Deactivating,
    }
}

/// One page of `items` (fetched with one extra to tell whether more follow)
/// and the token for the next.
fn page<T>(mut items: Vec<T>, size: usize, token_of: impl Fn(&T) -> String) -> (Vec<T>, String) {
    if items.len() > size {
        items.truncate(size);
        let next = items.last().map(token_of).unwrap_or_default();
        (items, next)
    } else {
        (items, String::new())
    }
}

#[tonic::async_trait]
impl pb::admin_server::Admin for AdminApi {
    async fn status(
        &self,
        _request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let s = self.runtime.status();
        let delivery = self.runtime.delivery_status().await;
        let flush = &s.flush;
        Ok(Response::new(pb::StatusResponse {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            uptime_ms: s.uptime.as_millis() as u64,
            types: s
                .types
                .into_iter()
                .map(|t| {
                    let mut out = pb::RegisteredType {
                        name: t.name,
                        apps: t.apps,
                        active_actors: t.active_actors as u64,
                        ..Default::default()
                    };
                    if let Some(o) = t.options {
                        out.state_mode = state_mode_to_pb(o.state_mode) as i32;
                        out.idle_timeout_ms = o.idle_timeout.as_millis() as u64;
                        out.max_mailbox = u32::try_from(o.max_mailbox).unwrap_or(u32::MAX);
                        out.reentrant = o.reentrant;
                        out.retention_ms = o.retention.map_or(0, |r| r.as_millis() as u64);
                    }
                    out
                })
                .collect(),
            store: s.store,
            store_bytes: self.runtime.store_size_on_disk().await.unwrap_or(0),
            active_actors: s.active_actors as u64,
            dirty_actors: flush.dirty_actors as u64,
            node: s.node,
            listen: self.listen.clone(),
            flush: Some(pb::FlushBacklog {
                dirty_actors: flush.dirty_actors as u64,
                dirty_bytes: flush.dirty_bytes as u64,
                held_replies: flush.held_replies as u64,
                batches: flush.batches,
                keys_written: flush.keys_written,
                last_flush_unix_ms: flush.last_flush_unix_ms,
                failing: flush.failing,
                last_error: flush.last_error.clone(),
            }),
            pending_calls: s.pending_calls as u64,
            max_pending_calls: s.max_pending_calls as u64,
            reminders_fired: s.reminders_fired,
            reminders_paused: s.reminders_paused.map(|n| n as u64),
            started_unix_ms: s.started_unix_ms,
            placement_version: s.placement_version,
            serving: s.serving,
            links: self
                .links
                .as_ref()
                .map(|l| l.stats().into_iter().map(link_to_pb).collect())
                .unwrap_or_default(),
            delivery: Some(delivery::status_to_pb(delivery)),
            standalone: self.links.is_none(),
            inbound_links: self.links.as_ref().map(|l| {
                let inbound = l.inbound_stats();
                pb::InboundLinks {
                    streams: inbound.streams as u64,
                    let_go: inbound.let_go,
                }
            }),
            memory: Some(memory_to_pb(&s.memory, self.memory_limit)),
            events: Some(pb::EventsStatus {
                watched: s.events.watched as u64,
                max_watched: s.events.max_watched as u64,
                held_bytes: s.events.held_bytes as u64,
                max_held_bytes: s.events.max_held_bytes as u64,
            }),
            security: Some(self.security.status()),
        }))
    }

    async fn list_actors(
        &self,
        request: Request<pb::ListActorsRequest>,
    ) -> Result<Response<pb::ListActorsResponse>, Status> {
        let r = request.into_inner();
        let after =
            paging::parse_page_token::<2>(&r.page_token)?.map(|[ty, id]| ActorId::new(ty, id));
        let size = paging::page_size(r.page_size);
        let ty = (!r.r#type.is_empty()).then_some(r.r#type.as_str());
        if let Some(ty) = ty {
            troupe_runtime::validate::name("actor type", ty).map_err(status_of)?;
        }
        let actors = self.runtime.list_actors(ty, after.as_ref(), size + 1);
        let (actors, next_page_token) = page(actors, size, |a| {
            paging::page_token(&[&a.actor.ty, &a.actor.id])
        });
        Ok(Response::new(pb::ListActorsResponse {
            actors: actors
                .into_iter()
                .map(|a| pb::ActorInfo {
                    actor: Some(convert::actor_ref(&a.actor)),
                    mailbox_depth: a.mailbox_depth as u64,
                    turns: a.turns,
                    dirty: a.dirty,
                    idle_ms: a.idle.as_millis() as u64,
                    status: activation_status(a.state) as i32,
                })
                .collect(),
            next_page_token,
        }))
    }

    async fn describe_actor(
        &self,
        request: Request<pb::DescribeActorRequest>,
    ) -> Result<Response<pb::DescribeActorResponse>, Status> {
        let (metadata, _, message) = request.into_parts();
        let actor = convert::actor_id(message.actor.clone())?;
        if let Some(mut owner) = self.remote(&actor, &metadata)? {
            let answer = owner.client.describe_actor(owner.request(message)).await;
            return owner.answer(answer).map(Response::new);
        }
        let Some(d) = self
            .runtime
            .describe_actor(&actor)
            .await
            .map_err(status_of)?
        else {
            return Err(Status::not_found(format!(
                "actor {actor} is not active, has no stored state and no reminders; check the \
                 type and id (`troupe actors list`, `troupe actors list --stored --type {}`)",
                actor.ty
            )));
        };
        Ok(Response::new(pb::DescribeActorResponse {
            actor: Some(convert::actor_ref(&d.actor)),
            node: d.node,
            status: activation_status(d.state) as i32,
            app: d.app.unwrap_or_default(),
            activated_unix_ms: d.activated_unix_ms.unwrap_or(0),
            last_active_unix_ms: d.last_active_unix_ms.unwrap_or(0),
            mailbox_depth: d.mailbox_depth as u64,
            turns: d.turns,
            state: d
                .state_entries
                .into_iter()
                .map(|(key, value, dirty)| pb::StateEntry { key, value, dirty })
                .collect(),
            dirty: d.dirty,
            state_mode: d
                .state_mode
                .map_or(pb::StateMode::Unspecified, state_mode_to_pb)
                as i32,
            reminders: d.reminders.into_iter().map(reminder_to_pb).collect(),
            alarm: d.alarm.map(reminder_to_pb),
            timers: d
                .timers
                .into_iter()
                .map(|t| pb::TimerInfo {
                    name: t.name,
                    next_due_unix_ms: t.next_due_unix_ms,
                    period_ms: t.period.map_or(0, |p| p.as_millis() as u64),
                    keep_alive: t.keep_alive,
                })
                .collect(),
            stored: d.stored,
            inbox_depth: d.inbox_depth as u64,
            dead_letters: d.dead_letters as u64,
            inbox_retries: d
                .inbox_retries
                .into_iter()
                .map(delivery::retry_to_pb)
                .collect(),
        }))
    }

    async fn list_stored_actors(
        &self,
        request: Request<pb::ListStoredActorsRequest>,
    ) -> Result<Response<pb::ListStoredActorsResponse>, Status> {
        let r = request.into_inner();
        if r.r#type.is_empty() {
            return Err(Status::invalid_argument(
                "listing stored actors needs an actor type; set `type`",
            ));
        }
        let after = paging::parse_page_token::<1>(&r.page_token)?.map(|[id]| id);
        let size = paging::page_size(r.page_size);
        let ids = self
            .runtime
            .list_stored_actors(&r.r#type, after, size + 1)
            .await
            .map_err(status_of)?;
        let (ids, next_page_token) = page(ids, size, |id| paging::page_token(&[id]));
        Ok(Response::new(pb::ListStoredActorsResponse {
            ids,
            next_page_token,
        }))
    }

    async fn deactivate_actor(
        &self,
        request: Request<pb::DeactivateActorRequest>,
    ) -> Result<Response<pb::DeactivateActorResponse>, Status> {
        let subject = audit::actor(request.get_ref().actor.as_ref());
        let audit = Audit::of("deactivate", &request, subject);
        audit.after(self.deactivate(request).await)
    }

    async fn purge_actor(
        &self,
        request: Request<pb::PurgeActorRequest>,
    ) -> Result<Response<pb::PurgeActorResponse>, Status> {
        let subject = audit::actor(request.get_ref().actor.as_ref());
        let audit = Audit::of("purge", &request, subject);
        audit.after(self.purge(request).await)
    }

    async fn edit_actor_state(
        &self,
        request: Request<pb::EditActorStateRequest>,
    ) -> Result<Response<pb::EditActorStateResponse>, Status> {
        let subject = audit::edited_keys(request.get_ref());
        let audit = Audit::of("edit state", &request, subject);
        audit.after(self.edit_state(request).await)
    }

    async fn advance_clock(
        &self,
        request: Request<pb::AdvanceClockRequest>,
    ) -> Result<Response<pb::AdvanceClockResponse>, Status> {
        let subject = format!("by {}", request.get_ref().by);
        let audit = Audit::of("advance_clock", &request, subject);
        audit.after(self.move_clock(request).await)
    }

    async fn list_dead_letters(
        &self,
        request: Request<pb::ListDeadLettersRequest>,
    ) -> Result<Response<pb::ListDeadLettersResponse>, Status> {
        dead_letters::list(&self.runtime, request.into_inner()).await
    }

    async fn get_dead_letter(
        &self,
        request: Request<pb::DeadLetterRef>,
    ) -> Result<Response<pb::DeadLetter>, Status> {
        dead_letters::get(&self.runtime, request.into_inner()).await
    }

    async fn redrive_dead_letter(
        &self,
        request: Request<pb::DeadLetterRef>,
    ) -> Result<Response<pb::RedriveDeadLetterResponse>, Status> {
        let audit = Audit::of(
            "redrive_dead_letter",
            &request,
            audit::letter(request.get_ref()),
        );
        audit.after(dead_letters::redrive(&self.runtime, request.into_inner()).await)
    }

    async fn drop_dead_letter(
        &self,
        request: Request<pb::DeadLetterRef>,
    ) -> Result<Response<pb::DropDeadLetterResponse>, Status> {
        let audit = Audit::of(
            "drop_dead_letter",
            &request,
            audit::letter(request.get_ref()),
        );
        audit.after(dead_letters::drop_letter(&self.runtime, request.into_inner()).await)
    }

    type BackupStream = backup::BackupStream;

    async fn backup(
        &self,
        request: Request<pb::BackupRequest>,
    ) -> Result<Response<Self::BackupStream>, Status> {
        // Audited once the copy is taken: streaming it out may still fail.
        let audit = Audit::of("backup", &request, "the store".to_owned());
        audit.after(
            backup::backup(&self.runtime, self.sled.as_ref(), &self.store_metrics)
                .await
                .map(Response::new),
        )
    }
}
