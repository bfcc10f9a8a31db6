//! Idempotency keys: the key every invoke and tell sends, checked as the
//! daemon checks it when the caller gave one, else a fresh UUID v4.
//!
//! A key names one logical call; every retry resends it, so a daemon that
//! records keys runs the call once (proto/troupe/v1/client.proto). A bad key
//! fails here, before anything is sent, with a message naming the option as
//! the caller's language spells it ([`KeyNames`]).

use std::time::Duration;

use crate::retry::NO_DEADLINE_RETRY_WINDOW;

/// The most bytes a key may have, as the daemon allows.
pub const MAX_KEY_BYTES: usize = 256;

/// How a language layer names the key option and its absence, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyNames {
    /// The option: `idempotency_key`, `idempotencyKey`.
    pub option: &'static str,
    /// How a caller asks for a fresh key: `None`, `leave it out`.
    pub absent: &'static str,
}

impl KeyNames {
    /// Words for no language in particular (Rust callers, tests).
    pub const NEUTRAL: KeyNames = KeyNames {
        option: "idempotency key",
        absent: "none",
    };
}

/// A caller's key the daemon would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the idempotency key is empty")]
    Empty,
    #[error("the idempotency key is {bytes} bytes, over {MAX_KEY_BYTES}")]
    TooLong { bytes: usize },
    #[error("the idempotency key {key:?} contains control characters")]
    Control { key: String },
}

impl KeyError {
    /// The message users see, with the option named as their language does
    /// (the words the SDKs used before the check moved here).
    pub fn message(&self, names: &KeyNames) -> String {
        let option = names.option;
        match self {
            KeyError::Empty => format!(
                "{option} is empty; pass 1 to {MAX_KEY_BYTES} bytes of printable UTF-8, or {} to \
                 let the SDK make a fresh key",
                names.absent
            ),
            KeyError::TooLong { bytes } => format!(
                "{option} is {bytes} bytes; it must be at most {MAX_KEY_BYTES} bytes (a UUID or a \
                 hash of what names the call fits)"
            ),
            KeyError::Control { key } => {
                format!("{option} {key:?} contains control characters; use printable UTF-8")
            }
        }
    }
}

/// The key a call sends: `given`, checked, or a fresh UUID v4 when `None`.
pub fn call_key(given: Option<String>) -> Result<String, KeyError> {
    let Some(key) = given else {
        return Ok(fresh());
    };
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(KeyError::TooLong { bytes: key.len() });
    }
    // Unicode category Cc, as the daemon's check (`char::is_control`).
    if key.chars().any(char::is_control) {
        return Err(KeyError::Control { key });
    }
    Ok(key)
}

/// [`call_key`], and whether the key is new: one made here for this call
/// was never sent before, which the request's `new_key` tells the daemon
/// (it then need not look for an earlier answer in its store).
pub fn marked_call_key(given: Option<String>) -> Result<(String, bool), KeyError> {
    let new = given.is_none();
    Ok((call_key(given)?, new))
}

/// A fresh key: a random (v4) UUID in its hyphenated form.
pub fn fresh() -> String {
    uuid::Uuid::new_v4().hyphenated().to_string()
}

/// What a key made here is resent for, beyond the call's retries: the
/// daemon's flush of the answer, and room to spare.
pub const MADE_KEY_MARGIN: Duration = Duration::from_secs(60);

/// How long the daemon should keep the answer of a call whose key the SDK
/// made (`key_retention_ms` in proto/troupe/v1/client.proto): the SDK
/// resends such a key only while the call's retries last, its `timeout`
/// or [`NO_DEADLINE_RETRY_WINDOW`] without one, and no one else knows it.
/// A key the caller gave may be sent again at any time, so its answer
/// keeps the daemon's whole retention (it sends 0).
pub fn made_key_retention(timeout: Option<Duration>) -> Duration {
    timeout
        .unwrap_or(NO_DEADLINE_RETRY_WINDOW)
        .saturating_add(MADE_KEY_MARGIN)
}

/// [`made_key_retention`] in the request's milliseconds.
pub fn made_key_retention_ms(timeout: Option<Duration>) -> u64 {
    u64::try_from(made_key_retention(timeout).as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_made_key_is_kept_for_the_calls_retries_and_a_minute() {
        let secs = |s| Some(Duration::from_secs(s));
        assert_eq!(made_key_retention_ms(None), 70_000, "10 s of retries");
        assert_eq!(made_key_retention_ms(secs(300)), 360_000);
        assert_eq!(made_key_retention_ms(Some(Duration::MAX)), u64::MAX);
    }

    #[test]
    fn a_given_key_is_checked_and_none_is_a_fresh_uuid() {
        assert_eq!(call_key(Some("k-1".into())), Ok("k-1".into()));
        assert_eq!(call_key(Some(String::new())), Err(KeyError::Empty));
        assert_eq!(
            call_key(Some("ü".repeat(129))),
            Err(KeyError::TooLong { bytes: 258 })
        );
        assert!(matches!(
            call_key(Some("a\nb".into())),
            Err(KeyError::Control { .. })
        ));
        let names = KeyNames {
            option: "idempotency_key",
            absent: "None",
        };
        assert_eq!(
            KeyError::TooLong { bytes: 258 }.message(&names),
            "idempotency_key is 258 bytes; it must be at most 256 bytes (a UUID or a hash of \
             what names the call fits)"
        );
        let (a, b) = (call_key(None), call_key(None));
        assert_ne!(a, b);
        let a = a.unwrap_or_default();
        assert_eq!(
            uuid::Uuid::parse_str(&a).map(|u| u.get_version_num()),
            Ok(4)
        );
    }

    #[test]
    fn only_a_key_made_here_is_marked_new() {
        assert_eq!(
            marked_call_key(Some("k-1".into())),
            Ok(("k-1".into(), false))
        );
        assert!(matches!(marked_call_key(None), Ok((k, true)) if !k.is_empty()));
        assert_eq!(marked_call_key(Some(String::new())), Err(KeyError::Empty));
    }
}
