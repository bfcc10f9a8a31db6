//! Editing an actor's state: an operator's repair of some of its keys
//! (`troupe state set|delete`), applied to the store while the actor is
//! held unloaded (`held_actor`), so that the app's copy of the state, which
//! would not see the edit, ends first and the next activation loads the
//! edited state.
//!
//! The order: the actor is held and its activation ends (its running turn
//! finishes, the app's hook runs); under the flusher's write lock what it
//! left unwritten is written and its loaded state forgotten; the store
//! applies the edit in one fenced, atomic write; the hold ends and the
//! calls that waited activate the actor on the edited state. So a call sees
//! the state either before the edit or after it, never a mix.

use std::collections::HashSet;

use tracing::info;

use crate::error::CallError;
use crate::flush::check_expected;
use crate::retention::marks::Noting;
use crate::runtime::Runtime;
use crate::types::{ActorId, StateChange};
use crate::validate;

/// What an edit replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditedState {
    /// Whether the actor was active here (its app saw a deactivation).
    pub was_active: bool,
    /// Each edited key as it was, in the edit's order (`value: None`: the
    /// actor did not have it).
    pub before: Vec<StateChange>,
}

impl Runtime {
    /// Sets and deletes keys of `actor`'s stored state, all or none, after
    /// ending its activation; calls that arrive meanwhile wait and then see
    /// the edited state. Each of `expect` must hold as the edit applies (a
    /// key with that value, or absent), else nothing changes:
    /// [`CallError::Conflict`]. Only the daemon that owns the actor edits
    /// it.
    pub async fn edit_actor_state(
        &self,
        actor: &ActorId,
        changes: &[StateChange],
        expect: &[StateChange],
    ) -> Result<EditedState, CallError> {
        let limit = self.shared.config.max_payload_bytes;
        if changes.is_empty() {
            return Err(CallError::InvalidArgument(
                "the edit names no state key; give at least one key to set or delete".into(),
            ));
        }
        check_keys("the edit", changes, limit, true)?;
        check_keys("the expectation", expect, limit, false)?;
        let shared = &self.shared;
        // A stale read, the usual refusal, is refused against what the
        // activation holds (newer than the store), before its activation
        // would end for nothing. One that holds there is checked again, as
        // the edit applies, against the store.
        if let Some(act) = shared.directory.get(actor) {
            let inner = act.inner.lock();
            if inner.state_loaded() {
                check_expected(actor, |key| inner.state.get(key), expect)?;
            }
        }
        let held = self.hold_owned_actor(actor, "edited").await?;
        let left = shared.directory.get(actor);
        shared
            .flusher
            .settle_held(left.as_ref(), |inner| inner.forget_state())
            .await?;
        let now_ms = shared.time.now_ms();
        let (before, first_expiry) = shared
            .flusher
            .edit_stored(actor, held.epoch, changes, expect, now_ms)
            .await?;
        // Held unloaded, it may stay idle: its reminder erases the key.
        if let Some(due_unix_ms) = first_expiry {
            shared.retention.note(actor, Noting::Expire { due_unix_ms });
        }
        info!(
            actor = %actor,
            was_active = held.was_active,
            keys_set = changes.iter().filter(|c| c.value.is_some()).count(),
            keys_deleted = changes.iter().filter(|c| c.value.is_none()).count(),
            "edited actor state"
        );
        Ok(EditedState {
            was_active: held.was_active,
            before,
        })
    }
}

/// `what` (an edit, or what it expects) names each key once, each a valid
/// key with a value within the payload limit, and an expiry only where one
/// may be set (`ttl`: the edit's, not what it expects).
fn check_keys(
    what: &str,
    changes: &[StateChange],
    value_limit: usize,
    ttl: bool,
) -> Result<(), CallError> {
    let mut seen = HashSet::with_capacity(changes.len());
    for change in changes {
        validate::state_change(change, value_limit).map_err(|e| {
            CallError::InvalidArgument(format!("{what} was refused, nothing changed: {e}"))
        })?;
        if change.ttl_ms.is_some() && !ttl {
            return Err(CallError::InvalidArgument(format!(
                "{what} gives state key {:?} an expiry; an expectation names a value only, so \
                 send it without one",
                change.key
            )));
        }
        if !seen.insert(change.key.as_str()) {
            return Err(CallError::InvalidArgument(format!(
                "{what} names state key {:?} twice; name each key once",
                change.key
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edit_names_keys_once_within_the_limits() {
        let ok = [StateChange::set("a", "1"), StateChange::delete("b")];
        assert!(check_keys("the edit", &ok, 8, true).is_ok());
        assert!(check_keys("the expectation", &[], 8, false).is_ok());
        let timed = [StateChange::set_expiring(
            "a",
            "1",
            std::time::Duration::from_secs(60),
        )];
        assert!(check_keys("the edit", &timed, 8, true).is_ok());
        assert!(check_keys("the expectation", &timed, 8, false).is_err());
        for bad in [
            vec![StateChange::set("a", "1"), StateChange::delete("a")],
            vec![StateChange::set("", "1")],
            vec![StateChange::set("a", "123456789")],
        ] {
            assert!(
                matches!(
                    check_keys("the edit", &bad, 8, true),
                    Err(CallError::InvalidArgument(_))
                ),
                "{bad:?}"
            );
        }
    }
}
