//! Writes the store refused because a newer owner has the actor.
//!
//! A refusal is final (the activation is dropped without writing, its
//! durable callers told) unless this daemon owns the actor under a newer
//! table than the refused write's epoch while its activation still lives:
//! then the epoch was raised by this daemon's own newer write (a reminder
//! written under the newer table), not by another owner, and the keys are
//! simply written again under the newer epoch. An activation that lost its
//! actor to another daemon does not survive to see a newer table naming
//! this daemon again: the fence on the lapsed lease drops it first.
//!
//! A refused activation leaves the directory before any caller hears of the
//! refusal, so no later call can land in it and write its stale state under
//! a newer table.

use std::collections::HashSet;
use std::sync::{Arc, Weak};

use tracing::warn;
use troupe_placement::OwnerEpoch;
use troupe_storage::{ActorWrite, FencedActor};

use super::{Flusher, HeldReply};
use crate::activation::{Activation, Status};
use crate::error::Unavailable;

/// Drops an activation whose write the store refused: out of the directory,
/// its queued calls failed. The runtime implements it; the flusher holds it
/// weakly, since the runtime owns the flusher.
pub(crate) trait DropRefused: Send + Sync {
    fn drop_refused(&self, act: &Arc<Activation>);
}

/// The flusher's handle on the runtime, set once the runtime exists.
pub(crate) type Dropper = std::sync::OnceLock<Weak<dyn DropRefused>>;

/// What becomes of one refused write.
pub(super) enum Verdict {
    /// This daemon's own newer write raised the epoch: write it again.
    Retry(ActorWrite),
    /// Another owner has the actor.
    Refused,
}

impl Flusher {
    /// The verdict on each write the store refused, by its index in the
    /// batch.
    pub(super) fn sort_fenced(
        &self,
        writes: &[ActorWrite],
        acts: &[Arc<Activation>],
        fenced: Vec<FencedActor>,
    ) -> Vec<(usize, Verdict)> {
        if fenced.is_empty() {
            return Vec::new();
        }
        let refused: HashSet<(&str, &str)> = fenced
            .iter()
            .map(|f| (f.actor_type.as_str(), f.actor_id.as_str()))
            .collect();
        let mut verdicts = Vec::with_capacity(fenced.len());
        for (i, (write, act)) in writes.iter().zip(acts).enumerate() {
            if !refused.contains(&(write.actor_type.as_str(), write.actor_id.as_str())) {
                continue;
            }
            let newer = match (
                self.placement.epoch(&write.actor_type, &write.actor_id),
                write.epoch,
            ) {
                (OwnerEpoch::Owned(now), Some(sent)) => now > sent,
                _ => false,
            };
            let alive = act.inner.lock().status != Status::Gone;
            verdicts.push((
                i,
                if newer && alive {
                    Verdict::Retry(write.clone())
                } else {
                    Verdict::Refused
                },
            ));
        }
        verdicts
    }

    /// Answers the replies held for a batch: those of refused actors fail,
    /// those of actors written again wait for that write, the rest get
    /// their results.
    pub(super) fn answer_held(
        &self,
        held: Vec<HeldReply>,
        refused: &[Arc<Activation>],
        retried: &[Arc<Activation>],
    ) {
        let key = |act: &Arc<Activation>| Arc::as_ptr(act) as usize;
        let refused: HashSet<usize> = refused.iter().map(key).collect();
        let retried: HashSet<usize> = retried.iter().map(key).collect();
        let mut waiting = Vec::new();
        for (act, reply, result) in held {
            // Dropped by a fence after the reply was held: its changes may
            // have been taken from the batch before they were written.
            if refused.contains(&key(&act)) || act.inner.lock().changes_dropped() {
                reply.send(Err(Unavailable::Fenced {
                    actor: act.id.clone(),
                }
                .into()));
            } else if retried.contains(&key(&act)) {
                waiting.push((act, reply, result));
            } else {
                reply.send(result);
            }
        }
        if !waiting.is_empty() {
            self.held.lock().extend(waiting);
            self.wake.notify_one();
        }
    }

    /// Drops `refused` activations without writing (they are stale: another
    /// daemon owns the actors), before their held replies are answered.
    pub(super) fn refuse(&self, refused: &[Arc<Activation>]) {
        let dropper = self.dropper.get().and_then(Weak::upgrade);
        for act in refused {
            warn!(
                actor = %act.id,
                "a newer owner has this actor (the store refused this daemon's write, or the \
                 table no longer gives it here): dropping its activation without writing"
            );
            if let Some(metrics) = &self.metrics {
                metrics.write_fenced();
            }
            match &dropper {
                Some(dropper) => dropper.drop_refused(act),
                // The runtime is gone only at the very end of a shutdown,
                // when nothing is served any more.
                None => act.inner.lock().drop_changes(),
            }
        }
    }
}
