//! Activating an actor: finding a host (waiting a bounded time), claiming
//! it and reading its state, inbox and call records, then the host's
//! activation hook and its answer.

use std::sync::Arc;

use tokio::time::Instant;
use tracing::debug;
use troupe_placement::OwnerEpoch;
use troupe_storage::{InboxEntry, RecordedKey, StoreError, StoredState};

use crate::activation::{Activation, Status};
use crate::error::{CallError, Unavailable};
use crate::host::{ActivateDone, ActivateRequest};
use crate::idempotency::LOAD_LIMIT;
use crate::routing::Route;
use crate::shared::Shared;
use crate::shutdown::Stage;
use crate::types::{ActorId, StateChange, TRACE_TARGET};
use crate::validate;

use super::events::{self, Ended};

impl Shared {
    /// Finds a host (waiting a bounded time), loads state, asks the host to
    /// create the instance.
    pub(crate) async fn activate(self: Arc<Self>, act: Arc<Activation>) {
        // Part of the trace of the call that caused it, when it has one.
        let parent = {
            let inner = act.inner.lock();
            inner.mailbox.first_trace_span()
        };
        let span = tracing::info_span!(
            target: TRACE_TARGET,
            parent: parent.as_ref().and_then(|s| s.id()),
            "troupe.activate",
            troupe.actor.r#type = %act.id.ty,
            troupe.actor.id = %act.id.id,
            otel.status_code = tracing::field::Empty,
            error = tracing::field::Empty,
        );
        let error_span = span.clone();
        if let Err(error) =
            tracing::Instrument::instrument(self.clone().activate_in_span(act, span.clone()), span)
                .await
        {
            error_span.record("otel.status_code", "ERROR");
            error_span.record("error", tracing::field::display(&error));
        }
    }

    /// Errors are the ones the queued calls failed with.
    async fn activate_in_span(
        self: Arc<Self>,
        act: Arc<Activation>,
        span: tracing::Span,
    ) -> Result<(), CallError> {
        // The table may have changed since the calls were routed here.
        if self.route(&act.id).ok() != Some(Route::Local) {
            self.reroute_mailbox(&act);
            return Ok(());
        }
        let binding = match self.hosts.pick(&act.id.ty) {
            Some(b) => Some(b),
            None => {
                debug!(actor = %act.id, "waiting for an app that hosts the type");
                let deadline = Instant::now() + self.host_wait_for(&act.id.ty);
                tokio::select! {
                    binding = self.hosts.wait_for(&act.id.ty, deadline) => binding,
                    // No app comes back to a stopping daemon: waiting would
                    // hold the drain open for its whole grace period.
                    () = self.shutdown.reached(Stage::Draining) => {
                        let error = CallError::from(Unavailable::ShuttingDown);
                        self.abandon(act, error.clone());
                        return Err(error);
                    }
                }
            }
        };
        let Some(binding) = binding else {
            // Never registered at all is the same answer as after the start-up
            // window: the type is unknown. Registered before means its app is away.
            let error = if self.hosts.options(&act.id.ty).is_none() {
                self.unknown_type(&act.id.ty)
            } else {
                Unavailable::NoHost {
                    actor_type: act.id.ty.to_string(),
                    waited: self.config.host_wait,
                }
                .into()
            };
            self.abandon(act, error.clone());
            return Err(error);
        };
        if !act.inner.lock().state_loaded() {
            match self.load_claimed(&act.id).await {
                Ok(Some(entries)) => {
                    // The inbox and call records are read after the claim,
                    // so no older owner's write can land after them.
                    let (inbox, records) = match self.load_inbox_and_records(&act.id).await {
                        Ok(both) => both,
                        Err(error) => {
                            self.abandon(act, error.clone());
                            return Err(error);
                        }
                    };
                    let mut inner = act.inner.lock();
                    inner.state = entries.into_iter().collect();
                    let complete = records.len() < LOAD_LIMIT;
                    self.records.loaded(&act.id, records, complete);
                    inner.set_state_loaded();
                    self.inbox_loaded(&act, &mut inner, inbox);
                }
                // The table moved on while the calls waited: route again.
                Ok(None) => {
                    self.reroute_mailbox(&act);
                    return Ok(());
                }
                Err(error) => {
                    self.abandon(act, error.clone());
                    return Err(error);
                }
            }
        }
        let state = {
            let mut inner = act.inner.lock();
            inner.binding = Some(binding.clone());
            inner.set_host_lost(false);
            // Exact: once per activation, and shown to people as its time.
            inner.activated_ms = self.clock.now_ms() as u32;
            // Also a state kept loaded since an earlier activation (its
            // changes unwritten) may hold keys that expired meanwhile.
            self.expire_at_load(&act, &mut inner);
            inner.state.clone()
        };
        if let Some(stats) = &binding.stats {
            stats.activated();
        }

        debug!(actor = %act.id, host = binding.host.name(), "activating");
        let request = ActivateRequest {
            actor: act.id.clone(),
            state,
            lease_deadline_unix_ms: self.placement.lease_end_unix_ms().unwrap_or(0),
        };
        binding.host.activate(
            request,
            ActivateDone {
                rt: self.clone(),
                act: Some(act),
                // Open until the host answers.
                _span: span,
            },
        );
        Ok(())
    }

    /// What an activation reads beside its state: its inbox and the keys of
    /// its call records of the retention window.
    async fn load_inbox_and_records(
        &self,
        actor: &ActorId,
    ) -> Result<(Vec<InboxEntry>, Vec<RecordedKey>), CallError> {
        let store = self.flusher.store();
        let since = self.records.cutoff(crate::clock::unix_now_ms());
        let (inbox, records) = tokio::join!(
            store.load_inbox(&actor.ty, &actor.id),
            store.load_record_keys(&actor.ty, &actor.id, since, LOAD_LIMIT),
        );
        let failed = |what: String, source| -> CallError {
            Unavailable::Store {
                what,
                source,
                remedy: "the actor is activated again by its next call",
            }
            .into()
        };
        let inbox =
            inbox.map_err(|e| failed(format!("cannot read the inbox of actor {actor}"), e))?;
        let records = records
            .map_err(|e| failed(format!("cannot read the call records of actor {actor}"), e))?;
        Ok((inbox, records))
    }

    /// The actor's stored state, read under a claim of this daemon's owner
    /// epoch, so that no older owner's write can land after the read (see
    /// `troupe_storage::Epoch`). `None` when the actor is not this daemon's
    /// under its current table.
    async fn load_claimed(&self, actor: &ActorId) -> Result<Option<StoredState>, CallError> {
        let store = self.flusher.store();
        let cannot_load = |e| Unavailable::store(format!("cannot load the state of {actor}"), e);
        // Refused, it tries again only under a newer table: this daemon's
        // own write under that table (a reminder) may have raised the epoch
        // past the first claim. Tables only move on, so this ends.
        let mut refused: Option<u64> = None;
        loop {
            let epoch = match self.placement.epoch(&actor.ty, &actor.id) {
                OwnerEpoch::Unfenced => {
                    return match store.load(&actor.ty, &actor.id).await {
                        Ok(state) => Ok(Some(state)),
                        Err(e) => Err(cannot_load(e).into()),
                    };
                }
                OwnerEpoch::NotOwned => return Ok(None),
                OwnerEpoch::Owned(epoch) => epoch,
            };
            if refused.is_some_and(|r| epoch <= r) {
                return Err(Unavailable::Fenced {
                    actor: actor.clone(),
                }
                .into());
            }
            match store.claim(&actor.ty, &actor.id, epoch).await {
                Ok(state) => return Ok(Some(state)),
                Err(StoreError::Fenced { .. }) => refused = Some(epoch),
                Err(e) => return Err(cannot_load(e).into()),
            }
        }
    }

    pub(crate) fn activation_finished(
        self: &Arc<Self>,
        act: Arc<Activation>,
        outcome: Result<Vec<StateChange>, CallError>,
    ) {
        let outcome = outcome.and_then(|changes| {
            validate::state_changes(&changes, self.config.max_payload_bytes).map(|()| changes)
        });
        match outcome {
            Ok(changes) => {
                let mut inner = act.inner.lock();
                self.record_changes(&act, &mut inner, &changes);
                inner.last_active_ms = self.clock.coarse_ms();
                inner.set_announced(true);
                let host_lost = inner.host_lost();
                if host_lost {
                    inner.status = Status::Deactivating;
                }
                drop(inner);
                events::activated(&self.config.node, &act.id);
                self.retention_started(&act.id);
                if host_lost {
                    tokio::spawn(self.clone().finish_deactivation(
                        act,
                        Vec::new(),
                        Ended::AppDetached,
                    ));
                    return;
                }
                let mut inner = act.inner.lock();
                inner.status = Status::Idle;
                let wake = inner.claim_wake();
                drop(inner);
                if wake {
                    self.schedule(act);
                }
                self.notify_drains();
            }
            // The host left before the instance existed: start over with
            // another host; the calls keep their own deadlines.
            Err(CallError::Unavailable(reason)) => {
                debug!(actor = %act.id, %reason, "activation lost its host; retrying");
                // The lost instance's hook may have set some; the next one's sets its own.
                self.timers.end_actor(&act.id);
                let mut inner = act.inner.lock();
                inner.binding = None;
                inner.set_host_lost(false);
                inner.status = Status::Unloaded;
                let wake = inner.claim_wake();
                drop(inner);
                if wake {
                    self.schedule(act);
                } else {
                    self.abandon(act, CallError::Unavailable(reason));
                }
            }
            Err(error) => self.abandon(act, error),
        }
    }
}
