//! The in-memory store's call records.

use std::collections::BTreeMap;

use super::ActorKey;
use crate::{CallRecord, RecordedKey};

/// Every actor's call records, by key.
#[derive(Debug, Default)]
pub(super) struct Records {
    by_actor: BTreeMap<ActorKey, BTreeMap<String, CallRecord>>,
}

impl Records {
    /// Stores one actor's records of a batch; a key recorded already keeps
    /// its first record.
    /// The actors with call records.
    pub(super) fn actor_keys(&self) -> impl Iterator<Item = &ActorKey> {
        self.by_actor.keys()
    }

    pub(super) fn apply(&mut self, actor: &ActorKey, records: &[CallRecord]) {
        if records.is_empty() {
            return;
        }
        let held = self.by_actor.entry(actor.clone()).or_default();
        for record in records {
            // A map looks for the key anyway; the mark is for writing only.
            held.entry(record.key.clone())
                .or_insert_with(|| CallRecord {
                    new_key: false,
                    ..record.clone()
                });
        }
    }

    pub(super) fn load(
        &self,
        actor: &ActorKey,
        since_unix_ms: u64,
        limit: usize,
    ) -> Vec<RecordedKey> {
        let mut out: Vec<RecordedKey> = self.by_actor.get(actor).map_or_else(Vec::new, |held| {
            held.values()
                .filter(|r| r.recorded_unix_ms >= since_unix_ms)
                .map(|r| RecordedKey {
                    key: r.key.clone(),
                    recorded_unix_ms: r.recorded_unix_ms,
                })
                .collect()
        });
        out.sort_by_key(|r| std::cmp::Reverse(r.recorded_unix_ms));
        out.truncate(limit);
        out
    }

    pub(super) fn get(&self, actor: &ActorKey, key: &str) -> Option<CallRecord> {
        self.by_actor.get(actor)?.get(key).cloned()
    }

    /// Forgets every record of the actor; returns how many went.
    pub(super) fn purge(&mut self, actor: &ActorKey) -> u64 {
        self.by_actor
            .remove(actor)
            .map_or(0, |held| held.len() as u64)
    }

    pub(super) fn expire(&mut self, before_unix_ms: u64, limit: usize) -> u64 {
        let mut removed = 0u64;
        let mut budget = limit;
        self.by_actor.retain(|_, held| {
            held.retain(|_, r| {
                let expired = budget > 0 && r.recorded_unix_ms < before_unix_ms;
                if expired {
                    budget -= 1;
                    removed += 1;
                }
                !expired
            });
            !held.is_empty()
        });
        removed
    }
}
