//! The one duration grammar of the daemon side: `serve` and `placement`
//! flags, the config file, and the API's reminder, alarm and timer fields
//! all read durations here, so each accepts what the SDKs accept: humantime
//! ("90s", "1h30m", "250ms"), ISO 8601 ("PT1M30S", "P1DT1H") and a plain
//! number of seconds ("90", "1.5").

use std::time::Duration;

/// Why a text is not a duration; shown after the text and the name of the
/// flag, file key or request field it was given for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("a duration cannot be negative")]
    Negative,
    #[error("it uses years or months, which have no fixed length; use days (P30D) instead")]
    Calendar,
    #[error("{0}")]
    Syntax(String),
}

/// What every message about a bad duration suggests.
pub const EXAMPLES: &str = "write e.g. \"90s\", \"1h30m\", ISO 8601 \"PT1M30S\" or seconds (90)";

/// Reads a duration in any of the three spellings.
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    if let Some(iso) = text.strip_prefix('P').or_else(|| text.strip_prefix('p')) {
        if iso.contains('-') {
            return Err(DurationError::Negative);
        }
        let parsed = iso8601::duration(&format!("P{iso}")).map_err(DurationError::Syntax)?;
        if let iso8601::Duration::YMDHMS { year, month, .. } = parsed {
            if year > 0 || month > 0 {
                return Err(DurationError::Calendar);
            }
        }
        return Ok(parsed.into());
    }
    if let Some(seconds) = plain_seconds(text) {
        return seconds;
    }
    humantime::parse_duration(text).map_err(|e| DurationError::Syntax(e.to_string()))
}

/// `Some` when `text` is a number and nothing else (digits, one dot, an
/// optional minus): seconds, as the SDKs take a bare number.
fn plain_seconds(text: &str) -> Option<Result<Duration, DurationError>> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let numeric = !digits.is_empty()
        && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
        && digits.chars().filter(|&c| c == '.').count() <= 1
        && digits.chars().any(|c| c.is_ascii_digit());
    if !numeric {
        return None;
    }
    if text.starts_with('-') {
        return Some(Err(DurationError::Negative));
    }
    Some(seconds(digits.parse::<f64>().unwrap_or(f64::NAN)))
}

fn seconds(value: f64) -> Result<Duration, DurationError> {
    if value < 0.0 {
        return Err(DurationError::Negative);
    }
    Duration::try_from_secs_f64(value)
        .map_err(|_| DurationError::Syntax(format!("{value} seconds is out of range")))
}

/// A flag's value parser (clap names the flag in front of the message).
pub fn flag(text: &str) -> Result<Duration, String> {
    parse(text).map_err(|e| format!("not a duration ({e}); {EXAMPLES}"))
}

/// serde for an optional duration in the config file: a string in the
/// grammar above, or a TOML number of seconds.
pub mod optional {
    use std::fmt;
    use std::time::Duration;

    use serde::de::{self, Deserializer, Visitor};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        d.deserialize_any(DurationVisitor).map(Some)
    }

    struct DurationVisitor;

    impl DurationVisitor {
        fn bad<E: de::Error>(shown: impl fmt::Display, why: impl fmt::Display) -> E {
            E::custom(format!(
                "{shown} is not a duration ({why}); {}",
                super::EXAMPLES
            ))
        }
    }

    impl Visitor<'_> for DurationVisitor {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a duration such as \"90s\", \"1h30m\", \"PT1M30S\" or seconds (90)")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
            super::parse(text).map_err(|why| Self::bad(format_args!("{text:?}"), why))
        }

        fn visit_i64<E: de::Error>(self, value: i64) -> Result<Duration, E> {
            u64::try_from(value)
                .map(Duration::from_secs)
                .map_err(|_| Self::bad(value, super::DurationError::Negative))
        }

        fn visit_u64<E: de::Error>(self, value: u64) -> Result<Duration, E> {
            Ok(Duration::from_secs(value))
        }

        fn visit_f64<E: de::Error>(self, value: f64) -> Result<Duration, E> {
            super::seconds(value).map_err(|why| Self::bad(value, why))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_the_sdks_accept() -> Result<(), DurationError> {
        assert_eq!(parse("90s")?, Duration::from_secs(90));
        assert_eq!(parse("1h30m")?, Duration::from_secs(5400));
        assert_eq!(parse("250ms")?, Duration::from_millis(250));
        assert_eq!(parse("PT1M30S")?, Duration::from_secs(90));
        assert_eq!(parse("P1DT1H")?, Duration::from_secs(90_000));
        assert_eq!(parse("90")?, Duration::from_secs(90));
        assert_eq!(parse(" 1.5 ")?, Duration::from_millis(1500));
        assert_eq!(parse("0")?, Duration::ZERO);
        Ok(())
    }

    #[test]
    fn what_is_refused_and_why() {
        assert_eq!(parse("-5"), Err(DurationError::Negative));
        assert_eq!(parse("PT-5S"), Err(DurationError::Negative));
        assert_eq!(parse("P1M"), Err(DurationError::Calendar));
        for bad in ["soon", "", "1.2.3", ".", "-5s", "1e3", "inf", "NaN"] {
            assert!(
                matches!(parse(bad), Err(DurationError::Syntax(_))),
                "{bad:?}"
            );
        }
        let says = flag("soon").err().unwrap_or_default();
        assert!(
            says.contains("not a duration") && says.contains("PT1M30S"),
            "{says}"
        );
    }
}
