//! The life of an activation: created on the first call, activated through
//! its host (state loaded first), deactivated when idle, asked to, handed
//! off or shut down (state flushed before it is forgotten), dropped without
//! writing when fenced.
//!
//! Status moves Unloaded → Activating → Idle ⇄ Running → Deactivating → Gone
//! (or back to Unloaded when calls arrived during deactivation).
//!
//! - `activate`: from a first call to a live activation: a host, the
//!   claim, state, inbox and call records read, the host's hook.
//! - `drain`: the one loop that ends activations and waits until they are
//!   gone (shutdown, hand-off, admin deactivation), and fencing.
//! - `sweep`: idle deactivation.
//! - `capacity`: deactivating the actors idle longest past
//!   `--max-activations`.
//! - `events`: the activation log the single-activation checker reads.
//! - `purge`: an operator's erasure of everything stored for an actor;
//!   `edit_state`: an operator's repair of some of its state keys; both
//!   hold the actor unloaded meanwhile (`held_actor`, `hold`).

mod activate;
mod capacity;
mod drain;
pub(crate) mod edit_state;
pub(crate) mod events;
mod expire_keys;
mod held_actor;
pub(crate) mod hold;
pub(crate) mod purge;
mod sweep;
pub(crate) mod waves;

use events::Ended;

use std::collections::VecDeque;
use std::sync::Arc;

use tracing::{debug, info, warn};

use crate::activation::{Activation, Envelope, Status};
use crate::error::CallError;
use crate::host::{ActorHost, DeactivateDone, DeactivateRequest};
use crate::host_registry::HostRegistration;
use crate::runtime::Runtime;
use crate::shared::Shared;
use crate::types::{DeactivateReason, StateChange, TypeSpec, TRACE_TARGET};
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
        // Set by an activation hook that then failed: they die with it.
        self.timers.end_actor(&act.id);
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
        if announced {
            self.retention_ended(&act.id);
            let state = act.inner.lock().state.clone();
            self.expiry_changed(&act.id, None, &state);
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
