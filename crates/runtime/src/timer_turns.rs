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
        if !self.is_active(&actor) {
            return Err(CallError::FailedPrecondition(format!(
                "actor {actor} is not active; timers live in an activation, so set them from \
                 inside one of its turns (or use a reminder, which outlives activations)"
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
                // A timer never brings an actor back: only fire while active.
                if !shared.is_active(&target) {
                    break;
                }
                shared
                    .fire_timer(&target, &method, &payload, keep_alive, at)
                    .await;
                let Some(p) = period else { break };
                at = if on_grid {
                    at.saturating_add(millis(p))
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
