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
use crate::types::ActorId;

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
    /// `keep`: how long its caller may send the key again
    /// ([`CallRecords::retained_from`]).
    pub(crate) fn record(
        &self,
        actor: &ActorId,
        key: &str,
        now_unix_ms: u64,
        keep: Option<Duration>,
        answer: Answer,
    ) -> CallRecord {
        let from = self.retained_from(now_unix_ms, keep);
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
        self.tracked(records, |r| {
            r.record(key, fingerprint, from, kept, cutoff);
        });
        CallRecord {
            key: key.to_owned(),
            recorded_unix_ms: from,
            data,
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
mod tests {
    use super::*;
    use crate::idempotency::{LOAD_LIMIT, MAX_IN_MEMORY, MAX_LET_GO};
    use crate::types::Payload;
    use std::time::Duration;

    fn ok(s: &'static str) -> Answer {
        Ok(Payload::json(bytes::Bytes::from_static(s.as_bytes())))
    }

    /// A caller that sends its key again only for a while (an SDK's own
    /// keys) has its record expire then, in memory and in the store alike:
    /// both count the record's age from the time it carries.
    #[test]
    fn a_short_key_retention_starts_the_record_early() {
        let hour = Duration::from_secs(3600);
        let table = CallRecords::new(hour, Duration::from_secs(60), usize::MAX);
        let a = ActorId::new("t", "a");
        let now = 10_000_000;
        let from = |keep: Option<u64>| table.retained_from(now, keep.map(Duration::from_secs));
        assert_eq!(from(None), now, "the whole retention");
        assert_eq!(from(Some(90)), now - (3_600_000 - 90_000));
        assert_eq!(
            from(Some(5)),
            now - (3_600_000 - 60_000),
            "at least the floor"
        );
        assert_eq!(from(Some(7_200)), now, "at most the retention");
        let stored = table.record(&a, "k", now, Some(Duration::from_secs(90)), ok("1"));
        assert_eq!(stored.recorded_unix_ms, from(Some(90)));
        // Flushed: memory keeps the key until 90 s from now, not an hour.
        table.stored(&a, ["k"]);
        assert_eq!(table.lookup(&a, "k", now + 89_000, false), Lookup::Stored);
        assert_eq!(table.lookup(&a, "k", now + 91_000, false), Lookup::New);
        assert!(
            table.cutoff(now + 91_000) > stored.recorded_unix_ms,
            "the store's sweep takes it"
        );
    }

    #[test]
    fn an_answer_is_kept_until_stored_then_its_key_until_it_expires() {
        let table = CallRecords::new(Duration::from_secs(10), Duration::ZERO, usize::MAX);
        let a = ActorId::new("t", "a");
        let b = ActorId::new("t", "b");
        let stored = table.record(&a, "k", 1_000, None, ok("1"));
        assert_eq!(answer::decode(&stored.data), Some(ok("1")));
        table.record(&a, "k", 2_000, None, ok("2"));
        assert_eq!(
            table.lookup(&a, "k", 5_000, false),
            Lookup::Recorded(ok("1"))
        );
        assert_eq!(
            table.lookup(&b, "k", 5_000, false),
            Lookup::New,
            "per actor"
        );
        assert_eq!(table.lookup(&a, "k", 11_001, false), Lookup::New, "expired");

        // Stored: the answer leaves memory, the key stays known.
        table.stored(&a, ["k"]);
        assert_eq!(table.len(), (0, 1));
        assert_eq!(table.lookup(&a, "k", 5_000, false), Lookup::Stored);
        assert_eq!(table.lookup(&a, "other", 5_000, false), Lookup::New);
        table.record(&a, "k", 6_000, None, ok("3"));
        assert_eq!(table.len(), (0, 1), "a stored key keeps its first answer");
        assert_eq!(table.lookup(&a, "k", 11_001, false), Lookup::New, "expired");
        table.prune(11_001);
        assert_eq!(table.len(), (0, 0));

        let stored = RecordedKey {
            key: stored.key,
            recorded_unix_ms: stored.recorded_unix_ms,
        };
        table.loaded(&a, vec![stored.clone()], true);
        assert_eq!(table.lookup(&a, "k", 5_000, false), Lookup::Stored);
        table.loaded(&a, Vec::new(), true);
        assert_eq!(
            table.lookup(&a, "k", 5_000, false),
            Lookup::New,
            "a new life replaces"
        );
        table.loaded(&a, vec![stored], true);
        table.forget(&a);
        assert_eq!(table.len(), (0, 0));
    }

    /// A retention window shorter than a flush: the expired answer still
    /// waiting for it gives way to the new call's.
    #[test]
    fn an_expired_answer_waiting_for_its_flush_is_replaced() {
        let table = CallRecords::new(Duration::from_secs(10), Duration::ZERO, usize::MAX);
        let a = ActorId::new("t", "a");
        table.record(&a, "k", 1_000, None, ok("1"));
        assert_eq!(table.lookup(&a, "k", 11_001, false), Lookup::New, "expired");
        table.record(&a, "k", 11_001, None, ok("2"));
        assert_eq!(
            table.lookup(&a, "k", 11_002, false),
            Lookup::Recorded(ok("2"))
        );
    }

    #[test]
    fn a_waiting_answer_does_not_hold_the_buffer_it_arrived_in() {
        let table = CallRecords::new(Duration::from_secs(10), Duration::ZERO, usize::MAX);
        let a = ActorId::new("t", "a");
        // An app's batch of answers as the stream decoded it: one buffer,
        // each answer's payload a slice of it.
        let batch = bytes::Bytes::from(vec![b'7'; 64 * 1024]);
        let answer = Ok(Payload::json(batch.slice(100..101)));
        table.record(&a, "k", 1_000, None, answer);
        let Lookup::Recorded(Ok(kept)) = table.lookup(&a, "k", 2_000, false) else {
            panic!("the answer was not recorded");
        };
        assert_eq!(&kept.data[..], b"7");
        assert!(
            !batch.as_ptr_range().contains(&kept.data.as_ptr()),
            "the record points into the 64 KiB batch, keeping it alive"
        );
    }

    #[test]
    fn memory_keeps_every_unstored_answer_and_the_newest_stored_keys() {
        let table = CallRecords::new(Duration::from_secs(3600), Duration::ZERO, usize::MAX);
        let a = ActorId::new("t", "a");
        let keys: Vec<String> = (0..MAX_IN_MEMORY + 10).map(|i| format!("k{i}")).collect();
        for (i, key) in keys.iter().enumerate() {
            table.record(&a, key, 1_000 + i as u64, None, ok("1"));
        }
        assert_eq!(
            table.len(),
            (MAX_IN_MEMORY + 10, 0),
            "none stored: all kept"
        );
        assert_eq!(
            table.lookup(&a, "k0", 5_000, false),
            Lookup::Recorded(ok("1"))
        );
        table.stored(&a, keys.iter().map(String::as_str));
        assert_eq!(table.len(), (0, MAX_IN_MEMORY), "bounded once stored");
        assert_eq!(
            table.lookup(&a, "k0", 5_000, false),
            Lookup::AskStore,
            "evicted"
        );
        assert_eq!(
            table.lookup(&a, "never-sent", 5_000, false),
            Lookup::New,
            "memory still knows every stored key: no store read"
        );
        let newest = format!("k{}", MAX_IN_MEMORY + 9);
        assert_eq!(table.lookup(&a, &newest, 5_000, false), Lookup::Stored);
        // A load cut at the bound: unknown keys may be in the store.
        table.loaded(&a, Vec::new(), false);
        assert_eq!(table.lookup(&a, "k5", 5_000, false), Lookup::AskStore);
        // Unless the caller says it never sent the key: then nothing
        // recorded can be under it.
        assert_eq!(table.lookup(&a, "fresh", 5_000, true), Lookup::New);
        table.loaded(&a, Vec::new(), true);
        assert_eq!(table.lookup(&a, "k5", 5_000, false), Lookup::New);
    }

    #[test]
    fn keys_let_go_are_told_by_their_tags_until_there_are_too_many() {
        let table = CallRecords::new(Duration::from_secs(3600), Duration::ZERO, usize::MAX);
        let a = ActorId::new("t", "a");
        let key = |i: usize| format!("order-{i}/charge");
        let store = |from: usize, to: usize| {
            for i in from..to {
                // 1,000 keys a second.
                table.record(&a, &key(i), 1_000_000 + i as u64, None, ok("1"));
                table.stored(&a, [key(i).as_str()]);
            }
        };
        store(0, LOAD_LIMIT);
        assert_eq!(table.len(), (0, MAX_IN_MEMORY));
        assert_eq!(table.let_go(&a), (MAX_LET_GO, false));
        let now = 1_000_000 + LOAD_LIMIT as u64;
        // A retry of the oldest key, long out of the fingerprints: the
        // store has its answer.
        assert_eq!(table.lookup(&a, &key(0), now, false), Lookup::AskStore);
        assert_eq!(
            table.lookup(&a, &key(MAX_LET_GO - 1), now, false),
            Lookup::AskStore
        );
        assert_eq!(
            table.lookup(&a, &key(LOAD_LIMIT - 1), now, false),
            Lookup::Stored
        );
        // A key the caller chose and never sent: new, without a read.
        let misses = (LOAD_LIMIT..LOAD_LIMIT + 10_000)
            .filter(|i| table.lookup(&a, &key(*i), now, false) != Lookup::New)
            .count();
        assert!(misses <= 1, "{misses} new keys sent to the store");

        // One more key let go than tags kept: memory no longer knows them
        // all, and only a key marked new skips the store.
        store(LOAD_LIMIT, LOAD_LIMIT + 1);
        assert_eq!(table.let_go(&a), (0, true));
        assert_eq!(table.lookup(&a, "never-sent", now, false), Lookup::AskStore);
        assert_eq!(table.lookup(&a, "never-sent", now, true), Lookup::New);
    }

    #[test]
    fn tags_expire_with_their_keys() {
        let table = CallRecords::new(Duration::from_secs(10), Duration::ZERO, usize::MAX);
        let a = ActorId::new("t", "a");
        let keys: Vec<String> = (0..MAX_IN_MEMORY + 100).map(|i| format!("k{i}")).collect();
        for (i, k) in keys.iter().enumerate() {
            // The first 100 keys at second 1, the rest at second 20.
            let at = if i < 100 { 1_000 } else { 20_000 };
            table.record(&a, k, at, None, ok("1"));
        }
        table.stored(&a, keys.iter().map(String::as_str));
        assert_eq!(table.let_go(&a), (100, false));
        // Second 1 ends 10 s before 11.999 s: not yet out of the window.
        table.prune(11_999);
        assert_eq!(table.let_go(&a), (100, false));
        table.prune(12_000);
        assert_eq!(table.let_go(&a), (0, false));
        assert_eq!(table.lookup(&a, "k0", 12_000, false), Lookup::New);
    }

    /// Random traffic on one actor, against a model of what was sent: a
    /// key recorded within the window is never called new, whatever memory
    /// let go or expired; a key never sent is new, without a store read,
    /// while the actor has fewer keys than memory keeps track of.
    /// `retention_ms` sets how many keys the window holds: at about 37 keys
    /// a second, 3,700 (past the fingerprints, within the tags) or 18,700
    /// (past both).
    fn random_traffic(retention_ms: u64) -> (usize, usize, (usize, bool)) {
        let table = CallRecords::new(
            Duration::from_millis(retention_ms),
            Duration::ZERO,
            usize::MAX,
        );
        let a = ActorId::new("t", "a");
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut random = move |below: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % below
        };
        // Every key recorded, oldest first, and those not stored yet.
        let mut sent: Vec<(String, u64)> = Vec::new();
        let mut unstored: Vec<String> = Vec::new();
        let (mut fresh, mut fresh_new) = (0, 0);
        let mut now = 1_000_000u64;
        for step in 0..60_000u64 {
            now += random(33);
            match random(100) {
                0..=59 => {
                    let key = format!("k{step}");
                    table.record(&a, &key, now, None, ok("1"));
                    unstored.push(key.clone());
                    sent.push((key, now));
                }
                60..=64 => {
                    table.stored(&a, unstored.iter().map(String::as_str));
                    unstored.clear();
                }
                65 => table.prune(now),
                66..=89 => {
                    let cutoff = table.cutoff(now);
                    let first = sent.partition_point(|(_, at)| *at < cutoff);
                    if first < sent.len() {
                        let i = first + random((sent.len() - first) as u64) as usize;
                        let (key, at) = &sent[i];
                        assert_ne!(
                            table.lookup(&a, key, now, false),
                            Lookup::New,
                            "{key}, recorded at {at}, called new at {now}"
                        );
                    }
                }
                _ => {
                    fresh += 1;
                    let key = format!("never-{step}");
                    if table.lookup(&a, &key, now, false) == Lookup::New {
                        fresh_new += 1;
                    }
                }
            }
        }
        (fresh, fresh_new, table.let_go(&a))
    }

    #[test]
    fn a_recorded_key_is_never_called_new_and_a_fresh_one_is_while_memory_knows_all() {
        let (fresh, fresh_new, (tags, spilled)) = random_traffic(100_000);
        assert!(!spilled && tags > 1_000, "{tags} tags, spilled: {spilled}");
        assert!(
            fresh_new + 1 >= fresh,
            "{fresh_new} of {fresh} fresh keys new"
        );
        let (_, _, (_, spilled)) = random_traffic(500_000);
        assert!(spilled, "18,700 keys in the window did not spill");
    }
}
