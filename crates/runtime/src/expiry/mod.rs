//! State keys that expire (`StateChange::ttl_ms`): a session token, a
//! cached answer or a one-time code that an actor keeps for a while and
//! then forgets, without a reminder of its own to delete it.
//!
//! The expiry times live beside the values, as the daemon's state key
//! [`EXPIRES_KEY`], so that they are written, flushed, fenced, copied,
//! backed up and purged with the keys they time, atomically, by every
//! store, with no change to any store's format. Its value starts with the
//! earliest time (8 bytes, big-endian), which is all a turn reads to know
//! that nothing is due; the times per key follow as JSON.
//!
//! An expired key reads as absent everywhere, at once:
//! - a turn starting at or after the time drops it first (`Shared::
//!   expire_at_turn_start`, in `hooks.rs`) and tells the app (`Turn.expired_keys`);
//! - an activation drops what expired while the actor was away before the
//!   app sees its state;
//! - state reads leave it out ([`visible`]).
//!
//! The store forgets it with the actor's next change, or, for an actor
//! that went idle holding keys that expire, when its `$expire` reminder
//! fires (`lifecycle/expire_keys.rs`).

mod hooks;

pub(crate) use hooks::expire_spec;

use std::borrow::Cow;
use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::CallError;
use crate::types::{StateChange, StateSnapshot};

/// The daemon's state key holding the expiry times of an actor's keys.
pub const EXPIRES_KEY: &str = "$expires";

/// The reminder that erases the keys of an idle actor as they expire.
pub const EXPIRE_NAME: &str = "$expire";

/// The shortest expiry a change may ask for: shorter ones would expire
/// before most flushes, and are a unit mistake more often than not.
pub const MIN_TTL_MS: u64 = 1_000;

/// The expiry times of an actor's keys (unix ms on the daemon's scheduling
/// clock), by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Expiries {
    by_key: BTreeMap<String, u64>,
}

impl Expiries {
    /// The times stored in `value`. A value the daemon did not write (a
    /// hand-edited store) reads as no times: a guess must never erase.
    pub(crate) fn read(value: &[u8]) -> Self {
        let by_key = value
            .get(8..)
            .and_then(|json| serde_json::from_slice(json).ok())
            .unwrap_or_default();
        Self { by_key }
    }

    /// The times of `state`.
    pub(crate) fn of(state: &StateSnapshot) -> Self {
        state
            .get(EXPIRES_KEY)
            .map_or_else(Self::default, |v| Self::read(v))
    }

    pub(crate) fn earliest(&self) -> Option<u64> {
        self.by_key.values().min().copied()
    }

    pub(crate) fn get(&self, key: &str) -> Option<u64> {
        self.by_key.get(key).copied()
    }

    /// The change that stores these times: a set, or the key's deletion
    /// when no key expires any more.
    pub(crate) fn change(&self) -> StateChange {
        let Some(earliest) = self.earliest() else {
            return StateChange::delete(EXPIRES_KEY);
        };
        // Strings and numbers only: it cannot fail to encode.
        let json = serde_json::to_vec(&self.by_key).unwrap_or_default();
        let mut value = BytesMut::with_capacity(8 + json.len());
        value.put_u64(earliest);
        value.put_slice(&json);
        StateChange::set(EXPIRES_KEY, value.freeze())
    }

    /// Takes the keys due at `now_ms` out; their names, in key order.
    fn take_due(&mut self, now_ms: u64) -> Vec<String> {
        let due: Vec<String> = self
            .by_key
            .iter()
            .filter(|(_, at)| **at <= now_ms)
            .map(|(key, _)| key.clone())
            .collect();
        for key in &due {
            self.by_key.remove(key);
        }
        due
    }
}

/// When the first key of `state` expires, read from the stored times'
/// first 8 bytes only: the check every turn makes.
pub(crate) fn earliest(state: &StateSnapshot) -> Option<u64> {
    let head: [u8; 8] = state.get(EXPIRES_KEY)?.get(..8)?.try_into().ok()?;
    Some(u64::from_be_bytes(head))
}

/// What expired in a state, and the changes that forget it.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Expired {
    /// The expired keys, in key order.
    pub(crate) keys: Vec<String>,
    /// Their deletions and the times' new value.
    pub(crate) changes: Vec<StateChange>,
}

/// The keys of `state` due at `now_ms` (those `state` still holds: a key
/// deleted since is not reported), or `None` when none is.
pub(crate) fn due(state: &StateSnapshot, now_ms: u64) -> Option<Expired> {
    if earliest(state)? > now_ms {
        return None;
    }
    let mut times = Expiries::of(state);
    let due = times.take_due(now_ms);
    let mut expired = Expired::default();
    for key in due {
        if state.get(&key).is_some() {
            expired.changes.push(StateChange::delete(key.clone()));
            expired.keys.push(key);
        }
    }
    expired.changes.push(times.change());
    Some(expired)
}

/// `changes` with the times they make: a ttl sets or ends a key's time, a
/// deletion ends it, a set without one keeps it. Borrowed as they are when
/// no change asks for a time and the state holds none.
pub(crate) fn with_times<'c>(
    state: &StateSnapshot,
    changes: &'c [StateChange],
    now_ms: impl FnOnce() -> u64,
) -> Cow<'c, [StateChange]> {
    let asks = changes.iter().any(|c| c.ttl_ms.is_some());
    if !asks && state.get(EXPIRES_KEY).is_none() {
        return Cow::Borrowed(changes);
    }
    let mut times = Expiries::of(state);
    let before = times.clone();
    let now_ms = now_ms();
    for change in changes {
        match (&change.value, change.ttl_ms) {
            (None, _) | (Some(_), Some(0)) => {
                times.by_key.remove(&change.key);
            }
            (Some(_), Some(ttl)) => {
                times
                    .by_key
                    .insert(change.key.clone(), now_ms.saturating_add(ttl));
            }
            (Some(_), None) => {}
        }
    }
    if times == before {
        return Cow::Borrowed(changes);
    }
    let mut with = changes.to_vec();
    with.push(times.change());
    Cow::Owned(with)
}

/// The entries of `state` a reader sees at `now_ms` (not the times' key,
/// not an expired key), each with its expiry time if it has one.
pub(crate) fn visible(
    state: impl IntoIterator<Item = (String, Bytes)>,
    now_ms: u64,
) -> Vec<(String, Bytes, Option<u64>)> {
    let mut entries: Vec<(String, Bytes)> = Vec::new();
    let mut times = None;
    for (key, value) in state {
        if key == EXPIRES_KEY {
            times = Some(Expiries::read(&value));
        } else {
            entries.push((key, value));
        }
    }
    let times = times.unwrap_or_default();
    entries
        .into_iter()
        .filter_map(|(key, value)| match times.get(&key) {
            Some(at) if at <= now_ms => None,
            at => Some((key, value, at)),
        })
        .collect()
}

/// Checks what a change asks of expiry: not the times' key itself, and a
/// ttl of at least [`MIN_TTL_MS`] (or 0, none).
pub(crate) fn check(change: &StateChange) -> Result<(), CallError> {
    if change.key == EXPIRES_KEY {
        return Err(CallError::InvalidArgument(format!(
            "state key {EXPIRES_KEY:?} is the daemon's (it holds the expiry times of the \
             other keys); use another key"
        )));
    }
    match change.ttl_ms {
        Some(ttl) if ttl > 0 && ttl < MIN_TTL_MS => Err(CallError::InvalidArgument(format!(
            "state key {:?} asks to expire after {ttl} ms; the shortest expiry is {MIN_TTL_MS} \
             ms (a second)",
            change.key
        ))),
        Some(_) if change.value.is_none() => Err(CallError::InvalidArgument(format!(
            "state key {:?} is deleted with an expiry; an expiry goes with a set",
            change.key
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn state(changes: &[StateChange]) -> StateSnapshot {
        let mut state = StateSnapshot::default();
        state.apply(changes);
        state
    }

    fn hour() -> Duration {
        Duration::from_secs(3_600)
    }

    #[test]
    fn a_ttl_stores_its_time_and_the_earliest_leads() {
        let changes = [
            StateChange::set_expiring("token", "t", hour()),
            StateChange::set_expiring("code", "c", Duration::from_secs(60)),
            StateChange::set("name", "n"),
        ];
        let with = with_times(&StateSnapshot::default(), &changes, || 1_000);
        assert_eq!(with.len(), 4);
        let state = state(&with);
        assert_eq!(earliest(&state), Some(61_000));
        let times = Expiries::of(&state);
        assert_eq!(times.get("token"), Some(3_601_000));
        assert_eq!(times.get("name"), None);
    }

    #[test]
    fn a_set_keeps_the_time_a_zero_ttl_or_a_delete_ends_it() {
        let start = state(&with_times(
            &StateSnapshot::default(),
            &[
                StateChange::set_expiring("a", "1", hour()),
                StateChange::set_expiring("b", "1", hour()),
                StateChange::set_expiring("c", "1", hour()),
            ],
            || 0,
        ));
        let kept = [StateChange::set("a", "2")];
        assert!(matches!(with_times(&start, &kept, || 5), Cow::Borrowed(_)));
        let ended = [
            StateChange {
                ttl_ms: Some(0),
                ..StateChange::set("a", "2")
            },
            StateChange::delete("b"),
        ];
        let after = state(&with_times(&start, &ended, || 5));
        let times = Expiries::of(&after);
        assert_eq!((times.get("a"), times.get("b")), (None, None));
        assert_eq!(times.get("c"), Some(3_600_000));
        let last = [StateChange::delete("c")];
        let all_gone = with_times(&after, &last, || 5);
        assert_eq!(all_gone.last(), Some(&StateChange::delete(EXPIRES_KEY)));
    }

    #[test]
    fn due_keys_go_with_their_times_and_readers_never_see_them() {
        let mut held = state(&with_times(
            &StateSnapshot::default(),
            &[
                StateChange::set_expiring("soon", "1", Duration::from_secs(10)),
                StateChange::set_expiring("later", "2", hour()),
                StateChange::set("kept", "3"),
            ],
            || 0,
        ));
        assert_eq!(due(&held, 9_999), None);
        let seen = visible(held.iter().map(|(k, v)| (k.clone(), v.clone())), 10_000);
        let keys: Vec<_> = seen.iter().map(|(k, _, at)| (k.as_str(), *at)).collect();
        assert_eq!(keys.len(), 2);
        assert!(keys.contains(&("later", Some(3_600_000))));
        assert!(keys.contains(&("kept", None)));
        let expired = due(&held, 10_000).unwrap_or_default();
        assert_eq!(expired.keys, vec!["soon".to_owned()]);
        held.apply(&expired.changes);
        assert_eq!(held.get("soon"), None);
        assert_eq!(earliest(&held), Some(3_600_000));
    }

    #[test]
    fn unreadable_times_expire_nothing_and_the_key_is_refused() {
        let state = state(&[
            StateChange::set(EXPIRES_KEY, "garbage!{"),
            StateChange::set("a", "1"),
        ]);
        assert!(Expiries::of(&state).earliest().is_none());
        assert_eq!(
            visible([("a".to_owned(), Bytes::from("1"))], u64::MAX).len(),
            1
        );
        assert!(check(&StateChange::set(EXPIRES_KEY, "x")).is_err());
        let short = StateChange {
            ttl_ms: Some(999),
            ..StateChange::set("a", "1")
        };
        assert!(matches!(check(&short), Err(CallError::InvalidArgument(_))));
        assert!(check(&StateChange::set_expiring("a", "1", Duration::from_secs(1))).is_ok());
    }
}
