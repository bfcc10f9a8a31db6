//! The answers of keyed calls to this daemon's live actors, in memory: what
//! a retry is answered from without a store read. An actor's records are
//! loaded with its state when it activates and forgotten when it goes, so
//! the table holds live actors' records only, each for the retention window.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use hashbrown::HashMap;
use parking_lot::Mutex;
use tracing::warn;
use troupe_storage::CallRecord;

use super::answer::{self, Answer};
use crate::types::ActorId;

const SHARDS: usize = 32;

#[derive(Debug)]
struct Recorded {
    at_unix_ms: u64,
    answer: Answer,
}

/// One actor's records, and the oldest one's time (pruning skips actors
/// with nothing old enough).
#[derive(Debug, Default)]
struct ActorRecords {
    by_key: HashMap<Box<str>, Recorded>,
    oldest_unix_ms: u64,
}

impl ActorRecords {
    fn insert(&mut self, key: &str, at_unix_ms: u64, answer: Answer) {
        if self.by_key.is_empty() || at_unix_ms < self.oldest_unix_ms {
            self.oldest_unix_ms = at_unix_ms;
        }
        self.by_key
            .entry(key.into())
            .or_insert(Recorded { at_unix_ms, answer });
    }

    /// Drops records from before `cutoff`; whether any are left.
    fn prune(&mut self, cutoff: u64) -> bool {
        if self.oldest_unix_ms < cutoff {
            self.by_key.retain(|_, r| r.at_unix_ms >= cutoff);
            self.oldest_unix_ms = self
                .by_key
                .values()
                .map(|r| r.at_unix_ms)
                .min()
                .unwrap_or(0);
        }
        !self.by_key.is_empty()
    }
}

#[derive(Debug)]
pub(crate) struct CallRecords {
    shards: Box<[Mutex<HashMap<ActorId, ActorRecords>>]>,
    hasher: RandomState,
    retention_ms: u64,
}

impl CallRecords {
    pub(crate) fn new(retention: std::time::Duration) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            retention_ms: crate::input::millis(retention),
        }
    }

    fn shard(&self, actor: &ActorId) -> &Mutex<HashMap<ActorId, ActorRecords>> {
        let hash = self.hasher.hash_one(actor) as usize;
        &self.shards[hash % self.shards.len()]
    }

    /// Records older than this are expired at `now_unix_ms`.
    pub(crate) fn cutoff(&self, now_unix_ms: u64) -> u64 {
        now_unix_ms.saturating_sub(self.retention_ms)
    }

    /// The recorded answer of `key`, unless it expired.
    pub(crate) fn lookup(&self, actor: &ActorId, key: &str, now_unix_ms: u64) -> Option<Answer> {
        let shard = self.shard(actor).lock();
        let recorded = shard.get(actor)?.by_key.get(key)?;
        (recorded.at_unix_ms >= self.cutoff(now_unix_ms)).then(|| recorded.answer.clone())
    }

    /// Records `answer` for `key` (a key recorded already keeps its first
    /// answer) and returns the record to store with the turn's changes.
    pub(crate) fn record(
        &self,
        actor: &ActorId,
        key: &str,
        now_unix_ms: u64,
        answer: Answer,
    ) -> CallRecord {
        let data = answer::encode(&answer);
        let mut shard = self.shard(actor).lock();
        let records = shard.entry(actor.clone()).or_default();
        records.prune(self.cutoff(now_unix_ms));
        records.insert(key, now_unix_ms, answer);
        CallRecord {
            key: key.to_owned(),
            recorded_unix_ms: now_unix_ms,
            data,
        }
    }

    /// The actor activated with `stored` records (read with its state):
    /// they replace whatever an earlier activation left.
    pub(crate) fn loaded(&self, actor: &ActorId, stored: Vec<CallRecord>) {
        let mut records = ActorRecords::default();
        for record in stored {
            match answer::decode(&record.data) {
                Some(answer) => records.insert(&record.key, record.recorded_unix_ms, answer),
                None => warn!(
                    actor = %actor,
                    key = %record.key,
                    "undecodable call record ignored: a retry with this key runs the method again"
                ),
            }
        }
        let mut shard = self.shard(actor).lock();
        if records.by_key.is_empty() {
            shard.remove(actor);
        } else {
            shard.insert(actor.clone(), records);
        }
    }

    /// The actor's activation ended: its records stay in the store only.
    pub(crate) fn forget(&self, actor: &ActorId) {
        self.shard(actor).lock().remove(actor);
    }

    /// Drops expired records of every actor, one shard at a time.
    pub(crate) fn prune(&self, now_unix_ms: u64) {
        let cutoff = self.cutoff(now_unix_ms);
        for shard in self.shards.iter() {
            shard.lock().retain(|_, records| records.prune(cutoff));
        }
    }

    /// Records held in memory now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().values().map(|r| r.by_key.len()).sum::<usize>())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::types::Payload;

    fn ok(s: &'static str) -> Answer {
        Ok(Payload::json(bytes::Bytes::from_static(s.as_bytes())))
    }

    #[test]
    fn first_answer_kept_until_it_expires_and_forgotten_with_the_actor() {
        let table = CallRecords::new(Duration::from_secs(10));
        let a = ActorId::new("t", "a");
        let b = ActorId::new("t", "b");
        let stored = table.record(&a, "k", 1_000, ok("1"));
        assert_eq!(answer::decode(&stored.data), Some(ok("1")));
        table.record(&a, "k", 2_000, ok("2"));
        assert_eq!(table.lookup(&a, "k", 5_000), Some(ok("1")));
        assert_eq!(table.lookup(&b, "k", 5_000), None, "per actor");
        assert_eq!(table.lookup(&a, "k", 11_001), None, "expired");
        table.prune(11_001);
        assert_eq!(table.len(), 0);

        table.loaded(&a, vec![stored.clone()]);
        assert_eq!(table.lookup(&a, "k", 5_000), Some(ok("1")), "loaded back");
        table.loaded(&a, Vec::new());
        assert_eq!(table.lookup(&a, "k", 5_000), None, "a new life replaces");
        table.loaded(&a, vec![stored]);
        table.forget(&a);
        assert_eq!(table.len(), 0);
    }
}
