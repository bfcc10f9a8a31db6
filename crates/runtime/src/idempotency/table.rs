//! The keyed calls of this daemon's live actors, in memory: what tells a
//! retry from a new call without a store read, and the answers the store
//! does not hold yet. An actor's records are loaded when it activates and
//! forgotten when it goes.
//!
//! An answer stays in memory until the flusher says the store holds it
//! ([`CallRecords::stored`]); from then on memory keeps the key's
//! fingerprint only, and a retry reads the answer from the store
//! ([`Lookup::Stored`]). Retries are rare, and answers kept for the whole
//! retention window cost about 300 bytes per record for a small answer and
//! an answer's size for a large one, up to 1,024 per actor.
//!
//! Fingerprints are bounded per actor ([`MAX_IN_MEMORY`](super::MAX_IN_MEMORY),
//! the most recent of the retention window); the keys let go past them
//! stay as 32-bit tags, up to [`MAX_LET_GO`](super::MAX_LET_GO) more, so
//! memory still knows whether the store may hold a key: a retry of one of
//! them asks the store ([`Lookup::AskStore`]), any other key is new. An
//! actor that has more (a busy one, or one whose load was cut at
//! [`LOAD_LIMIT`](super::LOAD_LIMIT)) is marked spilled: a key not found in
//! memory may still be in the store, and the caller looks there unless it
//! says the key is new. Answers waiting for their flush are not bounded by
//! either: the store cannot answer for them yet (a write-behind actor can
//! answer more keyed calls than the bound between two flushes).
//!
//! Across actors, the memory the stored keys take is bounded too
//! (`budget`): this table keeps the total in step with every change.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use hashbrown::HashMap;
use parking_lot::Mutex;
use troupe_storage::{CallRecord, RecordedKey};

use super::actor_records::{ActorRecords, Fingerprint, Lookup};
use super::answer::{self, Answer};
use crate::types::{ActorId, KeyTerms};

const SHARDS: usize = 32;

#[derive(Debug)]
pub(crate) struct CallRecords {
    shards: Box<[Mutex<HashMap<ActorId, ActorRecords>>]>,
    hasher: RandomState,
    /// Two independent keys for a key's 128-bit fingerprint.
    fingerprint_keys: [RandomState; 2],
    retention_ms: u64,
    /// The least a caller's key retention keeps an answer (`retained_from`).
    min_keep_ms: u64,
    /// Bytes of every actor's stored keys (`ActorRecords::footprint`).
    pub(super) held: AtomicI64,
    /// What `held` may reach before actors shed theirs (`budget`).
    pub(super) budget: usize,
    /// The shard the next shedding pass starts at (`budget`).
    pub(super) next_shed: AtomicUsize,
    /// Since start: times an actor gave memory back (`budget`).
    pub(super) shed_total: AtomicU64,
}

impl CallRecords {
    /// `budget`: the bytes the live actors' stored keys may take together;
    /// `min_keep`: the least a caller's key retention keeps an answer.
    pub(crate) fn new(retention: Duration, min_keep: Duration, budget: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            fingerprint_keys: [RandomState::new(), RandomState::new()],
            retention_ms: crate::input::millis(retention),
            min_keep_ms: crate::input::millis(min_keep),
            held: AtomicI64::new(0),
            budget,
            next_shed: AtomicUsize::new(0),
            shed_total: AtomicU64::new(0),
        }
    }

    pub(super) fn shards(&self) -> &[Mutex<HashMap<ActorId, ActorRecords>>] {
        &self.shards
    }

    /// Moves `held` by an actor's footprint going from `before` to `after`.
    pub(super) fn moved(&self, before: usize, after: usize) {
        let signed = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let delta = signed(after).saturating_sub(signed(before));
        if delta != 0 {
            self.held.fetch_add(delta, Ordering::Relaxed);
        }
    }

    /// Runs `change` on `records`, keeping `held` in step.
    pub(super) fn tracked<R>(
        &self,
        records: &mut ActorRecords,
        change: impl FnOnce(&mut ActorRecords) -> R,
    ) -> R {
        let before = records.footprint();
        let out = change(records);
        self.moved(before, records.footprint());
        out
    }

    fn shard(&self, actor: &ActorId) -> &Mutex<HashMap<ActorId, ActorRecords>> {
        let hash = self.hasher.hash_one(actor) as usize;
        &self.shards[hash % self.shards.len()]
    }

    fn fingerprint(&self, key: &str) -> Fingerprint {
        let [high, low] = &self.fingerprint_keys;
        (u128::from(high.hash_one(key)) << 64) | u128::from(low.hash_one(key))
    }

    /// Where the retention of a record made at `now_unix_ms` starts: then,
    /// or earlier for a caller who sends its key again only for `keep`
    /// (`CallExtra::key_retention`), so that the record expires `keep` from
    /// now (never sooner than `min_keep`, never later than the retention).
    /// Memory and the store both count a record's age from this time, so
    /// neither needs an expiry of its own.
    pub(crate) fn retained_from(&self, now_unix_ms: u64, keep: Option<Duration>) -> u64 {
        let Some(keep) = keep else {
            return now_unix_ms;
        };
        let keep_ms = crate::input::millis(keep).max(self.min_keep_ms);
        let early = self.retention_ms.saturating_sub(keep_ms);
        now_unix_ms.saturating_sub(early)
    }

    /// Records older than this are expired at `now_unix_ms`.
    pub(crate) fn cutoff(&self, now_unix_ms: u64) -> u64 {
        now_unix_ms.saturating_sub(self.retention_ms)
    }

    /// What memory knows of `key` at `now_unix_ms` (`new_key`: the caller
    /// says it never sent it before, see [`Lookup::AskStore`]).
    pub(crate) fn lookup(
        &self,
        actor: &ActorId,
        key: &str,
        now_unix_ms: u64,
        new_key: bool,
    ) -> Lookup {
        let fingerprint = self.fingerprint(key);
        let shard = self.shard(actor).lock();
        match shard.get(actor) {
            Some(records) => records.lookup(key, fingerprint, self.cutoff(now_unix_ms), new_key),
            None => Lookup::New,
        }
    }

    /// Records `answer` for `key` (a key recorded already keeps its first
    /// answer) and returns the record to store with the turn's changes;
    /// `terms`: how long its caller may send the key again
    /// ([`CallRecords::retained_from`]), and whether it says the key is new,
    /// which the store may trust only when memory knows no record of it.
    pub(crate) fn record(
        &self,
        actor: &ActorId,
        key: &str,
        now_unix_ms: u64,
        terms: KeyTerms,
        answer: Answer,
    ) -> CallRecord {
        let from = self.retained_from(now_unix_ms, terms.keep);
        let data = answer::encode(&answer);
        // Memory keeps a view of the stored encoding, not the answer's own
        // bytes: those are a slice of the buffer the app's message arrived
        // in, which a record would keep whole until its flush.
        let kept = match answer {
            Ok(_) => answer::decode(&data).unwrap_or(answer),
            Err(_) => answer,
        };
        let fingerprint = self.fingerprint(key);
        let cutoff = self.cutoff(now_unix_ms);
        let mut shard = self.shard(actor).lock();
        let records = shard.entry(actor.clone()).or_default();
        let first = self.tracked(records, |r| r.record(key, fingerprint, from, kept, cutoff));
        CallRecord {
            key: key.to_owned(),
            recorded_unix_ms: from,
            data,
            new_key: terms.new_key && first,
        }
    }

    /// The actor activated with `stored` keys, its most recent (read with
    /// its state; `complete`: all it has in the window). They replace
    /// whatever an earlier activation left.
    pub(crate) fn loaded(&self, actor: &ActorId, mut stored: Vec<RecordedKey>, complete: bool) {
        stored.sort_by_key(|r| r.recorded_unix_ms);
        let mut records = if complete {
            ActorRecords::default()
        } else {
            ActorRecords::spilled()
        };
        for record in &stored {
            records.remember(self.fingerprint(&record.key), record.recorded_unix_ms);
        }
        let after = records.footprint();
        let mut shard = self.shard(actor).lock();
        let replaced = if stored.is_empty() && complete {
            shard.remove(actor)
        } else {
            shard.insert(actor.clone(), records)
        };
        self.moved(replaced.map_or(0, |r| r.footprint()), after);
    }

    /// The store holds the actor's records under `keys` now: memory keeps
    /// their fingerprints only.
    pub(crate) fn stored<'k>(&self, actor: &ActorId, keys: impl IntoIterator<Item = &'k str>) {
        let keys: Vec<(&str, Fingerprint)> = keys
            .into_iter()
            .map(|key| (key, self.fingerprint(key)))
            .collect();
        let mut shard = self.shard(actor).lock();
        let Some(records) = shard.get_mut(actor) else {
            return;
        };
        self.tracked(records, |records| {
            for (key, fingerprint) in keys {
                records.stored(key, fingerprint);
            }
            records.shrink_waiting();
        });
    }

    /// The actor's activation ended: its records stay in the store only.
    pub(crate) fn forget(&self, actor: &ActorId) {
        let gone = self.shard(actor).lock().remove(actor);
        self.moved(gone.map_or(0, |r| r.footprint()), 0);
    }

    /// Drops expired records of every actor, one shard at a time.
    pub(crate) fn prune(&self, now_unix_ms: u64) {
        let cutoff = self.cutoff(now_unix_ms);
        for shard in self.shards.iter() {
            let (mut before, mut after) = (0usize, 0usize);
            shard.lock().retain(|_, records| {
                before = before.saturating_add(records.footprint());
                let keep = records.prune(cutoff);
                if keep {
                    after = after.saturating_add(records.footprint());
                }
                keep
            });
            self.moved(before, after);
        }
    }

    /// An actor's tags of keys let go, and whether memory gave up knowing
    /// its stored keys.
    #[cfg(test)]
    pub(crate) fn let_go(&self, actor: &ActorId) -> (usize, bool) {
        let shard = self.shard(actor).lock();
        shard
            .get(actor)
            .map_or((0, false), ActorRecords::let_go_len)
    }

    /// Records held in memory now: answers and fingerprints.
    #[cfg(test)]
    pub(crate) fn len(&self) -> (usize, usize) {
        self.shards.iter().fold((0, 0), |(a, f), s| {
            s.lock().values().fold((a, f), |(a, f), r| {
                let (ra, rf) = r.len();
                (a + ra, f + rf)
            })
        })
    }
}

#[cfg(test)]
mod tests;
