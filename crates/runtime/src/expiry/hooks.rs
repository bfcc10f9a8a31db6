//! Where expiry meets the lifecycle: a turn's start, an activation's load
//! and its end (see the module doc for why each).

use std::sync::Arc;
use std::time::Duration;

use super::{due, earliest, first_if_earlier, EXPIRE_NAME};
use crate::activation::{Activation, Inner};
use crate::input::millis;
use crate::retention::marks::Noting;
use crate::schedule::{ReminderSpec, RetryPolicy};
use crate::shared::Shared;
use crate::types::{ActorId, Payload, StateSnapshot};

/// How long an active actor of a type no app hosts here may stay so.
const IDLE_FALLBACK: Duration = Duration::from_secs(60);

/// The `$expire` reminder of `actor`, due when its first key expires.
pub(crate) fn expire_spec(actor: &ActorId, due_unix_ms: u64) -> ReminderSpec {
    ReminderSpec::once(
        actor.clone(),
        EXPIRE_NAME.to_owned(),
        due_unix_ms,
        Payload::default(),
        RetryPolicy::DAEMON,
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
    /// its state (so the app need not be told), whether the state was just
    /// read or kept loaded since an earlier activation.
    pub(crate) fn expire_at_load(&self, act: &Arc<Activation>, inner: &mut Inner) {
        if let Some(expired) = due(&inner.state, self.time.now_ms()) {
            self.record_changes(act, inner, &expired.changes);
        }
    }

    /// The expiry times of `actor`'s `state` changed (a turn set or ended
    /// one, or keys expired), the first having been `first_before`; or its
    /// activation ended holding them (`None`: it may have been left early,
    /// or, on a daemon that took the actor over, never set). Its `$expire`
    /// reminder follows the first when it moved earlier, so that it erases
    /// the keys from the store (`lifecycle/expire_keys.rs`) whichever daemon
    /// owns the actor when it goes idle; a renewed ttl, the every-turn case,
    /// writes no reminder ([`first_if_earlier`]).
    pub(crate) fn expiry_changed(
        &self,
        actor: &ActorId,
        first_before: Option<u64>,
        state: &StateSnapshot,
    ) {
        if let Some(due_unix_ms) = first_if_earlier(first_before, state) {
            self.retention.note(actor, Noting::Expire { due_unix_ms });
        }
    }

    /// When an `$expire` that found `actor` active fires again: at its
    /// first key's time, or, with that past (no turn came to forget it),
    /// once the actor may have gone idle. `None`: nothing of it expires.
    pub(crate) fn expiry_recheck(&self, actor: &ActorId) -> Option<u64> {
        let first = {
            let act = self.directory.get(actor)?;
            let inner = act.inner.lock();
            earliest(&inner.state)?
        };
        let now = self.time.now_ms();
        if first > now {
            return Some(first);
        }
        let idle = self
            .hosts
            .options(&actor.ty)
            .map_or(IDLE_FALLBACK, |o| o.idle_timeout)
            .saturating_add(Duration::from_secs(1));
        Some(now.saturating_add(millis(idle)))
    }
}
