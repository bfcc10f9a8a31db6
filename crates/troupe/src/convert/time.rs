//! Times and durations of reminders, alarms and timers as the API spells
//! them ("90s", "1h30m", ISO 8601 "PT1M30S" and "R5/PT10S", seconds "90",
//! RFC 3339): read
//! from requests, and written when a request is forwarded to another daemon
//! (which reads them back to the same millisecond).

use std::ops::RangeInclusive;
use std::time::Duration;

use time::format_description::well_known::Rfc3339;
use tonic::Status;
#[cfg(test)]
use troupe_runtime::clock::unix_now_ms;
use troupe_runtime::input::{range, UserDuration, UserInstant};

use super::errors::status_of;

/// A duration given for `field` in the daemon's one grammar
/// ([`crate::duration`]), within `allowed`.
pub fn duration(
    field: &str,
    text: &str,
    allowed: &RangeInclusive<Duration>,
) -> Result<UserDuration, Status> {
    let parsed = crate::duration::parse(text).map_err(|why| {
        Status::invalid_argument(format!(
            "{field} {} is not a duration ({why}); {}",
            shown(text.trim()),
            crate::duration::EXAMPLES
        ))
    })?;
    UserDuration::new(field, parsed, allowed).map_err(status_of)
}

/// `text` as an error message may repeat it: quoted, and cut short, so a
/// huge value never makes the answer itself too large.
pub fn shown(text: &str) -> String {
    const MAX: usize = 64;
    match text.char_indices().nth(MAX) {
        None => format!("{text:?}"),
        Some((cut, _)) => format!("{:?}… ({} bytes)", &text[..cut], text.len()),
    }
}

/// A point in time given for `field`: RFC 3339, or a duration from `now`
/// (the runtime's scheduling time, a test clock's under `--test-clock`).
/// Empty means now.
pub fn instant(field: &str, text: &str, now: u64) -> Result<UserInstant, Status> {
    let text = text.trim();
    if text.is_empty() {
        return UserInstant::at(field, now).map_err(status_of);
    }
    if text.contains('T') && text.contains('-') && !text.starts_with('P') {
        let at = time::OffsetDateTime::parse(text, &Rfc3339).map_err(|e| {
            Status::invalid_argument(format!(
                "{field} {} is not an RFC 3339 time ({e}); write e.g. \"2026-12-01T09:00:00Z\" \
                 or \"2026-12-01T10:00:00+01:00\", or a duration from now such as \"10m\"",
                shown(text)
            ))
        })?;
        let ms = u64::try_from(at.unix_timestamp_nanos() / 1_000_000).map_err(|_| {
            Status::invalid_argument(format!("{field} {} is before 1970", shown(text)))
        })?;
        return UserInstant::at(field, ms).map_err(status_of);
    }
    UserInstant::from_now(field, now, duration(field, text, &range::ANY)?).map_err(status_of)
}

/// `unix_ms` as RFC 3339 (UTC, milliseconds), which [`instant`] reads back.
pub fn format_instant(unix_ms: u64) -> String {
    let nanos = i128::from(unix_ms) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        // Past year 9999, which no instant read by `instant` can be.
        .unwrap_or_default()
}

/// `d` as humantime ("1s 500ms"), which [`duration`] reads back.
pub fn format_duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// A period, with the repetition count of an ISO 8601 "R5/PT10S".
pub fn period(text: &str) -> Result<(Option<UserDuration>, Option<u32>), Status> {
    let text = text.trim();
    if text.is_empty() {
        return Ok((None, None));
    }
    let (repeat, rest) = match text.strip_prefix('R').and_then(|r| r.split_once('/')) {
        Some(("", rest)) => (None, rest),
        Some((n, rest)) => match n.parse::<u32>() {
            Ok(n) if n > 0 => (Some(n), rest),
            _ => {
                return Err(Status::invalid_argument(format!(
                    "period {}: the repetition count in R<n>/... must be a whole number from 1 \
                     to {}",
                    shown(text),
                    u32::MAX
                )))
            }
        },
        None => (None, text),
    };
    Ok((Some(duration("period", rest, &range::POSITIVE)?), repeat))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_both_spellings() -> Result<(), Status> {
        let any = |text: &str| duration("due", text, &range::ANY).map(UserDuration::get);
        assert_eq!(any("90s")?, Duration::from_secs(90));
        assert_eq!(any("1h30m")?, Duration::from_secs(5400));
        assert_eq!(any("PT1M30S")?, Duration::from_secs(90));
        assert_eq!(any("P1DT1H")?, Duration::from_secs(90_000));
        assert_eq!(any("90")?, Duration::from_secs(90));
        assert!(any("P1M").is_err(), "months have no fixed length");
        assert!(any("soon").is_err());
        assert!(any("PT-5S").is_err(), "negative, spelled the ISO way");
        assert!(any("-5s").is_err(), "negative, spelled the humantime way");
        let odd = Duration::from_micros(90_061_001_500);
        assert_eq!(any(&format_duration(odd))?, odd);
        let huge = any("584542046090y").err().map(|s| s.message().to_owned());
        assert!(
            huge.is_some_and(|m| m.contains("100y")),
            "far past the longest duration"
        );
        Ok(())
    }

    #[test]
    fn periods_with_repetitions() -> Result<(), Status> {
        let plain = |text: &str| period(text).map(|(every, n)| (every.map(UserDuration::get), n));
        assert_eq!(plain("R5/PT10S")?, (Some(Duration::from_secs(10)), Some(5)));
        assert_eq!(plain("10s")?, (Some(Duration::from_secs(10)), None));
        assert_eq!(plain("")?, (None, None));
        assert!(plain("Rx/PT1S").is_err());
        assert!(
            plain("R0/PT1S").is_err(),
            "zero repetitions would read as unbounded"
        );
        assert!(plain("0s").is_err());
        Ok(())
    }

    #[test]
    fn instants_from_rfc3339_or_durations() -> Result<(), Status> {
        let now = unix_now_ms();
        let at = |text: &str| instant("due", text, now).map(UserInstant::unix_ms);
        assert_eq!(at("2026-01-01T00:00:00Z")?, 1_767_225_600_000);
        assert_eq!(at("2026-01-01T02:00:00+02:00")?, 1_767_225_600_000);
        assert_eq!(at(&format_instant(1_767_225_600_123))?, 1_767_225_600_123);
        assert_eq!(at("10s")?, now + 10_000);
        Ok(())
    }
}
