//! Moving a test clock forward (`Runtime::advance_clock`): step by step
//! through every reminder, alarm and timer due on the way, in due order,
//! waiting at each step until what came due has run — so a test reads the
//! state those turns left as soon as the call returns.
//!
//! Only a runtime created with `config.test_clock` has a clock to move;
//! production's scheduling time is the system clock (see `clock`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use crate::clock::TimeSource;
use crate::error::CallError;
use crate::input::millis;
use crate::runtime::Runtime;
use crate::shared::Shared;

/// Steps one advance takes at most; past them the clock jumps to the end
/// and whatever is still due fires as after downtime (its `missed` policy).
/// Bounds an advance of months over a reminder every millisecond.
const MAX_STEPS: usize = 10_000;

/// How often a wait for due work looks again even without news: a
/// reminder deleted while due ends the wait without any firing.
const RECHECK: Duration = Duration::from_millis(20);

/// What an advance did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advanced {
    /// Scheduling time after the advance, in Unix milliseconds.
    pub now_unix_ms: u64,
    /// Reminder firings that succeeded during the advance.
    pub reminders_fired: u64,
    /// Alarm firings that succeeded during the advance.
    pub alarms_fired: u64,
    /// Timer turns delivered during the advance.
    pub timers_fired: u64,
}

#[derive(Clone, Copy)]
struct Counts {
    scheduled: u64,
    alarms: u64,
    timers: u64,
}

impl Shared {
    fn counts(&self) -> Counts {
        Counts {
            scheduled: self.scheduler.fired.load(Ordering::Relaxed),
            alarms: self.scheduler.alarms_fired.load(Ordering::Relaxed),
            timers: self.timers_fired.load(Ordering::Relaxed),
        }
    }

    /// The earliest due time of any reminder, alarm or timer up to `until`.
    async fn next_due(&self, until: u64) -> Result<Option<u64>, CallError> {
        let reminder = self.scheduler.earliest_due(until).await?;
        let timer = self.timers.earliest_due().filter(|&at| at <= until);
        Ok(reminder.into_iter().chain(timer).min())
    }

    /// Waits until nothing is due at or before `at`: every firing due by
    /// then has run and been recorded (or failed and was rescheduled for
    /// later), by `deadline`. A fixed `at`, not the flowing now: a timer
    /// every millisecond would otherwise always have one more due.
    async fn settle(&self, at: u64, deadline: Instant) -> Result<(), CallError> {
        let mut progress = self.scheduler.progress.subscribe();
        loop {
            progress.borrow_and_update();
            if self.next_due(at).await?.is_none() {
                return Ok(());
            }
            tokio::select! {
                _ = progress.changed() => {}
                () = tokio::time::sleep(RECHECK) => {}
                () = tokio::time::sleep_until(deadline) => {
                    return Err(CallError::DeadlineExceeded(format!(
                        "work due at the test clock's time {at} did not finish within {:?}; \
                         is an actor's turn stuck, or its app gone?",
                        self.config.call_timeout
                    )));
                }
            }
        }
    }
}

impl Runtime {
    /// Whether scheduling time is a test clock that [`advance_clock`] moves.
    ///
    /// [`advance_clock`]: Runtime::advance_clock
    pub fn has_test_clock(&self) -> bool {
        self.shared.test_clock.is_some()
    }

    /// Scheduling time now (Unix milliseconds): what durations "from now"
    /// of reminders, alarms and timers count from.
    pub fn schedule_now_ms(&self) -> u64 {
        self.shared.time.now_ms()
    }

    /// Moves the test clock forward by `by`, firing every reminder, alarm
    /// and timer due on the way in due order, each step waiting until what
    /// came due has run. Returns once everything due by the new time has
    /// run (bounded by the call timeout). FAILED_PRECONDITION without a
    /// test clock.
    pub async fn advance_clock(&self, by: Duration) -> Result<Advanced, CallError> {
        let shared: &Arc<Shared> = &self.shared;
        let Some(clock) = shared.test_clock.as_ref() else {
            return Err(CallError::FailedPrecondition(
                "this runtime's scheduling time is the system clock, not a test clock".into(),
            ));
        };
        // Concurrent advances would each wait on the other's firings.
        let _one_at_a_time = shared.advancing.lock().await;
        let deadline = Instant::now() + shared.config.call_timeout;
        // Activations that ended before the call count their retention
        // from their end, not from a mark still on its way.
        let _ = tokio::time::timeout_at(deadline, shared.retention.settled(None)).await;
        let before = shared.counts();
        let target = clock.now_ms().saturating_add(millis(by));
        let mut steps = 0;
        let mut at = clock.now_ms();
        loop {
            shared.settle(at, deadline).await?;
            let Some(next) = shared.next_due(target).await? else {
                break;
            };
            if steps == MAX_STEPS {
                warn!(
                    steps,
                    "advancing the test clock: too many firings on the way; jumping to the end"
                );
                // Timers then fire once for the rest, as reminders do.
                shared.timers_jumped_to_ms.store(target, Ordering::Relaxed);
                break;
            }
            // Never back: what flowing time already passed settles at now.
            at = clock.advance_to(next);
            steps += 1;
        }
        let now_unix_ms = clock.advance_to(target);
        shared.settle(now_unix_ms, deadline).await?;
        let after = shared.counts();
        let advanced = Advanced {
            now_unix_ms,
            reminders_fired: after
                .scheduled
                .saturating_sub(before.scheduled)
                .saturating_sub(after.alarms.saturating_sub(before.alarms)),
            alarms_fired: after.alarms.saturating_sub(before.alarms),
            timers_fired: after.timers.saturating_sub(before.timers),
        };
        info!(
            by_ms = millis(by),
            now_unix_ms,
            steps,
            reminders = advanced.reminders_fired,
            alarms = advanced.alarms_fired,
            timers = advanced.timers_fired,
            "test clock advanced"
        );
        Ok(advanced)
    }
}
