//! Durations and instants a user gave — in a daemon flag, the config file
//! or any request — checked once, where they are given, against the range
//! the field allows. Past that check the values are small enough that the
//! runtime's own arithmetic on them (a due time plus a backoff, now plus a
//! deadline) cannot overflow; it saturates anyway, so nothing a user writes
//! can wrap a time into the past or panic a task.

use std::fmt;
use std::ops::RangeInclusive;
use std::time::Duration;

use crate::error::CallError;

const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

/// The longest duration any field accepts: 100 years.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The latest instant any field accepts: 9999-12-31T23:59:59.999Z, the last
/// one RFC 3339 can write.
pub const MAX_UNIX_MS: u64 = 253_402_300_799_999;

/// Ranges the fields use.
pub mod range {
    use super::{Duration, RangeInclusive, MAX_DURATION};

    /// Zero up to the longest duration: due times from now, grace periods.
    pub const ANY: RangeInclusive<Duration> = RangeInclusive::new(Duration::ZERO, MAX_DURATION);
    /// At least a millisecond: periods, backoffs, timeouts, intervals.
    pub const POSITIVE: RangeInclusive<Duration> =
        RangeInclusive::new(Duration::from_millis(1), MAX_DURATION);
    /// How long something may wait at most at shutdown or for an app.
    pub const UP_TO_A_DAY: RangeInclusive<Duration> =
        RangeInclusive::new(Duration::ZERO, Duration::from_secs(24 * 3600));
}

/// A duration a user gave, within the range of the field it was given for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UserDuration(Duration);

impl UserDuration {
    /// `value`, given for `field`, if it lies in `allowed`; otherwise
    /// INVALID_ARGUMENT naming the field and the range.
    pub fn new(
        field: &str,
        value: Duration,
        allowed: &RangeInclusive<Duration>,
    ) -> Result<Self, CallError> {
        if allowed.contains(&value) {
            return Ok(Self(value));
        }
        Err(CallError::InvalidArgument(format!(
            "{field} {} is out of range; it must be between {} and {}",
            Pretty(value),
            Pretty(*allowed.start()),
            Pretty(*allowed.end()),
        )))
    }

    /// Milliseconds as a user gave them (`field`), within `allowed`.
    pub fn from_millis(
        field: &str,
        ms: u64,
        allowed: &RangeInclusive<Duration>,
    ) -> Result<Self, CallError> {
        Self::new(field, Duration::from_millis(ms), allowed)
    }

    pub fn get(self) -> Duration {
        self.0
    }
}

impl From<UserDuration> for Duration {
    fn from(d: UserDuration) -> Self {
        d.0
    }
}

/// An instant a user gave, as milliseconds since the Unix epoch, no later
/// than [`MAX_UNIX_MS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UserInstant(u64);

impl UserInstant {
    /// `unix_ms`, given for `field`, if it is no later than [`MAX_UNIX_MS`].
    pub fn at(field: &str, unix_ms: u64) -> Result<Self, CallError> {
        if unix_ms <= MAX_UNIX_MS {
            return Ok(Self(unix_ms));
        }
        Err(CallError::InvalidArgument(format!(
            "{field} is {unix_ms} ms after 1970, past the latest instant allowed \
             (9999-12-31T23:59:59.999Z)"
        )))
    }

    /// `after` from `now_unix_ms` (the runtime's scheduling time), for `field`.
    pub fn from_now(field: &str, now_unix_ms: u64, after: UserDuration) -> Result<Self, CallError> {
        let ms = u64::try_from(after.get().as_millis()).unwrap_or(u64::MAX);
        Self::at(field, now_unix_ms.saturating_add(ms))
    }

    pub fn unix_ms(self) -> u64 {
        self.0
    }
}

/// A count a user gave, within `allowed`.
pub fn count(field: &str, value: u64, allowed: &RangeInclusive<u64>) -> Result<u64, CallError> {
    if allowed.contains(&value) {
        return Ok(value);
    }
    Err(CallError::InvalidArgument(format!(
        "{field} {value} is out of range; it must be between {} and {}",
        allowed.start(),
        allowed.end()
    )))
}

/// Milliseconds a duration spans, saturating (for arithmetic on unix ms).
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A duration as people write it, in the largest unit that keeps it exact
/// enough to read ("100y", "24h", "1ms").
struct Pretty(Duration);

impl fmt::Display for Pretty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d >= YEAR && d.as_secs().is_multiple_of(YEAR.as_secs()) {
            write!(f, "{}y", d.as_secs() / YEAR.as_secs())
        } else if d >= YEAR {
            write!(f, "{:.1}y", d.as_secs_f64() / YEAR.as_secs_f64())
        } else {
            write!(f, "{}", humanish(d))
        }
    }
}

fn humanish(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0 => "0s".into(),
        ms if ms.is_multiple_of(3_600_000) => format!("{}h", ms / 3_600_000),
        ms if ms.is_multiple_of(60_000) => format!("{}m", ms / 60_000),
        ms if ms.is_multiple_of(1000) => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_names_the_field_and_the_range() {
        let Err(CallError::InvalidArgument(m)) =
            UserDuration::new("due", Duration::from_secs(u64::MAX), &range::ANY)
        else {
            panic!("accepted");
        };
        assert!(
            m.contains("due") && m.contains("0s") && m.contains("100y"),
            "{m}"
        );
        let Err(CallError::InvalidArgument(m)) =
            UserDuration::from_millis("retry.initial_backoff_ms", 0, &range::POSITIVE)
        else {
            panic!("accepted");
        };
        assert!(m.contains("between 1ms and 100y"), "{m}");
        assert!(UserDuration::new("x", MAX_DURATION, &range::POSITIVE).is_ok());
    }

    #[test]
    fn instants_stop_at_the_year_9999_and_never_wrap() {
        assert!(UserInstant::at("at", MAX_UNIX_MS).is_ok());
        assert!(UserInstant::at("at", MAX_UNIX_MS + 1).is_err());
        let far =
            UserDuration::new("due", MAX_DURATION, &range::ANY).unwrap_or_else(|_| unreachable!());
        let now = crate::clock::unix_now_ms();
        let due = UserInstant::from_now("due", now, far).unwrap_or_else(|_| unreachable!());
        assert!(due.unix_ms() > now);
        assert!(count("repetitions", 0, &(1..=10)).is_err());
    }
}
