//! Ending many activations and waiting until they are gone: hand-off to
//! other daemons, admin deactivation; and fencing, which drops them at once.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::time::Instant;
use tracing::{info, warn};

use crate::activation::{Activation, Status};
use crate::error::CallError;
use crate::routing::lease_lapsed;
use crate::runtime::Runtime;
use crate::shared::Shared;
use crate::types::{ActorId, DeactivateReason};
use crate::validate;

impl Runtime {
    /// Hands off every active actor for which `keep` is false: its running
    /// turn finishes, it deactivates (reason Migration) and its state is
    /// flushed. Returns once all of them are gone, or the shutdown grace
    /// period passed (the error names how many remain).
    pub async fn hand_off(&self, keep: impl Fn(&ActorId) -> bool) -> Result<usize, CallError> {
        let shared = &self.shared;
        let mut leaving = Vec::new();
        shared.directory.for_each(|act| {
            if !keep(&act.id) {
                leaving.push(act.clone());
            }
        });
        let count = leaving.len();
        shared
            .deactivate_all(leaving, DeactivateReason::Migration)
            .await?;
        if count > 0 {
            info!(actors = count, "handed off actors");
        }
        Ok(count)
    }

    /// Ends `actor`'s activation now: a running turn finishes first, the
    /// deactivation hook runs and its state is flushed; waits until it has,
    /// at most the shutdown grace period. Returns whether there was an
    /// activation to end. Calls arriving meanwhile activate it again.
    pub async fn deactivate_actor(&self, actor: &ActorId) -> Result<bool, CallError> {
        validate::name("actor type", &actor.ty)?;
        validate::name("actor id", &actor.id)?;
        let shared = &self.shared;
        let Some(act) = shared.directory.get(actor) else {
            return Ok(false);
        };
        let ended = shared
            .deactivate_all(vec![act], DeactivateReason::Admin)
            .await
            .map_err(|_| {
                CallError::DeadlineExceeded(format!(
                    "actor {actor} did not finish deactivating within {:?} (a long turn, or \
                     the app is slow to answer); check `troupe actors get` and retry",
                    shared.config.shutdown_grace
                ))
            })?;
        Ok(ended > 0)
    }

    /// The placement lease lapsed: another daemon may own these actors now.
    /// Drops every activation at once, without writing its state (a write
    /// now could land after the new owner read the store) and without
    /// waiting for the app; queued calls fail with UNAVAILABLE.
    pub fn fence(&self) {
        let shared = &self.shared;
        let mut dropped = Vec::new();
        shared.directory.for_each(|act| dropped.push(act.clone()));
        let mut unflushed = 0usize;
        for act in &dropped {
            let mut failed = Vec::new();
            shared.directory.remove_if(act, |inner| {
                failed.extend(inner.mailbox.take_all());
                unflushed += usize::from(inner.is_dirty());
                inner.dirty = None;
                inner.binding = None;
                true
            });
            for env in failed {
                env.reply.send(Err(lease_lapsed()));
            }
        }
        shared.timers.end_all();
        warn!(
            activations = dropped.len(),
            unflushed, "placement lease lapsed: dropped every activation without writing"
        );
        shared.notify_if_shutting_down();
    }
}

impl Shared {
    /// Deactivates `acts` (running turns finish first) and waits until each
    /// is gone or re-activated, at most the shutdown grace period. Returns
    /// how many had a live activation to end.
    pub(crate) async fn deactivate_all(
        self: &Arc<Self>,
        acts: Vec<Arc<Activation>>,
        reason: DeactivateReason,
    ) -> Result<usize, CallError> {
        if acts.is_empty() {
            return Ok(0);
        }
        self.admin_waiters.fetch_add(1, Ordering::SeqCst);
        let _waiting = AdminWaiting(self);
        let deadline = Instant::now() + self.config.shutdown_grace;
        let mut requested = vec![false; acts.len()];
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (mut pending, mut ended) = (0usize, 0usize);
            for (act, requested) in acts.iter().zip(requested.iter_mut()) {
                match self.try_deactivate(act, *requested) {
                    Step::Started => {
                        *requested = true;
                        pending += 1;
                        self.deactivate(act.clone(), reason);
                    }
                    Step::Wait => pending += 1,
                    Step::Done(live) => ended += usize::from(live),
                }
            }
            if pending == 0 {
                return Ok(ended);
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Err(CallError::DeadlineExceeded(format!(
                    "{pending} actors did not finish deactivating within {:?} (long turns, or \
                     their app is slow to answer)",
                    self.config.shutdown_grace
                )));
            }
        }
    }

    fn try_deactivate(&self, act: &Arc<Activation>, requested: bool) -> Step {
        let mut inner = act.inner.lock();
        match inner.status {
            Status::Deactivating => Step::Wait,
            // Ours finished: gone, or back to Unloaded because calls came in.
            _ if requested => Step::Done(true),
            Status::Idle => {
                inner.status = Status::Deactivating;
                Step::Started
            }
            Status::Running | Status::Activating => Step::Wait,
            Status::Unloaded | Status::Gone => Step::Done(false),
        }
    }
}

/// One step of deactivating an activation on request.
enum Step {
    /// The activation is now Deactivating on our behalf.
    Started,
    /// A turn or an activation is under way; wait for it.
    Wait,
    /// Nothing (more) to do; whether there was an activation.
    Done(bool),
}

/// Stops counting a caller as waiting on `changed`, however it ends.
struct AdminWaiting<'a>(&'a Arc<Shared>);

impl Drop for AdminWaiting<'_> {
    fn drop(&mut self) {
        self.0.admin_waiters.fetch_sub(1, Ordering::SeqCst);
    }
}
