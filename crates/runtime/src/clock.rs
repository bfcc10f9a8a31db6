//! The runtime's one clock: wall-clock milliseconds for what people and
//! other processes read, and a coarse monotonic clock for idle tracking.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
    /// Milliseconds since start, refreshed by the idle sweeper: idle
    /// tracking needs no more precision than the sweep period, and reading
    /// it costs nothing on the turn path.
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
