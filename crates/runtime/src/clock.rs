//! The runtime's clocks: wall-clock milliseconds for what people and other
//! processes read, a coarse monotonic clock for idle tracking, and the
//! scheduling time of reminders, alarms and timers behind [`TimeSource`] —
//! the system clock in production, a [`TestClock`] a test moves forward.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use tokio::time::Instant;

/// Milliseconds since the Unix epoch (0 if the system clock is before it).
pub fn unix_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Time since the runtime was created, exact and coarse.
#[derive(Debug)]
pub(crate) struct Clock {
    started_at: Instant,
    /// Wall-clock time of `started_at`, for timestamps shown to people.
    started_unix_ms: u64,
    /// Milliseconds since start, refreshed every 100 ms by the idle
    /// sweeper: turns stamp last activity with it, which is then shown to
    /// people to within that tick, and reading it costs nothing on the turn
    /// path.
    coarse_ms: AtomicU64,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Self {
            started_at: Instant::now(),
            started_unix_ms: unix_now_ms(),
            coarse_ms: AtomicU64::new(0),
        }
    }

    pub(crate) fn uptime(&self) -> Duration {
        self.started_at.elapsed()
    }

    pub(crate) fn started_unix_ms(&self) -> u64 {
        self.started_unix_ms
    }

    /// Exact milliseconds since start.
    pub(crate) fn now_ms(&self) -> u64 {
        u64::try_from(self.started_at.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Coarse milliseconds since start, truncated to u32 for activations
    /// (see `Inner::last_active_ms`).
    pub(crate) fn coarse_ms(&self) -> u32 {
        self.coarse_ms.load(Ordering::Relaxed) as u32
    }

    /// Sets the coarse clock to now and returns it.
    pub(crate) fn refresh_coarse(&self) -> u64 {
        let now = self.now_ms();
        self.coarse_ms.store(now, Ordering::Relaxed);
        now
    }

    /// Wall-clock milliseconds of a coarse timestamp (activation clocks are
    /// truncated to u32; `now` recovers the high bits).
    pub(crate) fn unix_ms_of(&self, coarse: u32) -> u64 {
        let now = self.now_ms();
        let ago = u64::from((now as u32).wrapping_sub(coarse));
        self.started_unix_ms + now.saturating_sub(ago)
    }
}

/// Where scheduling time comes from: the "now" that due times of reminders,
/// alarms and timers are computed from and compared with.
pub trait TimeSource: Send + Sync + fmt::Debug {
    /// Scheduling time now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;

    /// A receiver that changes whenever this time jumps forward (as opposed
    /// to flowing with real time), so sleepers wake and look again; `None`
    /// for a source that never jumps.
    fn jumps(&self) -> Option<watch::Receiver<u64>>;
}

/// The system's wall clock: production's scheduling time.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemTimeSource;

impl TimeSource for SystemTimeSource {
    fn now_ms(&self) -> u64 {
        unix_now_ms()
    }

    fn jumps(&self) -> Option<watch::Receiver<u64>> {
        None
    }
}

/// Test-only scheduling time: the wall clock plus an offset that only
/// grows. Time flows as usual (a backoff of a second still passes in a
/// second) and jumps forward when a test advances it; it never goes back,
/// so a due time once passed stays passed.
#[derive(Debug)]
pub struct TestClock {
    /// Milliseconds added to the wall clock.
    offset: watch::Sender<u64>,
}

impl Default for TestClock {
    fn default() -> Self {
        Self::new()
    }
}

impl TestClock {
    pub fn new() -> Self {
        Self {
            offset: watch::Sender::new(0),
        }
    }

    /// Moves time forward so that it is at least `at_ms`; returns the new now.
    pub fn advance_to(&self, at_ms: u64) -> u64 {
        let now = self.now_ms();
        if at_ms > now {
            let by = at_ms - now;
            self.offset
                .send_modify(|offset| *offset = offset.saturating_add(by));
        }
        self.now_ms()
    }

    /// Moves time forward by `by`; returns the new now.
    pub fn advance(&self, by: Duration) -> u64 {
        let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.advance_to(self.now_ms().saturating_add(by))
    }
}

impl TimeSource for TestClock {
    fn now_ms(&self) -> u64 {
        unix_now_ms().saturating_add(*self.offset.borrow())
    }

    fn jumps(&self) -> Option<watch::Receiver<u64>> {
        Some(self.offset.subscribe())
    }
}

/// Sleeps until `source` reads `at_ms` or later: as real time passes, or
/// sooner when the source jumps past it.
pub async fn sleep_until(source: &dyn TimeSource, at_ms: u64) {
    let mut jumps = source.jumps();
    loop {
        let now = source.now_ms();
        if now >= at_ms {
            return;
        }
        let wait = tokio::time::sleep(Duration::from_millis(at_ms - now));
        match jumps.as_mut() {
            None => wait.await,
            Some(rx) => tokio::select! {
                () = wait => {}
                changed = rx.changed() => {
                    if changed.is_err() {
                        jumps = None;
                    }
                }
            },
        }
    }
}

/// Sleeps for `d` of `source`'s time. On a source that never jumps this is
/// a plain monotonic sleep, so a step of the wall clock (NTP, an operator)
/// does not stretch or cut a timer short in production.
pub async fn sleep_for(source: &dyn TimeSource, d: Duration) {
    if source.jumps().is_none() {
        tokio::time::sleep(d).await;
        return;
    }
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    sleep_until(source, source.now_ms().saturating_add(ms)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_clock_only_moves_forward() {
        let clock = TestClock::new();
        let start = clock.now_ms();
        let day = Duration::from_secs(24 * 3600);
        let after = clock.advance(day);
        assert!(after >= start + 24 * 3600 * 1000);
        assert_eq!(clock.advance_to(start), clock.now_ms(), "never back");
        assert!(clock.now_ms() >= after);
    }

    #[tokio::test]
    async fn a_jump_wakes_a_sleeper_at_once() {
        let clock = std::sync::Arc::new(TestClock::new());
        let due = clock.now_ms() + 30 * 24 * 3600 * 1000;
        let sleeper = {
            let clock = clock.clone();
            tokio::spawn(async move { sleep_until(&*clock, due).await })
        };
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished());
        clock.advance_to(due);
        let woke = tokio::time::timeout(Duration::from_secs(5), sleeper).await;
        assert!(
            matches!(woke, Ok(Ok(()))),
            "woke on the jump, not after 30 days"
        );
    }

    #[tokio::test]
    async fn the_system_source_sleeps_in_real_time() {
        let source = SystemTimeSource;
        let start = Instant::now();
        sleep_for(&source, Duration::from_millis(20)).await;
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert!(source.jumps().is_none());
    }
}
