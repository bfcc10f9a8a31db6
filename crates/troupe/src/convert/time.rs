//! Times and durations of reminders, alarms and timers as the API spells
//! them ("90s", "1h30m", ISO 8601 "PT1M30S" and "R5/PT10S", RFC 3339): read
//! from requests, and written when a request is forwarded to another daemon
//! (which reads them back to the same millisecond).

use std::time::Duration;

use time::format_description::well_known::Rfc3339;
use tonic::Status;
use troupe_runtime::clock::unix_now_ms;

/// A duration: humantime ("90s", "1h30m", "250ms") or ISO 8601 ("PT1M30S").
pub fn duration(what: &str, text: &str) -> Result<Duration, Status> {
    let text = text.trim();
    if let Some(iso) = text.strip_prefix('P').or_else(|| text.strip_prefix('p')) {
        let parsed = iso8601::duration(&format!("P{iso}")).map_err(|e| bad(what, text, &e))?;
        if let iso8601::Duration::YMDHMS { year, month, .. } = parsed {
            if year > 0 || month > 0 {
                return Err(Status::invalid_argument(format!(
                    "{what} {text:?} uses years or months, which have no fixed length; use days (P30D) instead"
                )));
            }
        }
        return Ok(parsed.into());
    }
    humantime::parse_duration(text).map_err(|e| bad(what, text, &e.to_string()))
}

fn bad(what: &str, text: &str, why: &str) -> Status {
    Status::invalid_argument(format!(
        "{what} {text:?} is not a duration ({why}); write e.g. \"90s\", \"1h30m\" or ISO 8601 \"PT1M30S\""
    ))
}

/// A point in time: RFC 3339, or a duration from now. Empty means now.
pub fn instant(what: &str, text: &str) -> Result<u64, Status> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(unix_now_ms());
    }
    if text.contains('T') && text.contains('-') && !text.starts_with('P') {
        let at = time::OffsetDateTime::parse(text, &Rfc3339)
            .map_err(|e| {
                Status::invalid_argument(format!(
                    "{what} {text:?} is not an RFC 3339 time ({e}); write e.g. \"2026-12-01T09:00:00Z\" \
                     or \"2026-12-01T10:00:00+01:00\", or a duration from now such as \"10m\""
                ))
            })?;
        let ms = at.unix_timestamp_nanos() / 1_000_000;
        return u64::try_from(ms)
            .map_err(|_| Status::invalid_argument(format!("{what} {text:?} is before 1970")));
    }
    Ok(unix_now_ms() + duration(what, text)?.as_millis() as u64)
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
pub fn period(text: &str) -> Result<(Option<Duration>, Option<u32>), Status> {
    let text = text.trim();
    if text.is_empty() {
        return Ok((None, None));
    }
    let (repeat, rest) = match text.strip_prefix('R').and_then(|r| r.split_once('/')) {
        Some(("", rest)) => (None, rest),
        Some((n, rest)) => {
            let n: u32 = n.parse().map_err(|_| {
                Status::invalid_argument(format!(
                    "period {text:?}: the repetition count in R<n>/... must be a whole number"
                ))
            })?;
            (Some(n), rest)
        }
        None => (None, text),
    };
    let every = duration("period", rest)?;
    if every < Duration::from_millis(1) {
        return Err(Status::invalid_argument("a period must be at least 1 ms"));
    }
    Ok((Some(every), repeat))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_both_spellings() -> Result<(), Status> {
        assert_eq!(duration("due", "90s")?, Duration::from_secs(90));
        assert_eq!(duration("due", "1h30m")?, Duration::from_secs(5400));
        assert_eq!(duration("due", "PT1M30S")?, Duration::from_secs(90));
        assert_eq!(duration("due", "P1DT1H")?, Duration::from_secs(90_000));
        assert!(
            duration("due", "P1M").is_err(),
            "months have no fixed length"
        );
        assert!(duration("due", "soon").is_err());
        let odd = Duration::from_micros(90_061_001_500);
        assert_eq!(duration("due", &format_duration(odd))?, odd);
        Ok(())
    }

    #[test]
    fn periods_with_repetitions() -> Result<(), Status> {
        assert_eq!(
            period("R5/PT10S")?,
            (Some(Duration::from_secs(10)), Some(5))
        );
        assert_eq!(period("10s")?, (Some(Duration::from_secs(10)), None));
        assert_eq!(period("")?, (None, None));
        assert!(period("Rx/PT1S").is_err());
        Ok(())
    }

    #[test]
    fn instants_from_rfc3339_or_durations() -> Result<(), Status> {
        assert_eq!(instant("due", "2026-01-01T00:00:00Z")?, 1_767_225_600_000);
        assert_eq!(
            instant("due", "2026-01-01T02:00:00+02:00")?,
            1_767_225_600_000
        );
        assert_eq!(
            instant("due", &format_instant(1_767_225_600_123))?,
            1_767_225_600_123
        );
        let soon = instant("due", "10s")?;
        let now = unix_now_ms();
        assert!(soon >= now + 9_000 && soon <= now + 11_000);
        Ok(())
    }
}
