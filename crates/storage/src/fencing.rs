//! The epoch rule every store applies, in one place: a write is admitted
//! when its epoch is at least the actor's stored epoch as it was before the
//! batch, and the batch leaves each actor at the largest epoch admitted.
//!
//! Deciding against the epochs from before the batch (not raising them
//! write by write) matters because one daemon may queue two writes for an
//! actor under two table versions in either order: both are its own, and
//! neither may fence the other.

use std::collections::HashMap;

use crate::Epoch;

type ActorKey = (String, String);

/// The epochs of the actors one batch touches, as stored before it.
#[derive(Debug, Default)]
pub struct EpochCheck {
    before: HashMap<ActorKey, Epoch>,
    after: HashMap<ActorKey, Epoch>,
}

impl EpochCheck {
    /// `stored`: the actors' epochs before the batch (missing: none yet).
    pub fn new(stored: impl IntoIterator<Item = (ActorKey, Epoch)>) -> Self {
        Self {
            before: stored.into_iter().collect(),
            after: HashMap::new(),
        }
    }

    /// Whether a write to the actor with `epoch` is admitted; an admitted
    /// epoch is remembered for [`EpochCheck::raised`].
    pub fn admit(&mut self, actor_type: &str, actor_id: &str, epoch: Option<Epoch>) -> bool {
        let Some(epoch) = epoch else {
            return true;
        };
        let key = (actor_type.to_owned(), actor_id.to_owned());
        let before = self.before.get(&key).copied().unwrap_or(0);
        if epoch < before {
            return false;
        }
        if epoch > before {
            let after = self.after.entry(key).or_insert(epoch);
            *after = (*after).max(epoch);
        }
        true
    }

    /// The actors whose epoch the batch raises, with their new epoch.
    pub fn raised(&self) -> impl Iterator<Item = (&str, &str, Epoch)> {
        self.after
            .iter()
            .map(|((ty, id), epoch)| (ty.as_str(), id.as_str(), *epoch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn older_epochs_are_refused_and_the_largest_admitted_is_kept() {
        let mut check = EpochCheck::new([(("t".into(), "a".into()), 5)]);
        assert!(check.admit("t", "a", Some(5)));
        assert!(!check.admit("t", "a", Some(4)));
        // One daemon's writes under two tables, queued in either order.
        assert!(check.admit("t", "a", Some(9)));
        assert!(check.admit("t", "a", Some(7)));
        assert!(check.admit("t", "a", None));
        assert!(check.admit("t", "new", Some(1)));
        let mut raised: Vec<_> = check.raised().collect();
        raised.sort();
        assert_eq!(raised, vec![("t", "a", 9), ("t", "new", 1)]);
    }
}
