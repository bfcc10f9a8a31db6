//! [`CallRecords`]: where a record's retention starts, what memory keeps of
//! answers, fingerprints and tags, and when an actor spills to the store.

use super::*;
use crate::idempotency::{LOAD_LIMIT, MAX_IN_MEMORY, MAX_LET_GO};
use crate::types::Payload;
use std::time::Duration;

fn ok(s: &'static str) -> Answer {
    Ok(Payload::json(bytes::Bytes::from_static(s.as_bytes())))
}

/// A key its caller may send again for `secs`.
fn keep(secs: u64) -> KeyTerms {
    KeyTerms {
        keep: Some(Duration::from_secs(secs)),
        new_key: false,
    }
}

/// A key its caller says it never sent before (an SDK's fresh one).
const NEW: KeyTerms = KeyTerms {
    keep: None,
    new_key: true,
};

/// The store may write a new key's record without looking for an earlier
/// one (sled's existence check) only when memory knew no record of the
/// key either; a key memory knows, or one not said to be new, is looked
/// for, so that it keeps its first answer.
#[test]
fn a_record_is_marked_new_only_when_its_caller_and_memory_agree() {
    let table = CallRecords::new(Duration::from_secs(10), Duration::ZERO, usize::MAX);
    let a = ActorId::new("t", "a");
    assert!(table.record(&a, "fresh", 1_000, NEW, ok("1")).new_key);
    assert!(
        !table.record(&a, "fresh", 1_500, NEW, ok("2")).new_key,
        "memory holds its answer"
    );
    table.stored(&a, ["fresh"]);
    assert!(
        !table.record(&a, "fresh", 2_000, NEW, ok("3")).new_key,
        "memory knows it is stored"
    );
    assert!(
        !table
            .record(&a, "mine", 2_000, KeyTerms::default(), ok("1"))
            .new_key
    );
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
    let stored = table.record(&a, "k", now, keep(90), ok("1"));
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
    let stored = table.record(&a, "k", 1_000, KeyTerms::default(), ok("1"));
    assert_eq!(answer::decode(&stored.data), Some(ok("1")));
    table.record(&a, "k", 2_000, KeyTerms::default(), ok("2"));
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
    table.record(&a, "k", 6_000, KeyTerms::default(), ok("3"));
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
    table.record(&a, "k", 1_000, KeyTerms::default(), ok("1"));
    assert_eq!(table.lookup(&a, "k", 11_001, false), Lookup::New, "expired");
    table.record(&a, "k", 11_001, KeyTerms::default(), ok("2"));
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
    table.record(&a, "k", 1_000, KeyTerms::default(), answer);
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
        table.record(&a, key, 1_000 + i as u64, KeyTerms::default(), ok("1"));
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
            table.record(
                &a,
                &key(i),
                1_000_000 + i as u64,
                KeyTerms::default(),
                ok("1"),
            );
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
        table.record(&a, k, at, KeyTerms::default(), ok("1"));
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
                table.record(&a, &key, now, KeyTerms::default(), ok("1"));
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
