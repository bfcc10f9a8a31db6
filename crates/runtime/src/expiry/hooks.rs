//! Where expiry meets the lifecycle: a turn's start, an activation's load
//! and its end (see the module doc for why each).

use std::sync::Arc;

use super::{due, earliest, EXPIRE_NAME};
use crate::activation::{Activation, Inner};
use crate::retention::marks::Noting;
use crate::schedule::{ReminderSpec, RetryPolicy};
use crate::shared::Shared;
use crate::types::{ActorId, Payload, StateSnapshot};

/// The firing only fails while the store or the owner is away: keep
/// trying for hours, as retention's firings do.
const FIRING_RETRY: RetryPolicy = RetryPolicy {
    max_attempts: 1_000,
    initial_backoff: std::time::Duration::from_secs(1),
    max_backoff: std::time::Duration::from_secs(60),
};

/// The `$expire` reminder of `actor`, due when its first key expires.
pub(crate) fn expire_spec(actor: &ActorId, due_unix_ms: u64) -> ReminderSpec {
    ReminderSpec::once(
        actor.clone(),
        EXPIRE_NAME.to_owned(),
        due_unix_ms,
        Payload::default(),
        FIRING_RETRY,
    )
}

impl Shared {
    /// The state a turn starts on (`state`, read as it was scheduled) and
    /// the keys that expired before it: forgotten now, under the lock, so
    /// the turn's changes apply after their deletion. Costs a turn of an
    /// actor with nothing due one lookup of `state`.
    pub(crate) fn expire_at_turn_start(
        &self,
        act: &Arc<Activation>,
        state: StateSnapshot,
    ) -> (StateSnapshot, Vec<String>) {
        match earliest(&state) {
            Some(at) if at <= self.time.now_ms() => {}
            _ => return (state, Vec::new()),
        }
        // Dropped first, so the deletions below need not copy the map.
        drop(state);
        let mut inner = act.inner.lock();
        // Read again: a turn started beside this one may have forgotten them.
        let Some(expired) = due(&inner.state, self.time.now_ms()) else {
            return (inner.state.clone(), Vec::new());
        };
        self.record_changes(act, &mut inner, &expired.changes);
        (inner.state.clone(), expired.keys)
    }

    /// Forgets what expired while the actor was away, before its app sees
    /// its state (so the app need not be told).
    pub(crate) fn expire_at_load(&self, act: &Arc<Activation>, inner: &mut Inner) {
        if let Some(expired) = due(&inner.state, self.time.now_ms()) {
            self.record_changes(act, inner, &expired.changes);
        }
    }

    /// An activation of `actor` that served turns ended holding `state`: if
    /// keys of it expire, its `$expire` reminder erases them from the store
    /// (`lifecycle/expire_keys.rs`) as they do.
    pub(crate) fn expiry_ended(&self, actor: &ActorId, state: &StateSnapshot) {
        if let Some(due_unix_ms) = earliest(state) {
            self.retention.note(actor, Noting::Expire { due_unix_ms });
        }
    }
}
