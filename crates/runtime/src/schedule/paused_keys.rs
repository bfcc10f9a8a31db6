//! Which reminders are paused, as the scheduler knows them: read from the
//! end of the due index, then kept current by this daemon's pauses,
//! resumes and deletes, so that a `set` of a paused reminder keeps it
//! paused without reading the store.
//!
//! A read may race with those changes: they are noted while it runs and
//! applied over what it read when it ends. A read after the owners changed
//! is a refresh: what was known answers meanwhile, so no write waits for it.

use std::collections::{HashMap, HashSet};

use troupe_storage::ReminderKey;

#[derive(Debug, Default)]
pub(super) enum PausedKeys {
    /// Not read yet (or forgotten after a write whose outcome is unknown).
    #[default]
    Unknown,
    /// Being read (`generation` tells it from a read begun since): `since`,
    /// the changes made meanwhile; `previous`, what was known before, which
    /// answers meanwhile (`None` for a first read: callers wait).
    Reading {
        generation: u64,
        since: HashMap<ReminderKey, bool>,
        previous: Option<HashSet<ReminderKey>>,
    },
    Known(HashSet<ReminderKey>),
}

impl PausedKeys {
    /// Whether `key` is paused; `None` while that is not known.
    pub(super) fn contains(&self, key: &ReminderKey) -> Option<bool> {
        match self {
            Self::Known(keys) => Some(keys.contains(key)),
            Self::Reading {
                since,
                previous: Some(keys),
                ..
            } => Some(
                since
                    .get(key)
                    .copied()
                    .unwrap_or_else(|| keys.contains(key)),
            ),
            _ => None,
        }
    }

    /// How many reminders are paused; `None` while that is not known.
    pub(super) fn count(&self) -> Option<usize> {
        match self {
            Self::Known(keys) => Some(keys.len()),
            Self::Reading {
                since,
                previous: Some(keys),
                ..
            } => {
                let added = since
                    .iter()
                    .filter(|(key, paused)| **paused && !keys.contains(*key))
                    .count();
                let removed = since
                    .iter()
                    .filter(|(key, paused)| !**paused && keys.contains(*key))
                    .count();
                Some(keys.len().saturating_add(added).saturating_sub(removed))
            }
            _ => None,
        }
    }

    /// Notes that `key` is paused now, or not (resumed, deleted).
    pub(super) fn mark(&mut self, key: &ReminderKey, paused: bool) {
        match self {
            Self::Unknown => {}
            Self::Reading { since, .. } => {
                since.insert(key.clone(), paused);
            }
            Self::Known(keys) => {
                if paused {
                    keys.insert(key.clone());
                } else if !keys.is_empty() {
                    // Every firing that ends a reminder comes here: with
                    // nothing paused, it costs no hashing of the key.
                    keys.remove(key);
                }
            }
        }
    }

    /// A read numbered `generation` begins; what is known so far answers
    /// until it ends.
    pub(super) fn begin_read(&mut self, generation: u64) {
        let previous = match std::mem::take(self) {
            Self::Known(keys) => Some(keys),
            Self::Reading {
                since,
                previous: Some(keys),
                ..
            } => Some(applied(keys, since)),
            Self::Reading { previous: None, .. } | Self::Unknown => None,
        };
        *self = Self::Reading {
            generation,
            since: HashMap::new(),
            previous,
        };
    }

    /// The read numbered `generation` ended with `read` (`None`: it
    /// failed): the keys are known, with the changes made meanwhile. A
    /// failed refresh keeps what was known; a failed first read leaves
    /// them unknown. A read a newer one replaced changes nothing.
    pub(super) fn end_read(&mut self, generation: u64, read: Option<&HashSet<ReminderKey>>) {
        let current = matches!(self, Self::Reading { generation: g, .. } if *g == generation);
        if !current {
            return;
        }
        let Self::Reading {
            since, previous, ..
        } = std::mem::take(self)
        else {
            return;
        };
        *self = match (read, previous) {
            (Some(read), _) => Self::Known(applied(read.clone(), since)),
            (None, Some(previous)) => Self::Known(applied(previous, since)),
            (None, None) => Self::Unknown,
        };
    }
}

/// `keys` with `changes` (key → paused or not) made to it.
fn applied(
    mut keys: HashSet<ReminderKey>,
    changes: HashMap<ReminderKey, bool>,
) -> HashSet<ReminderKey> {
    for (key, paused) in changes {
        if paused {
            keys.insert(key);
        } else {
            keys.remove(&key);
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ReminderKey {
        ReminderKey {
            actor_type: "t".into(),
            actor_id: "a".into(),
            name: name.into(),
        }
    }

    #[test]
    fn changes_made_during_a_first_read_apply_over_it() {
        let mut paused = PausedKeys::default();
        paused.begin_read(1);
        assert_eq!(
            paused.contains(&key("x")),
            None,
            "a first read answers nothing"
        );
        paused.mark(&key("x"), true);
        paused.mark(&key("y"), false);
        paused.end_read(1, Some(&HashSet::from([key("y"), key("z")])));
        assert_eq!(paused.contains(&key("x")), Some(true));
        assert_eq!(paused.contains(&key("y")), Some(false));
        assert_eq!(paused.contains(&key("z")), Some(true));
        assert_eq!(paused.count(), Some(2));
    }

    #[test]
    fn a_refresh_answers_from_what_was_known_until_it_ends() {
        let mut paused = PausedKeys::Known(HashSet::from([key("x"), key("y")]));
        paused.begin_read(1);
        paused.mark(&key("y"), false);
        paused.mark(&key("w"), true);
        assert_eq!(paused.contains(&key("x")), Some(true));
        assert_eq!(paused.contains(&key("y")), Some(false));
        assert_eq!(paused.count(), Some(2));
        // Another refresh begins: the first one's end changes nothing.
        paused.begin_read(2);
        paused.end_read(1, Some(&HashSet::new()));
        assert_eq!(paused.contains(&key("w")), Some(true));
        // The second fails: what was known stays.
        paused.end_read(2, None);
        assert_eq!(paused.count(), Some(2));
        assert_eq!(paused.contains(&key("x")), Some(true));
    }

    #[test]
    fn a_failed_first_read_leaves_them_unknown() {
        let mut paused = PausedKeys::default();
        paused.begin_read(1);
        paused.mark(&key("x"), true);
        paused.end_read(1, None);
        assert_eq!(paused.contains(&key("x")), None);
        assert_eq!(paused.count(), None);
    }
}
