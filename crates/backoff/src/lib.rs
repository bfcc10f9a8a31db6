//! The pauses between attempts to re-open a connection: doubling from an
//! initial pause up to a cap, each jittered so that many clients cut off
//! together (apps from a restarted daemon, daemons from a lost peer, watches
//! from a restarted daemon) do not come back in lockstep.
//!
//! One policy for every re-dial in Troupe: the daemon's peer links
//! (`troupe-transport`), the SDKs' app streams and call retries
//! (`troupe-sdk-core`, whose pure-language fallbacks draw the same jitter),
//! and the CLI's watches. Each chooses its pauses and jitter; when the
//! doubling starts over is the caller's to say ([`Backoff::reset`]).

use std::ops::RangeInclusive;
use std::time::Duration;

/// The pause before each next attempt: `initial`, doubling up to `max`.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
    jitter: RangeInclusive<f64>,
}

impl Backoff {
    /// Pauses from `initial` doubling up to `max`, jittered by a factor in
    /// `jitter` (e.g. `0.8..=1.2`; `1.0..=1.0` for none).
    pub fn new(initial: Duration, max: Duration, jitter: RangeInclusive<f64>) -> Self {
        Self {
            initial,
            max,
            next: initial,
            jitter,
        }
    }

    /// Back to the initial pause: the connection was up again.
    pub fn reset(&mut self) {
        self.next = self.initial;
    }

    /// The next pause, jittered; the one after it is twice as long (before
    /// jitter), up to the cap.
    pub fn next_pause(&mut self) -> Duration {
        let pause = self.next;
        self.next = pause.saturating_mul(2).min(self.max);
        jittered(pause, &self.jitter)
    }
}

/// `pause` times a random factor in `factors`.
pub fn jittered(pause: Duration, factors: &RangeInclusive<f64>) -> Duration {
    // No randomness (an OS without a source) is the middle of the range, not
    // a failure.
    let draw = getrandom::u32().unwrap_or(u32::MAX / 2);
    let share = f64::from(draw) / f64::from(u32::MAX);
    let factor = factors.start() + (factors.end() - factors.start()) * share;
    scaled(pause, factor)
}

/// `pause` × `factor`, or `pause` itself if that is no duration (a negative
/// or non-finite factor).
fn scaled(pause: Duration, factor: f64) -> Duration {
    Duration::try_from_secs_f64(pause.as_secs_f64() * factor).unwrap_or(pause)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SDK: RangeInclusive<f64> = 0.8..=1.2;

    fn within(pause: Duration, base_ms: u64, factors: &RangeInclusive<f64>) -> bool {
        let base = Duration::from_millis(base_ms);
        pause >= scaled(base, *factors.start()) && pause <= scaled(base, *factors.end())
    }

    #[test]
    fn pauses_double_up_to_the_cap_and_start_over_after_a_reset() {
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_millis(300), SDK);
        for base in [50, 100, 200, 300, 300] {
            let pause = backoff.next_pause();
            assert!(within(pause, base, &SDK), "{pause:?} is not {base} ms ±20%");
        }
        backoff.reset();
        let pause = backoff.next_pause();
        assert!(within(pause, 50, &SDK), "{pause:?} after a reset");
    }

    #[test]
    fn the_jitter_varies_and_stays_in_its_range() {
        let half_to_all = 0.5..=1.0;
        let mut backoff = Backoff::new(
            Duration::from_secs(1),
            Duration::from_secs(1),
            half_to_all.clone(),
        );
        let pauses: Vec<Duration> = (0..64).map(|_| backoff.next_pause()).collect();
        assert!(pauses.iter().all(|p| within(*p, 1000, &half_to_all)));
        assert!(pauses.iter().any(|p| *p != pauses[0]), "no jitter at all");
    }

    #[test]
    fn no_jitter_gives_the_exact_pauses() {
        let mut backoff = Backoff::new(
            Duration::from_millis(100),
            Duration::from_secs(5),
            1.0..=1.0,
        );
        let pauses: Vec<u128> = (0..8).map(|_| backoff.next_pause().as_millis()).collect();
        assert_eq!(pauses, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
    }

    #[test]
    fn a_cap_below_the_initial_pause_caps_the_pauses_after_the_first() {
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::ZERO, SDK);
        assert!(within(backoff.next_pause(), 50, &SDK));
        assert_eq!(backoff.next_pause(), Duration::ZERO);
    }

    #[test]
    fn pauses_stop_growing_at_the_cap_however_many_attempts() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::MAX, 1.0..=1.0);
        for _ in 0..200 {
            backoff.next_pause();
        }
        assert_eq!(backoff.next_pause(), Duration::MAX);
    }
}
