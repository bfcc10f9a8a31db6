//! The answers of keyed calls to this daemon's live actors, in memory: what
//! a retry is answered from without a store read. An actor's records are
//! loaded with its state when it activates and forgotten when it goes.
//!
//! Memory is bounded per actor: the [`MAX_IN_MEMORY`] most recent records
//! of the retention window. An actor that has more (a busy one, or one
//! whose load was cut at the bound) is marked spilled: a key not found in
//! memory may still be in the store, and the caller looks there. So only a
//! record the store holds may leave: one still waiting for its flush stays
//! past the bound until the flusher says it is [`stored`](CallRecords::stored)
//! (a write-behind actor answers more keyed calls than the bound between
//! two flushes).

use std::collections::hash_map::RandomState;
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashMap;
use parking_lot::Mutex;
use tracing::warn;
use troupe_storage::CallRecord;

use super::answer::{self, Answer};
use crate::types::ActorId;

const SHARDS: usize = 32;

/// Records kept in memory per live actor (about 100-200 bytes each plus
/// the answer); older ones are read from the store when asked for.
pub(crate) const MAX_IN_MEMORY: usize = 1024;

/// What memory knows about a key.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    Recorded(Answer),
    /// Not recorded (within the retention window).
    New,
    /// Not in memory, but the actor has records only the store holds.
    AskStore,
}

#[derive(Debug)]
struct Recorded {
    at_unix_ms: u64,
    answer: Answer,
    /// The store holds it: memory may let it go.
    stored: bool,
}

/// One actor's records, oldest first in `order`.
#[derive(Debug, Default)]
struct ActorRecords {
    by_key: HashMap<Arc<str>, Recorded>,
    order: VecDeque<(u64, Arc<str>)>,
    /// The store holds records of this actor that memory does not.
    spilled: bool,
}

impl ActorRecords {
    fn insert(&mut self, key: &str, at_unix_ms: u64, answer: Answer, stored: bool) {
        if self.by_key.contains_key(key) {
            return;
        }
        let key: Arc<str> = key.into();
        self.order.push_back((at_unix_ms, key.clone()));
        let record = Recorded {
            at_unix_ms,
            answer,
            stored,
        };
        self.by_key.insert(key, record);
        self.trim();
    }

    /// Lets the oldest stored records go while more than the bound are
    /// held; stops at the first one the store does not hold yet.
    fn trim(&mut self) {
        while self.by_key.len() > MAX_IN_MEMORY {
            let Some((_, oldest)) = self.order.front() else {
                return;
            };
            if !self.by_key.get(oldest).is_some_and(|r| r.stored) {
                return;
            }
            if let Some((_, oldest)) = self.order.pop_front() {
                self.by_key.remove(&oldest);
                self.spilled = true;
            }
        }
    }

    /// Drops records from before `cutoff`; whether any are left (or the
    /// store may still hold some).
    fn prune(&mut self, cutoff: u64) -> bool {
        while self.order.front().is_some_and(|(at, _)| *at < cutoff) {
            if let Some((_, key)) = self.order.pop_front() {
                self.by_key.remove(&key);
            }
        }
        !self.by_key.is_empty() || self.spilled
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

    /// What memory knows of `key` at `now_unix_ms`.
    pub(crate) fn lookup(&self, actor: &ActorId, key: &str, now_unix_ms: u64) -> Lookup {
        let shard = self.shard(actor).lock();
        let Some(records) = shard.get(actor) else {
            return Lookup::New;
        };
        match records.by_key.get(key) {
            Some(r) if r.at_unix_ms >= self.cutoff(now_unix_ms) => {
                Lookup::Recorded(r.answer.clone())
            }
            Some(_) => Lookup::New,
            None if records.spilled => Lookup::AskStore,
            None => Lookup::New,
        }
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
        // Memory keeps a view of the stored encoding, not the answer's own
        // bytes: those are a slice of the buffer the app's message arrived
        // in, which a record would keep whole for the retention window.
        let kept = match answer {
            Ok(_) => answer::decode(&data).unwrap_or(answer),
            Err(_) => answer,
        };
        let mut shard = self.shard(actor).lock();
        let records = shard.entry(actor.clone()).or_default();
        records.prune(self.cutoff(now_unix_ms));
        records.insert(key, now_unix_ms, kept, false);
        CallRecord {
            key: key.to_owned(),
            recorded_unix_ms: now_unix_ms,
            data,
        }
    }

    /// The actor activated with `stored` records, its most recent (read
    /// with its state; `complete`: all it has in the window). They replace
    /// whatever an earlier activation left.
    pub(crate) fn loaded(&self, actor: &ActorId, mut stored: Vec<CallRecord>, complete: bool) {
        stored.sort_by_key(|r| r.recorded_unix_ms);
        let mut records = ActorRecords {
            spilled: !complete,
            ..ActorRecords::default()
        };
        for record in stored {
            match answer::decode(&record.data) {
                Some(answer) => {
                    records.insert(&record.key, record.recorded_unix_ms, answer, true);
                }
                None => warn!(
                    actor = %actor,
                    key = %record.key,
                    "undecodable call record ignored: a retry with this key runs the method again"
                ),
            }
        }
        let mut shard = self.shard(actor).lock();
        if records.by_key.is_empty() && !records.spilled {
            shard.remove(actor);
        } else {
            shard.insert(actor.clone(), records);
        }
    }

    /// The store holds the actor's records under `keys` now: memory may let
    /// them go.
    pub(crate) fn stored<'k>(&self, actor: &ActorId, keys: impl IntoIterator<Item = &'k str>) {
        let mut shard = self.shard(actor).lock();
        let Some(records) = shard.get_mut(actor) else {
            return;
        };
        for key in keys {
            if let Some(record) = records.by_key.get_mut(key) {
                record.stored = true;
            }
        }
        records.trim();
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
        assert_eq!(table.lookup(&a, "k", 5_000), Lookup::Recorded(ok("1")));
        assert_eq!(table.lookup(&b, "k", 5_000), Lookup::New, "per actor");
        assert_eq!(table.lookup(&a, "k", 11_001), Lookup::New, "expired");
        table.prune(11_001);
        assert_eq!(table.len(), 0);

        table.loaded(&a, vec![stored.clone()], true);
        assert_eq!(table.lookup(&a, "k", 5_000), Lookup::Recorded(ok("1")));
        table.loaded(&a, Vec::new(), true);
        assert_eq!(
            table.lookup(&a, "k", 5_000),
            Lookup::New,
            "a new life replaces"
        );
        table.loaded(&a, vec![stored], true);
        table.forget(&a);
        assert_eq!(table.len(), 0);
    }

    #[test]
    fn a_recorded_answer_does_not_hold_the_buffer_it_arrived_in() {
        let table = CallRecords::new(Duration::from_secs(10));
        let a = ActorId::new("t", "a");
        // An app's batch of answers as the stream decoded it: one buffer,
        // each answer's payload a slice of it.
        let batch = bytes::Bytes::from(vec![b'7'; 64 * 1024]);
        let answer = Ok(Payload::json(batch.slice(100..101)));
        table.record(&a, "k", 1_000, answer);
        let Lookup::Recorded(Ok(kept)) = table.lookup(&a, "k", 2_000) else {
            panic!("the answer was not recorded");
        };
        assert_eq!(&kept.data[..], b"7");
        assert!(
            !batch.as_ptr_range().contains(&kept.data.as_ptr()),
            "the record points into the 64 KiB batch, keeping it alive"
        );
    }

    #[test]
    fn memory_keeps_the_newest_and_sends_the_rest_to_the_store() {
        let table = CallRecords::new(Duration::from_secs(3600));
        let a = ActorId::new("t", "a");
        let keys: Vec<String> = (0..MAX_IN_MEMORY + 10).map(|i| format!("k{i}")).collect();
        for (i, key) in keys.iter().enumerate() {
            table.record(&a, key, 1_000 + i as u64, ok("1"));
        }
        assert_eq!(table.len(), MAX_IN_MEMORY + 10, "none stored: all kept");
        assert_eq!(table.lookup(&a, "k0", 5_000), Lookup::Recorded(ok("1")));
        table.stored(&a, keys[..5].iter().map(String::as_str));
        assert_eq!(table.len(), MAX_IN_MEMORY + 5, "the stored ones went");
        assert_eq!(table.lookup(&a, "k4", 5_000), Lookup::AskStore);
        assert_eq!(table.lookup(&a, "k5", 5_000), Lookup::Recorded(ok("1")));
        table.stored(&a, keys.iter().map(String::as_str));
        assert_eq!(table.len(), MAX_IN_MEMORY, "bounded");
        assert_eq!(table.lookup(&a, "k0", 5_000), Lookup::AskStore, "evicted");
        let newest = format!("k{}", MAX_IN_MEMORY + 9);
        assert_eq!(table.lookup(&a, &newest, 5_000), Lookup::Recorded(ok("1")));
        // A load cut at the bound: unknown keys may be in the store.
        table.loaded(&a, Vec::new(), false);
        assert_eq!(table.lookup(&a, "k5", 5_000), Lookup::AskStore);
        table.loaded(&a, Vec::new(), true);
        assert_eq!(table.lookup(&a, "k5", 5_000), Lookup::New);
    }
}
