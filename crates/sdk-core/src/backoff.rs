//! The pause between two attempts to attach: doubling from an initial delay
//! up to a cap, each pause jittered by ×0.8–1.2 so that many apps do not
//! re-connect to a restarted daemon in lockstep.

use std::time::Duration;

#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub(crate) fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            next: initial,
        }
    }

    /// Back to the initial delay: the stream before the next outage had
    /// registered, so the daemon was up.
    pub(crate) fn reset(&mut self) {
        self.next = self.initial;
    }

    /// The next pause (jittered), doubling the one after it up to the cap.
    pub(crate) fn next_pause(&mut self) -> Duration {
        let pause = jittered(self.next);
        self.next = self.next.checked_mul(2).unwrap_or(self.max).min(self.max);
        pause
    }
}

/// `pause` times a random factor in 0.8..1.2, as the SDKs' fallback cores
/// draw it: for the app stream's re-connects and for call retries alike.
pub(crate) fn jittered(pause: Duration) -> Duration {
    // No randomness (an OS without a source) is no jitter, not a failure.
    let draw = getrandom::u32().unwrap_or(u32::MAX / 2);
    scaled(pause, 0.8 + 0.4 * (f64::from(draw) / f64::from(u32::MAX)))
}

/// `delay` × `factor`, or `delay` itself if that is no duration (it cannot
/// be for a factor in the jitter's range, but the arithmetic stays checked).
fn scaled(delay: Duration, factor: f64) -> Duration {
    Duration::try_from_secs_f64(delay.as_secs_f64() * factor).unwrap_or(delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn within(pause: Duration, base_ms: u64) -> bool {
        let base = Duration::from_millis(base_ms);
        pause >= scaled(base, 0.8) && pause <= scaled(base, 1.2)
    }

    #[test]
    fn pauses_double_up_to_the_cap_and_start_over_after_a_reset() {
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_millis(300));
        for base in [50, 100, 200, 300, 300] {
            let pause = backoff.next_pause();
            assert!(within(pause, base), "{pause:?} is not {base} ms ±20%");
        }
        backoff.reset();
        let pause = backoff.next_pause();
        assert!(within(pause, 50), "{pause:?} after a reset");
    }

    #[test]
    fn the_jitter_varies_and_stays_in_its_range() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(1));
        let pauses: Vec<Duration> = (0..64).map(|_| backoff.next_pause()).collect();
        assert!(pauses.iter().all(|p| within(*p, 1000)));
        assert!(pauses.iter().any(|p| *p != pauses[0]), "no jitter at all");
    }

    #[test]
    fn a_cap_below_the_initial_delay_caps_the_pauses_after_the_first() {
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::ZERO);
        assert!(within(backoff.next_pause(), 50));
        assert_eq!(backoff.next_pause(), Duration::ZERO);
    }
}
