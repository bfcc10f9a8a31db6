//! Ending activations and waiting until they are gone: one drain loop for
//! a shutdown, a hand-off to other daemons and an admin's deactivation; and
//! fencing, which writes what the activations held under their epochs and
//! drops them all at once.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::time::Instant;
use tracing::{info, warn};

use super::events;
use crate::activation::{Activation, Status};
use crate::error::{CallError, Unavailable};
use crate::routing::lease_lapsed;
use crate::runtime::Runtime;
use crate::shared::Shared;
use crate::types::{ActorId, DeactivateReason};
use crate::validate;

/// Which activations a drain ends. Those picked by a rule are looked up
/// afresh on every pass, so one that activates while the drain runs is
/// ended too.
pub(crate) enum Scope<'a> {
    /// One activation (an admin's deactivation).
    One(Arc<Activation>),
    /// Those whose actor the rule picks (a hand-off: the actors moving away).
    Matching(&'a (dyn Fn(&ActorId) -> bool + Sync)),
    /// All of them (a shutdown).
    Everything,
}

/// The drain's deadline passed with activations still to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DrainTimedOut {
    pub(crate) pending: usize,
}

impl Runtime {
    /// Hands off every active actor for which `keep` is false: its running
    /// turn finishes, it deactivates (reason Migration) and its state is
    /// flushed. Returns how many were handed off once all of them are gone,
    /// or an error once the shutdown grace period passed.
    pub async fn hand_off(
        &self,
        keep: impl Fn(&ActorId) -> bool + Sync,
    ) -> Result<usize, CallError> {
        let shared = &self.shared;
        let leaving = |actor: &ActorId| !keep(actor);
        let deadline = Instant::now() + shared.config.shutdown_grace;
        let count = shared
            .drain(
                Scope::Matching(&leaving),
                DeactivateReason::Migration,
                deadline,
            )
            .await
            .map_err(|DrainTimedOut { pending }| {
                CallError::DeadlineExceeded(format!(
                    "{pending} actors did not finish deactivating within {:?} (long turns, or \
                     their app is slow to answer)",
                    shared.config.shutdown_grace
                ))
            })?;
        if count > 0 {
            info!(actors = count, "handed off actors");
        }
        Ok(count)
    }

    /// Ends `actor`'s activation now: a running turn finishes first, the
    /// deactivation hook runs and its state is flushed; waits until it has,
    /// at most the shutdown grace period. Returns whether there was an
    /// activation to end. Calls arriving meanwhile activate it again. Its
    /// retention mark (`retention`) is stored by then too, so a test clock
    /// moved next counts the retention from this end.
    pub async fn deactivate_actor(&self, actor: &ActorId) -> Result<bool, CallError> {
        validate::name("actor type", &actor.ty)?;
        validate::name("actor id", &actor.id)?;
        let ended = self
            .shared
            .end_activation(actor, "check `troupe actors get` and retry")
            .await?;
        let marked = self.shared.retention.settled(Some(actor));
        let _ = tokio::time::timeout(self.shared.config.call_timeout, marked).await;
        Ok(ended)
    }

    /// The placement lease lapsed at `lapsed_unix_ms`: another daemon may
    /// own these actors now. First writes the unwritten changes under the
    /// epochs they were made under, so the store keeps those of actors no
    /// newer owner has claimed (an election that outlasted the lease moves
    /// nothing) and refuses the rest; bounded by the shutdown flush
    /// timeout, since the store may be what is down. Then drops every
    /// activation at once, without waiting for the app; queued calls fail
    /// with UNAVAILABLE. Call it only once the daemon stopped serving.
    pub async fn fence(&self, lapsed_unix_ms: u64) {
        let shared = &self.shared;
        let node = &shared.config.node;
        let limit = shared.config.shutdown_flush_timeout;
        match tokio::time::timeout(limit, shared.flusher.flush_after_lapse()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, "writing the changes held at a lapsed lease failed"),
            Err(_) => warn!(
                limit_ms = limit.as_millis() as u64,
                "writing the changes held at a lapsed lease did not finish within the shutdown \
                 flush timeout"
            ),
        }
        // The daemon stopped serving when its lease ended (every call checks
        // it), which may be a while ago if the process was paused: that is
        // when its activations ended.
        events::lease_lapsed(node, lapsed_unix_ms);
        let mut dropped = Vec::new();
        shared.directory.for_each(|act| dropped.push(act.clone()));
        let mut unflushed = 0usize;
        for act in &dropped {
            let dirty = shared.drop_unwritten(act, lapsed_unix_ms, lease_lapsed);
            unflushed += usize::from(dirty);
        }
        shared.timers.end_all();
        warn!(
            activations = dropped.len(),
            unflushed, "placement lease lapsed: dropped every activation, those unflushed without their changes"
        );
        shared.notify_drains();
    }
}

impl Shared {
    /// Drops `act` without writing its state or waiting for its app,
    /// because another daemon may own the actor (its activation log entry
    /// ends at `at_unix_ms`); its queued calls fail with `error`. Returns
    /// whether it had unwritten changes.
    pub(crate) fn drop_unwritten(
        &self,
        act: &Arc<Activation>,
        at_unix_ms: u64,
        error: impl Fn() -> CallError,
    ) -> bool {
        let mut failed = Vec::new();
        let mut dirty = false;
        self.directory.remove_if(act, |inner| {
            failed.extend(inner.mailbox.take_all());
            dirty = inner.is_dirty();
            inner.drop_changes();
            inner.binding = None;
            if inner.announced() {
                inner.set_announced(false);
                events::deactivated(&self.config.node, &act.id, "fenced", at_unix_ms);
            }
            // Answers whose records were dropped unwritten must not be
            // replayed by the next activation here.
            self.records.forget(&act.id);
            true
        });
        self.timers.end_actor(&act.id);
        for env in failed {
            env.reply.send(Err(error()));
        }
        dirty
    }
}

impl Shared {
    /// Ends `actor`'s activation as an admin asks (a running turn finishes
    /// first, the hook runs, the state is flushed), waiting at most the
    /// shutdown grace period; whether there was one. `advice` ends the
    /// message of a wait that ran out.
    pub(crate) async fn end_activation(
        self: &Arc<Self>,
        actor: &ActorId,
        advice: &str,
    ) -> Result<bool, CallError> {
        let Some(act) = self.directory.get(actor) else {
            return Ok(false);
        };
        let deadline = Instant::now() + self.config.shutdown_grace;
        let ended = self
            .drain(Scope::One(act), DeactivateReason::Admin, deadline)
            .await
            .map_err(|_| {
                CallError::DeadlineExceeded(format!(
                    "actor {actor} did not finish deactivating within {:?} (a long turn, or \
                     the app is slow to answer); {advice}",
                    self.config.shutdown_grace
                ))
            })?;
        Ok(ended > 0)
    }
}

impl crate::flush::DropRefused for Shared {
    fn drop_refused(&self, act: &Arc<Activation>) {
        let fenced = || -> CallError {
            Unavailable::Fenced {
                actor: act.id.clone(),
            }
            .into()
        };
        self.drop_unwritten(act, crate::clock::unix_now_ms(), fenced);
        self.notify_drains();
    }
}

/// One step of draining an activation.
enum Step {
    /// The activation is now Deactivating on the drain's behalf.
    Started,
    /// A turn, an activation or a deactivation is under way; wait for it.
    Wait,
    /// Nothing (more) to do for it.
    Done,
}

impl Shared {
    /// A shutdown's drain: every activation ends, calls it accepted first;
    /// at most until `deadline`.
    pub(crate) async fn drain_for_shutdown(self: &Arc<Self>, deadline: Instant) {
        let drained = self
            .drain(Scope::Everything, DeactivateReason::Shutdown, deadline)
            .await;
        if let Err(DrainTimedOut { pending }) = drained {
            warn!(
                remaining = pending,
                "shutdown grace period over; flushing what is left"
            );
        }
    }

    /// Deactivates the activations in `scope` (running turns finish first)
    /// and waits until each is gone or re-activated, at most until
    /// `deadline`. Returns how many it ended.
    pub(crate) async fn drain(
        self: &Arc<Self>,
        scope: Scope<'_>,
        reason: DeactivateReason,
        deadline: Instant,
    ) -> Result<usize, DrainTimedOut> {
        self.drains.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(self);
        // Kept alive here, so an address in `ours` is never reused.
        let mut requested: Vec<Arc<Activation>> = Vec::new();
        let mut ours: HashSet<usize> = HashSet::new();
        let address = |act: &Arc<Activation>| Arc::as_ptr(act) as usize;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let targets = match &scope {
                Scope::One(act) => vec![act.clone()],
                Scope::Matching(pick) => {
                    let mut picked = Vec::new();
                    self.directory.for_each(|act| {
                        if pick(&act.id) {
                            picked.push(act.clone());
                        }
                    });
                    picked
                }
                Scope::Everything => {
                    let mut all = Vec::with_capacity(self.directory.len());
                    self.directory.for_each(|act| all.push(act.clone()));
                    all
                }
            };
            let mut pending = 0usize;
            for act in targets {
                match self.drain_step(&act, ours.contains(&address(&act)), reason) {
                    Step::Started => {
                        pending += 1;
                        ours.insert(address(&act));
                        requested.push(act.clone());
                        self.deactivate(act, reason);
                    }
                    Step::Wait => pending += 1,
                    Step::Done => {}
                }
            }
            if pending == 0 {
                return Ok(requested.len());
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Err(DrainTimedOut { pending });
            }
        }
    }

    fn drain_step(&self, act: &Arc<Activation>, requested: bool, reason: DeactivateReason) -> Step {
        let shutdown = reason == DeactivateReason::Shutdown;
        let mut inner = act.inner.lock();
        match inner.status {
            Status::Deactivating => Step::Wait,
            // Ours finished: gone, or back to Unloaded because calls came in.
            _ if requested => Step::Done,
            // A shutdown lets calls it accepted run first; other drains end
            // the activation now, and queued calls start a new one where
            // placement says.
            Status::Idle
                if !shutdown
                    || ((inner.mailbox.is_empty()
                        || inner.mailbox.only_held_retries(tokio::time::Instant::now()))
                        && !inner.scheduled) =>
            {
                // Stored tells waiting here (held retries among them) stay
                // in the store, for the actor's next activation.
                for (seq, retrying) in inner.mailbox.drop_stored_tells() {
                    if retrying {
                        self.retry_given_up(&act.id, seq);
                    }
                }
                inner.status = Status::Deactivating;
                Step::Started
            }
            Status::Idle | Status::Running | Status::Activating => Step::Wait,
            // Never got a host: nothing can run its calls now.
            Status::Unloaded if shutdown && !inner.scheduled => {
                for env in inner.mailbox.take_all() {
                    env.reply.send(Err(Unavailable::ShuttingDown.into()));
                }
                inner.status = Status::Deactivating;
                Step::Started
            }
            // A worker is about to activate it.
            Status::Unloaded if shutdown => Step::Wait,
            Status::Unloaded | Status::Gone => Step::Done,
        }
    }
}

/// Stops counting a drain as waiting on `changed`, however it ends.
struct Waiting<'a>(&'a Arc<Shared>);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.drains.fetch_sub(1, Ordering::SeqCst);
    }
}
