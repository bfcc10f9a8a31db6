//! The bound on activations (`RuntimeConfig::max_activations`): idle
//! timeouts alone let a burst of distinct actors, or a scan over many,
//! keep every one of them in memory until its timeout. An activation that
//! takes the daemon past the bound wakes the sweeper, which deactivates the
//! actors idle longest, down to nine tenths of the bound, so a daemon at the
//! bound makes room now and then rather than at every activation. Actors
//! with a turn running, calls queued or work scheduled are not idle and are
//! never chosen: a daemon whose busy actors alone pass the bound keeps them.
//! Memory pressure (`memory_gate`) deactivates idle actors the same way,
//! under a reason of its own.

use std::cmp::Reverse;
use std::sync::Arc;

use tracing::debug;

use super::sweep::is_idle;
use crate::activation::{Activation, Status};
use crate::shared::Shared;
use crate::types::DeactivateReason;

impl Shared {
    /// Activations not on their way out: without a look at each, so that
    /// an activation may ask, and the sweeper looks only when it must.
    pub(crate) fn staying_activations(&self) -> usize {
        self.directory.len().saturating_sub(self.waves.pending())
    }

    /// Past the bound, deactivates the actors idle longest; how many.
    pub(crate) fn make_room(self: &Arc<Self>) -> usize {
        let Some(max) = self.config.max_activations else {
            return 0;
        };
        if self.staying_activations() <= max {
            return 0;
        }
        let (staying, candidates) = self.idle_candidates();
        if staying <= max {
            return 0;
        }
        let target = max.saturating_sub(max / 10);
        let made = self.deactivate_idle_longest(
            candidates,
            staying.saturating_sub(target),
            DeactivateReason::Capacity,
        );
        debug!(
            deactivating = made,
            activations = staying,
            max_activations = max,
            "past --max-activations: deactivating the actors idle longest"
        );
        made
    }

    /// Under memory pressure (`memory_gate`): deactivates the actors idle
    /// longest, `share` of the activations staying (rounded up), as Orleans
    /// sheds activations under memory pressure, but only those idle for
    /// `min_idle_ms` at least: one called since would be called again soon,
    /// and coming back (its state and call records read again) takes more
    /// memory than its going gave; how many.
    pub(crate) fn give_back_activations(self: &Arc<Self>, share: f64, min_idle_ms: u32) -> usize {
        let (staying, mut candidates) = self.idle_candidates();
        candidates.retain(|(idle_ms, _)| *idle_ms >= min_idle_ms);
        let count = (staying as f64 * share.clamp(0.0, 1.0)).ceil() as usize;
        self.deactivate_idle_longest(candidates, count, DeactivateReason::Memory)
    }

    /// Activations staying (not on their way out), and the idle ones among
    /// them with how long each has been idle.
    fn idle_candidates(&self) -> (usize, Vec<(u32, Arc<Activation>)>) {
        let now = self.clock.refresh_coarse() as u32;
        let mut staying = 0usize;
        let mut candidates: Vec<(u32, Arc<Activation>)> = Vec::new();
        self.directory.for_each(|act| {
            // A busy actor is not idle; skip it rather than wait for its lock.
            let Some(inner) = act.inner.try_lock() else {
                staying += 1;
                return;
            };
            if matches!(inner.status, Status::Deactivating | Status::Gone) {
                return;
            }
            staying += 1;
            if is_idle(&inner) {
                candidates.push((now.wrapping_sub(inner.last_active_ms), act.clone()));
            }
        });
        (staying, candidates)
    }

    /// Deactivates up to `count` of `candidates`, those idle longest, and
    /// counts them under `reason` (`Capacity` or `Memory`); how many went.
    fn deactivate_idle_longest(
        self: &Arc<Self>,
        mut candidates: Vec<(u32, Arc<Activation>)>,
        count: usize,
        reason: DeactivateReason,
    ) -> usize {
        let excess = count.min(candidates.len());
        if excess < candidates.len() {
            candidates.select_nth_unstable_by_key(excess, |(idle_ms, _)| Reverse(*idle_ms));
            candidates.truncate(excess);
        }
        let mut going = Vec::with_capacity(candidates.len());
        for (_, act) in candidates {
            let mut inner = act.inner.lock();
            // A call may have come in since the look above.
            if is_idle(&inner) {
                inner.status = Status::Deactivating;
                drop(inner);
                going.push(act);
            }
        }
        let made = going.len();
        match reason {
            DeactivateReason::Memory => self.memory_gate.deactivated(made),
            _ => {
                self.capacity_deactivations
                    .fetch_add(made as u64, std::sync::atomic::Ordering::Relaxed);
            }
        }
        for act in going {
            self.deactivate(act, reason);
        }
        made
    }
}
