//! The reminders in memory, by key: the scheduler's current version of each
//! loaded reminder, in shards that grow one at a time.
//!
//! One table of up to `MAX_IN_MEMORY` records doubled all at once when it
//! filled, under the queue's lock: re-hashing and moving 200,000 records
//! held every firing about 80 ms, once in each run of `cargo bench -p
//! troupe-runtime --bench reminders` (4,000–10,000 firings over 20 ms late,
//! a lateness p99 of up to 107 ms). In 64 shards a growth moves a 64th of
//! them, and each slot keeps its hash, so it moves records without hashing
//! their keys again. A record is its own key, so none is stored twice.

use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;
use troupe_storage::{ReminderKey, ReminderRecord};

use crate::shards::{shard_of, shrink_if_sparse, SHARDS};

struct Slot {
    hash: u64,
    record: ReminderRecord,
}

pub(super) struct Loaded {
    hasher: DefaultHashBuilder,
    shards: [HashTable<Slot>; SHARDS],
    len: usize,
}

impl Default for Loaded {
    fn default() -> Self {
        Self {
            hasher: DefaultHashBuilder::default(),
            shards: std::array::from_fn(|_| HashTable::new()),
            len: 0,
        }
    }
}

impl Loaded {
    /// The key's hash and its shard.
    fn locate(&self, key: &ReminderKey) -> (u64, usize) {
        let hash = self.hasher.hash_one(key);
        (hash, shard_of(hash))
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn get(&self, key: &ReminderKey) -> Option<&ReminderRecord> {
        let (hash, shard) = self.locate(key);
        self.shards[shard]
            .find(hash, |slot| slot.record.key == *key)
            .map(|slot| &slot.record)
    }

    pub(super) fn contains_key(&self, key: &ReminderKey) -> bool {
        self.get(key).is_some()
    }

    /// Makes `record` the version in memory of its reminder.
    pub(super) fn insert(&mut self, record: ReminderRecord) {
        let (hash, shard) = self.locate(&record.key);
        let table = &mut self.shards[shard];
        match table.find_mut(hash, |slot| slot.record.key == record.key) {
            Some(slot) => slot.record = record,
            None => {
                table.insert_unique(hash, Slot { hash, record }, |slot| slot.hash);
                self.len = self.len.saturating_add(1);
            }
        }
    }

    pub(super) fn remove(&mut self, key: &ReminderKey) -> Option<ReminderRecord> {
        let (hash, shard) = self.locate(key);
        let table = &mut self.shards[shard];
        let (slot, _) = table
            .find_entry(hash, |slot| slot.record.key == *key)
            .ok()?
            .remove();
        self.len = self.len.saturating_sub(1);
        shrink_if_sparse(table, |slot| slot.hash);
        Some(slot.record)
    }

    pub(super) fn clear(&mut self) {
        for table in &mut self.shards {
            table.clear();
        }
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn record(i: usize, due: u64) -> ReminderRecord {
        ReminderRecord {
            key: ReminderKey {
                actor_type: "t".into(),
                actor_id: format!("a{}", i % 7),
                name: format!("r{i}"),
            },
            due_unix_ms: due,
            data: Bytes::new(),
        }
    }

    #[test]
    fn holds_one_version_per_reminder_through_growth_and_shrinking() {
        let mut loaded = Loaded::default();
        for i in 0..20_000 {
            loaded.insert(record(i, 1));
        }
        // A newer version replaces the one in memory.
        for i in 0..20_000 {
            loaded.insert(record(i, 2));
        }
        assert_eq!(loaded.len(), 20_000);
        assert_eq!(
            loaded.get(&record(7, 0).key).map(|r| r.due_unix_ms),
            Some(2)
        );
        for i in 0..19_990 {
            assert_eq!(
                loaded.remove(&record(i, 0).key).map(|r| r.due_unix_ms),
                Some(2)
            );
        }
        assert!(loaded.remove(&record(0, 0).key).is_none());
        assert_eq!(loaded.len(), 10);
        assert!((19_990..20_000).all(|i| loaded.contains_key(&record(i, 0).key)));
        loaded.clear();
        assert_eq!(loaded.len(), 0);
        assert!(!loaded.contains_key(&record(19_999, 0).key));
    }
}
