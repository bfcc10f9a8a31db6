//! The runtime's side of timers: a timer's task on its active actor, the
//! TIMER turns it delivers, and deleting it (the table of timers is
//! `schedule::timers`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::oneshot;
use tracing::debug;

use crate::clock::{sleep_for, sleep_until};
use crate::error::CallError;
use crate::input::millis;
use crate::reply::{wait_reply, Reply};
use crate::schedule::timers::{Timer, TimerSpec};
use crate::shared::Shared;
use crate::types::{ActorId, CallExtra, Payload, TurnKind};
use crate::validate;

impl Shared {
    /// Starts a timer on an active actor: fired as TIMER turns after `due`,
    /// then every `period`, until deleted or the actor deactivates.
    pub(crate) fn set_timer_here(self: &Arc<Self>, spec: TimerSpec) -> Result<(), CallError> {
        spec.check()?;
        let TimerSpec {
            actor,
            name,
            due,
            period,
            payload,
            keep_alive,
        } = spec;
        self.check_schedule(&actor, payload.len())?;
        validate::name("timer name", &name)?;
        if !self.is_active_or_activating(&actor) {
            return Err(CallError::FailedPrecondition(format!(
                "actor {actor} is not active; timers live in an activation, so set them from \
                 inside one of its turns or its activation hook (or use a reminder, which \
                 outlives activations)"
            )));
        }
        let shared = self.clone();
        let (target, method) = (actor.clone(), Arc::<str>::from(name.as_str()));
        let first_due = self.time.now_ms().saturating_add(millis(due));
        let next_due_ms = Arc::new(AtomicU64::new(first_due));
        let next = next_due_ms.clone();
        // Under a test clock firings stay on the grid of the first due time,
        // so an advance of a day fires an hourly timer 24 times however long
        // each turn took; in production a timer waits its period after each
        // firing, on the monotonic clock.
        let on_grid = self.test_clock.is_some();
        let task = tokio::spawn(async move {
            let mut at = first_due;
            if on_grid {
                sleep_until(&*shared.time, at).await;
            } else {
                sleep_for(&*shared.time, due).await;
            }
            loop {
                // A timer never brings an actor back: only fire while it is
                // active (or still activating: set by its activation hook).
                if !shared.is_active_or_activating(&target) {
                    break;
                }
                shared
                    .fire_timer(&target, &method, &payload, keep_alive, at)
                    .await;
                let Some(p) = period else { break };
                at = if on_grid {
                    let jumped_to = shared.timers_jumped_to_ms.load(Ordering::Relaxed);
                    next_on_grid(at, millis(p), jumped_to)
                } else {
                    shared.time.now_ms().saturating_add(millis(p))
                };
                next.store(at, Ordering::Relaxed);
                shared.scheduler.note_progress();
                if on_grid {
                    sleep_until(&*shared.time, at).await;
                } else {
                    sleep_for(&*shared.time, p).await;
                }
            }
            next.store(u64::MAX, Ordering::Relaxed);
            shared.scheduler.note_progress();
        });
        self.timers.insert(
            &actor,
            &name,
            Timer {
                task: task.abort_handle(),
                next_due_ms,
                period,
                keep_alive,
            },
        );
        Ok(())
    }

    /// Delivers one TIMER turn, due at `due_unix_ms`. Under a test clock it
    /// also waits for the turn to finish, so `advance_clock` returns after
    /// timer turns ran; in production a timer does not wait for its turns
    /// (they queue).
    async fn fire_timer(
        self: &Arc<Self>,
        target: &ActorId,
        method: &Arc<str>,
        payload: &Payload,
        keep_alive: bool,
        due_unix_ms: u64,
    ) {
        let (reply, done) = if self.test_clock.is_some() {
            let (tx, rx) = oneshot::channel();
            (Reply::To(tx), Some(rx))
        } else {
            (Reply::None, None)
        };
        // Only read to measure lateness: no allocation without metrics.
        let extra = self.metrics.as_ref().map(|_| {
            Box::new(CallExtra {
                timer_due_unix_ms: Some(due_unix_ms),
                ..CallExtra::default()
            })
        });
        let envelope = self.envelope(
            TurnKind::Timer,
            method.clone(),
            payload.clone(),
            extra,
            reply,
        );
        let delivered = envelope.and_then(|mut envelope| {
            envelope.touch = keep_alive;
            self.deliver(target, None, envelope)
        });
        if let Err(e) = delivered {
            debug!(actor = %target, timer = %method, error = %e, "timer firing refused");
            return;
        }
        self.timers_fired.fetch_add(1, Ordering::Relaxed);
        if let Some(done) = done {
            if let Err(e) = wait_reply(target, self.config.call_timeout, done).await {
                debug!(actor = %target, timer = %method, error = %e, "timer turn failed");
            }
        }
    }

    pub(crate) fn delete_timer_here(&self, actor: &ActorId, name: &str) -> Result<bool, CallError> {
        self.check_target(actor)?;
        validate::name("timer name", name)?;
        let existed = self.timers.remove(actor, name);
        // A one-shot timer that fired is gone from the table while its turn
        // may still wait: deleting it then cancels that turn.
        let unqueued = self.fail_waiting(
            actor,
            |env| env.kind == TurnKind::Timer && &*env.name == name,
            |_| {
                CallError::NotFound(format!(
                    "the timer {name} of {actor} was deleted while its turn waited"
                ))
            },
        ) > 0;
        Ok(existed || unqueued)
    }
}

/// The next due time of a timer on the test clock's grid that last fired at
/// `last`: one period on, unless an advance jumped past that to `jumped_to`
/// (out of steps), when the timer, which has just fired once for all it
/// missed, goes on from the first grid time after the jump. Without that,
/// an advance of a month over a timer every second would run 2.6 million
/// turns after it stopped stepping.
fn next_on_grid(last: u64, period: u64, jumped_to: u64) -> u64 {
    let next = last.saturating_add(period);
    if next > jumped_to || period == 0 {
        return next;
    }
    let missed = (jumped_to - next) / period + 1;
    next.saturating_add(missed.saturating_mul(period))
}

#[cfg(test)]
mod tests {
    use super::next_on_grid;

    #[test]
    fn a_timer_goes_on_a_period_later_unless_a_jump_passed_it() {
        assert_eq!(next_on_grid(1_000, 100, 0), 1_100);
        assert_eq!(next_on_grid(1_000, 100, 1_099), 1_100);
        // Jumped past: the first grid time after the jump.
        assert_eq!(next_on_grid(1_000, 100, 1_100), 1_200);
        assert_eq!(next_on_grid(1_000, 100, 5_050), 5_100);
        assert_eq!(next_on_grid(u64::MAX - 5, 100, u64::MAX), u64::MAX);
    }
}
