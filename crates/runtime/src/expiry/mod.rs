//! State keys that expire (`StateChange::ttl_ms`): a session token, a
//! cached answer or a one-time code that an actor keeps for a while and
//! then forgets, without a reminder of its own to delete it.
//!
//! The expiry times live beside the values, as daemon state keys, so that
//! they are written, flushed, fenced, copied, backed up and purged with the
//! keys they time, atomically, by every store, with no change to any
//! store's format: `$expires/KEY` holds KEY's time, and [`EXPIRES_KEY`] a
//! time no later than the first of them (8 bytes each, big-endian unix ms
//! on the daemon's scheduling clock). So a turn that sets or ends an expiry
//! writes a key or two, whatever the number of keys that expire, and a turn
//! that does not reads one key to know that nothing is due; only a time
//! that came due looks at the other times.
//!
//! An expired key reads as absent everywhere, at once:
//! - a turn starting at or after the time drops it first (`Shared::
//!   expire_at_turn_start`, in `hooks.rs`) and tells the app
//!   (`Turn.expired_keys`);
//! - an activation drops what expired while the actor was away before the
//!   app sees its state;
//! - state reads leave it out ([`visible`]).
//!
//! The store forgets it with the actor's next turn, or, for an idle actor,
//! when its `$expire` reminder fires (`lifecycle/expire_keys.rs`).

mod hooks;

pub(crate) use hooks::expire_spec;

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use bytes::Bytes;

use crate::error::CallError;
use crate::types::{StateChange, StateSnapshot};

/// The daemon's state key holding a time no later than the first expiry of
/// an actor's keys; `$expires/KEY` holds KEY's.
pub const EXPIRES_KEY: &str = "$expires";

/// The reminder that erases the keys of an idle actor as they expire.
pub const EXPIRE_NAME: &str = "$expire";

/// The shortest expiry a change may ask for: shorter ones would expire
/// before most flushes, and are a unit mistake more often than not.
pub const MIN_TTL_MS: u64 = 1_000;

/// What starts the key of a key's time.
const TIME_PREFIX: &str = "$expires/";

/// The key holding `key`'s time.
fn time_key(key: &str) -> String {
    format!("{TIME_PREFIX}{key}")
}

/// Whether `key` is one of the daemon's expiry keys, which apps never see.
pub fn is_expiry_key(key: &str) -> bool {
    key == EXPIRES_KEY || key.starts_with(TIME_PREFIX)
}

fn time_value(unix_ms: u64) -> Bytes {
    Bytes::copy_from_slice(&unix_ms.to_be_bytes())
}

/// A stored time. One the daemon did not write (a hand-edited store)
/// reads as none: a guess must never erase.
fn read_time(value: &[u8]) -> Option<u64> {
    let bytes: [u8; 8] = value.try_into().ok()?;
    Some(u64::from_be_bytes(bytes))
}

/// No later than when the first key of `state` expires: the check every
/// turn makes.
pub(crate) fn earliest(state: &StateSnapshot) -> Option<u64> {
    read_time(state.get(EXPIRES_KEY)?)
}

/// The time of each key of `state` that expires, by key.
fn times_of<'s>(state: impl IntoIterator<Item = (&'s String, &'s Bytes)>) -> HashMap<String, u64> {
    state
        .into_iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(TIME_PREFIX)?.to_owned(), read_time(v)?)))
        .collect()
}

/// What expired in a state, and the changes that forget it.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Expired {
    /// The expired keys, in key order.
    pub(crate) keys: Vec<String>,
    /// Their deletions, their times', and the first time's new value.
    pub(crate) changes: Vec<StateChange>,
}

/// The keys of `state` due at `now_ms` (those `state` still holds: a key
/// deleted since is not reported), or `None` when the first time is later.
pub(crate) fn due(state: &StateSnapshot, now_ms: u64) -> Option<Expired> {
    if earliest(state)? > now_ms {
        return None;
    }
    let mut expired = Expired::default();
    let mut next: Option<u64> = None;
    for (key, at) in times_of(state.iter()) {
        if at > now_ms {
            next = Some(next.map_or(at, |n| n.min(at)));
            continue;
        }
        expired.changes.push(StateChange::delete(time_key(&key)));
        if state.get(&key).is_some() {
            expired.changes.push(StateChange::delete(key.clone()));
            expired.keys.push(key);
        }
    }
    expired.keys.sort();
    expired.changes.push(match next {
        Some(at) => StateChange::set(EXPIRES_KEY, time_value(at)),
        None => StateChange::delete(EXPIRES_KEY),
    });
    Some(expired)
}

/// `changes` with the times they make: a ttl sets or ends a key's time, a
/// deletion ends it, a set without one keeps it. Borrowed as they are when
/// they change no time (always so for an actor with no key that expires).
pub(crate) fn with_times<'c>(
    state: &StateSnapshot,
    changes: &'c [StateChange],
    now_ms: impl FnOnce() -> u64,
) -> Cow<'c, [StateChange]> {
    let asks = changes.iter().any(|c| c.ttl_ms.is_some());
    if !asks && state.get(EXPIRES_KEY).is_none() {
        return Cow::Borrowed(changes);
    }
    let now_ms = now_ms();
    let mut times: Vec<StateChange> = Vec::new();
    // A key this batch gave a time to, whose time an end must delete too.
    let mut timed: HashSet<&str> = HashSet::new();
    let mut first: Option<u64> = None;
    for change in changes {
        let has_time =
            || state.get(&time_key(&change.key)).is_some() || timed.contains(&change.key.as_str());
        match (&change.value, change.ttl_ms) {
            (None, _) | (Some(_), Some(0)) => {
                if has_time() {
                    times.push(StateChange::delete(time_key(&change.key)));
                }
            }
            (Some(_), Some(ttl)) => {
                let at = now_ms.saturating_add(ttl);
                times.push(StateChange::set(time_key(&change.key), time_value(at)));
                timed.insert(&change.key);
                first = Some(first.map_or(at, |f| f.min(at)));
            }
            (Some(_), None) => {}
        }
    }
    if times.is_empty() {
        return Cow::Borrowed(changes);
    }
    // The first time only moves earlier here; an ended or later time leaves
    // it early, and the turn it comes due for finds the true one (`due`).
    if let Some(at) = first.filter(|at| earliest(state).is_none_or(|e| *at < e)) {
        times.push(StateChange::set(EXPIRES_KEY, time_value(at)));
    }
    let mut with = changes.to_vec();
    with.extend(times);
    Cow::Owned(with)
}

/// What a reader sees of a state at one moment: none of the daemon's
/// expiry keys, no key past its time.
pub(crate) struct ReaderView {
    times: HashMap<String, u64>,
    now_ms: u64,
}

impl ReaderView {
    pub(crate) fn of<'s>(
        state: impl IntoIterator<Item = (&'s String, &'s Bytes)>,
        now_ms: u64,
    ) -> Self {
        Self {
            times: times_of(state),
            now_ms,
        }
    }

    /// Whether `key` shows (`None`: hidden), and until when if it expires.
    pub(crate) fn shows(&self, key: &str) -> Option<Option<u64>> {
        if is_expiry_key(key) {
            return None;
        }
        match self.times.get(key).copied() {
            Some(at) if at <= self.now_ms => None,
            at => Some(at),
        }
    }
}

/// The entries of `state` a reader sees at `now_ms` ([`ReaderView`]), each
/// with its expiry time if it has one.
pub(crate) fn visible(
    state: impl IntoIterator<Item = (String, Bytes)>,
    now_ms: u64,
) -> Vec<(String, Bytes, Option<u64>)> {
    let state: Vec<(String, Bytes)> = state.into_iter().collect();
    let view = ReaderView::of(state.iter().map(|(k, v)| (k, v)), now_ms);
    state
        .into_iter()
        .filter_map(|(key, value)| view.shows(&key).map(|at| (key, value, at)))
        .collect()
}

/// The first time of `state`, when it comes before `first_before` (or
/// there was none): when an actor's `$expire` reminder must move. A first
/// time that moved later leaves the reminder early, and its firing finds
/// the true one.
pub(crate) fn first_if_earlier(first_before: Option<u64>, state: &StateSnapshot) -> Option<u64> {
    earliest(state).filter(|first| first_before.is_none_or(|before| *first < before))
}

/// Checks what a change asks of expiry: not one of the daemon's keys, and
/// a ttl of at least [`MIN_TTL_MS`] (or 0, none), with a set.
pub(crate) fn check(change: &StateChange) -> Result<(), CallError> {
    if is_expiry_key(&change.key) {
        return Err(CallError::InvalidArgument(format!(
            "state key {:?} is the daemon's (keys {EXPIRES_KEY:?} and {TIME_PREFIX:?}... hold \
             the expiry times of the others); use another key",
            change.key
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

    /// `changes` applied to `state` with the times they make, at `now_ms`.
    fn apply(state: &mut StateSnapshot, changes: &[StateChange], now_ms: u64) {
        let with = with_times(state, changes, || now_ms).into_owned();
        state.apply(&with);
    }

    fn time(state: &StateSnapshot, key: &str) -> Option<u64> {
        read_time(state.get(&time_key(key))?)
    }

    fn hour() -> Duration {
        Duration::from_secs(3_600)
    }

    #[test]
    fn a_ttl_stores_its_time_and_the_first_leads() {
        let mut held = StateSnapshot::default();
        apply(
            &mut held,
            &[
                StateChange::set_expiring("token", "t", hour()),
                StateChange::set_expiring("code", "c", Duration::from_secs(60)),
                StateChange::set("name", "n"),
            ],
            1_000,
        );
        assert_eq!(earliest(&held), Some(61_000));
        assert_eq!(time(&held, "token"), Some(3_601_000));
        assert_eq!(time(&held, "name"), None);
    }

    #[test]
    fn a_set_keeps_the_time_a_zero_ttl_or_a_delete_ends_it() {
        let mut held = StateSnapshot::default();
        let each = ["a", "b", "c"].map(|k| StateChange::set_expiring(k, "1", hour()));
        apply(&mut held, &each, 0);
        let kept = [StateChange::set("a", "2")];
        assert!(matches!(with_times(&held, &kept, || 5), Cow::Borrowed(_)));
        let ended = [
            StateChange {
                ttl_ms: Some(0),
                ..StateChange::set("a", "2")
            },
            StateChange::delete("b"),
        ];
        apply(&mut held, &ended, 5);
        assert_eq!((time(&held, "a"), time(&held, "b")), (None, None));
        assert_eq!(time(&held, "c"), Some(3_600_000));
        // Set and ended in one batch: no time left behind.
        let mut fresh = StateSnapshot::default();
        let both = [
            StateChange::set_expiring("d", "1", hour()),
            StateChange::delete("d"),
        ];
        apply(&mut fresh, &both, 0);
        assert_eq!(time(&fresh, "d"), None);
    }

    #[test]
    fn due_keys_go_with_their_times_and_readers_never_see_them() {
        let mut held = StateSnapshot::default();
        apply(
            &mut held,
            &[
                StateChange::set_expiring("soon", "1", Duration::from_secs(10)),
                StateChange::set_expiring("later", "2", hour()),
                StateChange::set("kept", "3"),
            ],
            0,
        );
        assert_eq!(due(&held, 9_999), None);
        let seen = visible(held.iter().map(|(k, v)| (k.clone(), v.clone())), 10_000);
        let keys: Vec<_> = seen.iter().map(|(k, _, at)| (k.as_str(), *at)).collect();
        assert_eq!(keys.len(), 2, "{keys:?}");
        assert!(keys.contains(&("later", Some(3_600_000))));
        assert!(keys.contains(&("kept", None)));
        let expired = due(&held, 10_000).unwrap_or_default();
        assert_eq!(expired.keys, vec!["soon".to_owned()]);
        held.apply(&expired.changes);
        assert_eq!((held.get("soon"), time(&held, "soon")), (None, None));
        assert_eq!(earliest(&held), Some(3_600_000));
        // The last one gone, no time is left.
        let last = due(&held, 3_600_000).unwrap_or_default();
        held.apply(&last.changes);
        assert_eq!(held.len(), 1, "{held:?}");
    }

    #[test]
    fn a_renewed_first_time_is_found_again_without_expiring_anything() {
        let mut held = StateSnapshot::default();
        apply(&mut held, &[StateChange::set_expiring("a", "1", hour())], 0);
        apply(
            &mut held,
            &[StateChange::set_expiring("a", "1", 2 * hour())],
            10,
        );
        assert_eq!(earliest(&held), Some(3_600_000), "only ever moves earlier");
        let renewed = due(&held, 3_600_000).unwrap_or_default();
        assert!(renewed.keys.is_empty());
        held.apply(&renewed.changes);
        assert_eq!(earliest(&held), Some(7_200_010));
    }

    #[test]
    fn unreadable_times_expire_nothing_and_the_daemon_keys_are_refused() {
        let held = state(&[
            StateChange::set(EXPIRES_KEY, "0"),
            StateChange::set(time_key("a"), "garbage!{"),
            StateChange::set("a", "1"),
        ]);
        assert_eq!(earliest(&held), None);
        let seen = visible(held.iter().map(|(k, v)| (k.clone(), v.clone())), u64::MAX);
        assert_eq!(seen.len(), 1);
        for key in [EXPIRES_KEY.to_owned(), time_key("a")] {
            assert!(check(&StateChange::set(key, "x")).is_err());
        }
        let short = StateChange {
            ttl_ms: Some(999),
            ..StateChange::set("a", "1")
        };
        assert!(matches!(check(&short), Err(CallError::InvalidArgument(_))));
        assert!(check(&StateChange::set_expiring("a", "1", Duration::from_secs(1))).is_ok());
    }
}
