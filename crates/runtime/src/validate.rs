//! Input checks shared by every entry point (gRPC, in-process hosts).

use crate::error::CallError;
pub use crate::error::{abridged, abridged_list, shortened};
use crate::types::{CallExtra, StateChange};

/// Upper bound for actor types, ids, method and state key names.
pub const MAX_NAME_BYTES: usize = 256;

/// Checks a name: 1 to 256 bytes of UTF-8 with no control characters.
pub fn name(what: &str, value: &str) -> Result<(), CallError> {
    if value.is_empty() {
        return Err(CallError::InvalidArgument(format!(
            "{what} is empty; it must be 1 to {MAX_NAME_BYTES} bytes of UTF-8"
        )));
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(CallError::InvalidArgument(format!(
            "{what} is {} bytes; it must be at most {MAX_NAME_BYTES} bytes",
            value.len()
        )));
    }
    let control = if value.is_ascii() {
        value.bytes().any(|b| b.is_ascii_control())
    } else {
        value.chars().any(char::is_control)
    };
    if control {
        return Err(CallError::InvalidArgument(format!(
            "{what} {value:?} contains control characters; use printable UTF-8"
        )));
    }
    Ok(())
}

pub fn payload(len: usize, limit: usize) -> Result<(), CallError> {
    if len > limit {
        return Err(CallError::InvalidArgument(format!(
            "payload is {len} bytes; the limit is {limit} bytes (daemon flag --max-payload-bytes)"
        )));
    }
    Ok(())
}

/// Checks what a call carries besides its payload: metadata names and size
/// (counted against the payload limit), the names on its call chain.
pub fn extra(extra: &CallExtra, limit: usize) -> Result<(), CallError> {
    let mut bytes = 0usize;
    for (key, value) in &extra.metadata {
        name("metadata key", key)?;
        bytes = bytes.saturating_add(key.len()).saturating_add(value.len());
    }
    if bytes > limit {
        return Err(CallError::InvalidArgument(format!(
            "call metadata is {bytes} bytes; the limit is {limit} bytes (daemon flag \
             --max-payload-bytes)"
        )));
    }
    if let Some(key) = &extra.idempotency_key {
        name("idempotency key", key)?;
    }
    if let Some(chain) = &extra.chain {
        name("call chain id", &chain.id)?;
        for actor in &chain.actors {
            name("actor type on the call chain", &actor.ty)?;
            name("actor id on the call chain", &actor.id)?;
        }
    }
    Ok(())
}

/// Checks one state change: its key a valid name and not the daemon's, its
/// value within the payload limit, its expiry one the daemon keeps.
pub fn state_change(change: &StateChange, value_limit: usize) -> Result<(), CallError> {
    name("state key", &change.key)
        .and_then(|()| payload(change.value.as_ref().map_or(0, |v| v.len()), value_limit))
        .and_then(|()| crate::expiry::check(change))
}

/// Checks the state changes a host returned for a turn.
pub fn state_changes(changes: &[StateChange], value_limit: usize) -> Result<(), CallError> {
    for change in changes {
        state_change(change, value_limit).map_err(|e| {
            CallError::InvalidArgument(format!(
                "the turn returned an invalid state change ({e}); its changes were discarded"
            ))
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_bounded_non_empty_and_printable() {
        assert!(name("actor id", "c1").is_ok());
        assert!(name("actor id", "bus/42 ünïcode").is_ok());
        assert!(name("actor id", "").is_err());
        assert!(name("actor id", &"x".repeat(257)).is_err());
        assert!(name("actor id", "a\nb").is_err());
    }
}
