//! Idle deactivation: a sweeper, period a quarter of the shortest idle
//! timeout, deactivates actors idle past their type's timeout, and at once
//! the ones idle longest when the daemon holds more activations than it may
//! (`capacity`). It also ticks the coarse clock that turns stamp their
//! actor's last activity with.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::activation::{Inner, Status};
use crate::shared::Shared;
use crate::shutdown::Stage;
use crate::types::DeactivateReason;

/// How far behind real time the coarse clock may fall.
const COARSE_TICK: Duration = Duration::from_millis(100);

/// Idle now: nothing running, queued or scheduled; what both the sweep
/// and `capacity` may deactivate.
pub(super) fn is_idle(inner: &Inner) -> bool {
    matches!(inner.status, Status::Idle | Status::Unloaded)
        && inner.mailbox.is_empty()
        && !inner.scheduled
}

impl Shared {
    /// Deactivates actors idle past their type's idle timeout, until the
    /// drain begins (the drain ends every activation itself).
    pub(crate) async fn sweep_idle(self: Arc<Self>) {
        // A new type may have a shorter idle timeout: recompute the period.
        let mut registrations = self.hosts.registrations();
        let draining = self.shutdown.reached(Stage::Draining);
        tokio::pin!(draining);
        // Making room looks at every activation: at most once a tick.
        let mut room_at = Instant::now();
        'sweeps: loop {
            self.clock.refresh_coarse();
            let period = (self.min_idle_timeout() / 4)
                // Each sweep touches every activation; with long timeouts a
                // rare sweep is plenty (deactivation stays within 25 % + one
                // period of the timeout).
                .clamp(Duration::from_millis(10), Duration::from_secs(30));
            let sweep_at = Instant::now() + period;
            // The coarse clock ticks faster than sweeps: turns stamp their
            // actor's last activity with it, which `actors get` shows, so it
            // must stay well under a second behind; one store per tick.
            loop {
                let wake = sweep_at.min(Instant::now() + COARSE_TICK);
                tokio::select! {
                    () = tokio::time::sleep_until(wake) => {}
                    changed = registrations.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        continue 'sweeps;
                    }
                    () = &mut draining => return,
                    () = self.over_capacity.notified() => {
                        tokio::time::sleep_until(room_at).await;
                        self.make_room();
                        room_at = Instant::now() + COARSE_TICK;
                    }
                }
                self.clock.refresh_coarse();
                if Instant::now() >= sweep_at {
                    break;
                }
            }
            let now = self.clock.refresh_coarse();
            let default_idle = self.config.default_idle_timeout;
            let mut expired = Vec::new();
            self.directory.for_each(|act| {
                // A busy actor is not idle; skip it rather than wait for its lock.
                let Some(mut inner) = act.inner.try_lock() else {
                    return;
                };
                let idle = inner
                    .binding
                    .as_ref()
                    .map_or(default_idle, |b| b.options.idle_timeout);
                // last_active_ms lags real time by up to one period (coarse
                // clock); adding it means no actor goes before its timeout.
                let needed = (idle + period).as_millis() as u64;
                if u64::from((now as u32).wrapping_sub(inner.last_active_ms)) >= needed
                    && is_idle(&inner)
                {
                    inner.status = Status::Deactivating;
                    expired.push(act.clone());
                }
            });
            for act in expired {
                self.deactivate(act, DeactivateReason::Idle);
            }
        }
    }

    fn min_idle_timeout(&self) -> Duration {
        let mut min = self.config.default_idle_timeout;
        self.hosts
            .for_each_options(|o| min = min.min(o.idle_timeout));
        min
    }
}
