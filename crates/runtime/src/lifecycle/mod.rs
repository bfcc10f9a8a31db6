//! The life of an activation: created on the first call, activated through
//! its host (state loaded first), deactivated when idle, asked to, handed
//! off or shut down (state flushed before it is forgotten), dropped without
//! writing when fenced.
//!
//! Status moves Unloaded → Activating → Idle ⇄ Running → Deactivating → Gone
//! (or back to Unloaded when calls arrived during deactivation).
//!
//! - `drain`: the one loop that ends activations and waits until they are
//!   gone (shutdown, hand-off, admin deactivation), and fencing.
//! - `sweep`: idle deactivation.
//! - `events`: the activation log the single-activation checker reads.

mod drain;
pub(crate) mod events;
mod sweep;
pub(crate) mod waves;

use events::Ended;

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::time::Instant;
use tracing::{debug, info, warn};
use troupe_placement::OwnerEpoch;
use troupe_storage::{CallRecord, InboxEntry, StoreError, StoredState};

use crate::activation::{Activation, Envelope, Status};
use crate::error::{CallError, Unavailable};
use crate::host::{ActivateDone, ActivateRequest, ActorHost, DeactivateDone, DeactivateRequest};
use crate::host_registry::HostRegistration;
use crate::idempotency::MAX_IN_MEMORY;
use crate::routing::Route;
use crate::runtime::Runtime;
use crate::shared::Shared;
use crate::types::{ActorId, DeactivateReason, StateChange, TypeSpec, TRACE_TARGET};
use crate::validate;

impl Runtime {
    /// Registers a host for actor types; calls for them start reaching it.
    pub fn register_host(
        &self,
        host: Arc<dyn ActorHost>,
        types: Vec<TypeSpec>,
    ) -> Result<HostRegistration, CallError> {
        let name = host.name().to_owned();
        let registration = self.shared.hosts.register(
            host,
            types,
            &self.shared.config,
            self.shared.metrics.as_deref(),
        )?;
        info!(
            host = %name,
            host_id = registration.host_id,
            types = ?registration.types.iter().map(|t| t.name.to_string()).collect::<Vec<_>>(),
            "host registered"
        );
        Ok(registration)
    }

    /// The host went away: its activations end (state flushed), turns it was
    /// running fail with UNAVAILABLE, queued calls wait for another host.
    pub fn unregister_host(&self, host_id: u64) {
        self.shared.hosts.unregister(host_id);
        let mut idle = Vec::new();
        self.shared.directory.for_each(|act| {
            let mut inner = act.inner.lock();
            if inner.binding.as_ref().is_none_or(|b| b.host_id != host_id) {
                return;
            }
            match inner.status {
                Status::Idle => {
                    inner.status = Status::Deactivating;
                    idle.push(act.clone());
                }
                Status::Running | Status::Activating | Status::Deactivating => {
                    inner.set_host_lost(true);
                }
                Status::Unloaded | Status::Gone => {}
            }
        });
        info!(host_id, activations = idle.len(), "host unregistered");
        for act in idle {
            tokio::spawn(self.shared.clone().finish_deactivation(
                act,
                Vec::new(),
                Ended::AppDetached,
            ));
        }
    }
}

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
                let deadline = Instant::now() + self.config.host_wait;
                self.hosts.wait_for(&act.id.ty, deadline).await
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
                    let complete = records.len() < MAX_IN_MEMORY;
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

    /// The actor's stored state, read under a claim of this daemon's owner
    /// epoch, so that no older owner's write can land after the read (see
    /// `troupe_storage::Epoch`). `None` when the actor is not this daemon's
    /// under its current table.
    /// What an activation reads beside its state: its inbox and the call
    /// records of the retention window.
    async fn load_inbox_and_records(
        &self,
        actor: &ActorId,
    ) -> Result<(Vec<InboxEntry>, Vec<CallRecord>), CallError> {
        let store = self.flusher.store();
        let since = self.records.cutoff(crate::clock::unix_now_ms());
        let (inbox, records) = tokio::join!(
            store.load_inbox(&actor.ty, &actor.id),
            store.load_records(&actor.ty, &actor.id, since, MAX_IN_MEMORY),
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

    /// Takes an activation that never got going out of service: returns its
    /// queued calls and forgets it, unless it still holds unflushed state
    /// (then it stays, unloaded, until that is written).
    pub(crate) fn unload(&self, act: &Arc<Activation>) -> VecDeque<Envelope> {
        let mut queued = VecDeque::new();
        self.directory.remove_if(act, |inner| {
            queued = inner.mailbox.take_all();
            inner.binding = None;
            if inner.is_dirty() {
                inner.status = Status::Unloaded;
                false
            } else {
                // Inside the directory's lock: a next activation cannot
                // load its records before these are gone.
                self.records.forget(&act.id);
                true
            }
        });
        queued
    }

    /// Activation failed: fail the queued calls with `error` and forget the
    /// activation (unless it still holds unflushed state).
    fn abandon(self: &Arc<Self>, act: Arc<Activation>, error: CallError) {
        for env in self.unload(&act) {
            self.count_failed(&act.id.ty, env.kind, &error);
            env.reply.send(Err(error.clone()));
        }
        self.notify_drains();
    }

    /// Deactivates `act` through its host, in waves (see `waves`): it may
    /// wait for a place first.
    pub(crate) fn deactivate(self: &Arc<Self>, act: Arc<Activation>, reason: DeactivateReason) {
        if self.waves.admit(&act, reason) {
            act.inner.lock().set_in_wave(true);
            self.deactivate_now(act, reason);
        }
    }

    fn deactivate_now(self: &Arc<Self>, act: Arc<Activation>, reason: DeactivateReason) {
        let (binding, host_lost) = {
            let inner = act.inner.lock();
            (inner.binding.clone(), inner.host_lost())
        };
        if let Some(metrics) = &self.metrics {
            metrics.deactivated(&act.id.ty, reason);
        }
        match binding {
            Some(binding) if !host_lost => {
                debug!(actor = %act.id, ?reason, "deactivating");
                let span = tracing::info_span!(
                    target: TRACE_TARGET,
                    parent: None,
                    "troupe.deactivate",
                    troupe.actor.r#type = %act.id.ty,
                    troupe.actor.id = %act.id.id,
                    troupe.deactivate.reason = ?reason,
                );
                let request = DeactivateRequest {
                    actor: act.id.clone(),
                    reason,
                };
                binding.host.deactivate(
                    request,
                    DeactivateDone {
                        rt: self.clone(),
                        act: Some(act),
                        reason,
                        _span: span,
                    },
                );
            }
            _ => {
                let how = if host_lost {
                    Ended::AppDetached
                } else {
                    Ended::Deactivated(reason)
                };
                tokio::spawn(self.clone().finish_deactivation(act, Vec::new(), how));
            }
        }
    }

    /// The host answered a deactivation with its last changes (or went
    /// away without answering).
    pub(crate) fn deactivation_finished(
        self: &Arc<Self>,
        act: Arc<Activation>,
        changes: Vec<StateChange>,
        how: Ended,
    ) {
        tokio::spawn(self.clone().finish_deactivation(act, changes, how));
    }

    /// Applies the host's last changes, flushes the actor, then removes it —
    /// or re-activates it if calls arrived meanwhile. The flush comes first
    /// so a new activation can only ever load the latest state.
    pub(crate) async fn finish_deactivation(
        self: Arc<Self>,
        act: Arc<Activation>,
        changes: Vec<StateChange>,
        how: Ended,
    ) {
        // The host has let go of it: it serves nothing from here on.
        let (announced, in_wave) = {
            let mut inner = act.inner.lock();
            let announced = inner.announced();
            inner.set_announced(false);
            let in_wave = inner.in_wave();
            inner.set_in_wave(false);
            (announced, in_wave)
        };
        // Its place in the wave goes to the next waiting deactivation.
        if in_wave {
            if let Some((next, reason)) = self.waves.finished() {
                next.inner.lock().set_in_wave(true);
                self.deactivate_now(next, reason);
            }
        }
        if announced {
            events::ended(&self.config.node, &act.id, how);
        }
        // Timers belong to the activation.
        self.timers.end_actor(&act.id);
        if let Err(e) = validate::state_changes(&changes, self.config.max_payload_bytes) {
            warn!(actor = %act.id, error = %e, "deactivation changes refused");
        } else {
            self.record_changes(&act, &mut act.inner.lock(), &changes);
        }
        if let Err(e) = self.flusher.flush_actor(&act).await {
            warn!(actor = %act.id, error = %e, "flush on deactivation failed; state kept in memory");
        }
        let mut wake = false;
        let removed = self.directory.remove_if(&act, |inner| {
            if inner.mailbox.is_empty() && !inner.is_dirty() {
                self.records.forget(&act.id);
                return true;
            }
            inner.status = Status::Unloaded;
            inner.binding = None;
            inner.set_host_lost(false);
            wake = inner.claim_wake();
            false
        });
        debug!(actor = %act.id, removed, "deactivated");
        if wake {
            self.schedule(act);
        }
        self.notify_drains();
    }
}
