//! The daemon-wide bound on the memory that remembers stored keys
//! (`RuntimeConfig::idempotency_memory_bytes`). Each live actor keeps up to
//! 9,216 keys of the retention window in memory (about 165 KiB once full),
//! so without a bound across actors ten thousand busy actors would hold
//! gigabytes by the end of a day's window.
//!
//! Past the bound, the actors holding the most give memory back until a
//! quarter of it is free again, so a daemon at the bound sheds now and then
//! rather than at every flush. First they keep their stored keys as tags
//! only ([`ActorRecords::compact`]): a new key is still told without a
//! store read, and only a retry of a stored key reads the store. If that
//! is not enough, the largest forget them altogether
//! ([`ActorRecords::forget_stored`]) and then ask the store about any key
//! memory does not know, as an actor with more keys than memory tracks
//! always does: keys callers chose themselves then cost a store read; the
//! SDKs' fresh keys (`new_key`) still cost none. Answers waiting for their
//! flush are never shed: the store cannot give them yet. Under memory
//! pressure (`memory_gate`) they give back half of what they hold.

use std::sync::atomic::Ordering;

use super::actor_records::ActorRecords;
use super::table::CallRecords;

/// Size classes by powers of two: enough for any footprint.
const CLASSES: usize = usize::BITS as usize;

/// Rounds of compaction before actors forget: a round frees less than it
/// reckons (the tags it adds), so another may reach the target.
const COMPACT_ROUNDS: usize = 3;

fn class(bytes: usize) -> usize {
    ((usize::BITS - bytes.leading_zeros()) as usize).min(CLASSES - 1)
}

impl CallRecords {
    /// Bytes the live actors' stored keys take in memory now.
    pub(crate) fn held_bytes(&self) -> usize {
        usize::try_from(self.held.load(Ordering::Relaxed)).unwrap_or(0)
    }

    /// Past the bound, gives memory back until a quarter of the bound is
    /// free (see the module docs); the number of actors that gave.
    pub(crate) fn shed_over_budget(&self) -> usize {
        if self.held_bytes() <= self.budget {
            return 0;
        }
        let shed = self.shed_to(self.budget / 4 * 3);
        self.shed_total.fetch_add(shed as u64, Ordering::Relaxed);
        shed
    }

    /// Under memory pressure (`memory_gate`): halves what is held, the same
    /// way; the number of actors that gave.
    pub(crate) fn give_back_half(&self) -> usize {
        let shed = self.shed_to(self.held_bytes() / 2);
        self.shed_total.fetch_add(shed as u64, Ordering::Relaxed);
        shed
    }

    /// Compacts, then forgets, until memory is down to `target`; the
    /// number of actors that gave.
    fn shed_to(&self, target: usize) -> usize {
        let mut shed = 0;
        for _ in 0..COMPACT_ROUNDS {
            if self.held_bytes() <= target {
                return shed;
            }
            let compacted = self.shed_largest(
                target,
                ActorRecords::fingerprint_bytes,
                ActorRecords::compact,
            );
            if compacted == 0 {
                break;
            }
            shed += compacted;
        }
        if self.held_bytes() > target {
            shed += self.shed_largest(target, ActorRecords::footprint, ActorRecords::forget_stored);
        }
        shed
    }

    /// The bound (`RuntimeConfig::idempotency_memory_bytes`).
    pub(crate) fn budget(&self) -> usize {
        self.budget
    }

    /// Since start: times an actor gave its stored keys' memory back.
    pub(crate) fn shed_total(&self) -> u64 {
        self.shed_total.load(Ordering::Relaxed)
    }

    /// Applies `give` to the actors of the largest `size` until memory is
    /// down to `target`: one pass over the live actors' sizes, then one
    /// that gives, a shard at a time. The number of actors that gave.
    fn shed_largest(
        &self,
        target: usize,
        size: fn(&ActorRecords) -> usize,
        give: fn(&mut ActorRecords),
    ) -> usize {
        let to_free = self.held_bytes().saturating_sub(target);
        let mut by_class = [0usize; CLASSES];
        for shard in self.shards() {
            for records in shard.lock().values() {
                let bytes = size(records);
                by_class[class(bytes)] = by_class[class(bytes)].saturating_add(bytes);
            }
        }
        // The smallest class whose actors, with every larger one's, free
        // enough; those in it give only as far as needed.
        let mut reckoned = 0usize;
        let mut smallest = CLASSES - 1;
        for (c, bytes) in by_class.iter().enumerate().rev() {
            reckoned = reckoned.saturating_add(*bytes);
            smallest = c;
            if reckoned >= to_free {
                break;
            }
        }
        let mut gave = 0;
        // Each pass starts a shard further on, so that the actors that give
        // among equals are not always the same shard's.
        let shards = self.shards();
        let start = self.next_shed.fetch_add(1, Ordering::Relaxed) % shards.len().max(1);
        for shard in shards[start..].iter().chain(&shards[..start]) {
            let mut shard = shard.lock();
            for records in shard.values_mut() {
                if self.held_bytes() <= target {
                    return gave;
                }
                let bytes = size(records);
                if bytes > 0 && class(bytes) >= smallest {
                    self.tracked(records, give);
                    gave += 1;
                }
            }
        }
        gave
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::idempotency::actor_records::Lookup;
    use crate::idempotency::answer::Answer;
    use crate::idempotency::MAX_IN_MEMORY;
    use crate::types::{ActorId, KeyTerms, Payload};

    fn ok() -> Answer {
        Ok(Payload::json(bytes::Bytes::from_static(b"1")))
    }

    /// Records and stores keys `from..to` for `actor`, at second 1.
    fn store_keys(table: &CallRecords, actor: &ActorId, keys: std::ops::Range<usize>) {
        let keys: Vec<String> = keys.map(|i| format!("k{i}")).collect();
        for key in &keys {
            table.record(actor, key, 1_000, KeyTerms::default(), ok());
        }
        table.stored(actor, keys.iter().map(String::as_str));
    }

    fn sum_of_footprints(table: &CallRecords) -> usize {
        table
            .shards()
            .iter()
            .map(|s| {
                s.lock()
                    .values()
                    .map(ActorRecords::footprint)
                    .sum::<usize>()
            })
            .sum()
    }

    fn actors(prefix: &str, n: usize) -> Vec<ActorId> {
        (0..n)
            .map(|i| ActorId::new("t", format!("{prefix}{i}")))
            .collect()
    }

    /// What the bound costs each actor: nothing for the small ones; the
    /// large ones keep knowing every key (tags), so a fresh key costs no
    /// read and a stored one is never called new.
    #[test]
    fn past_the_bound_the_largest_keep_their_keys_as_tags() {
        let (big, small) = (actors("big", 40), actors("small", 40));
        let fill = |table: &CallRecords| {
            for a in &big {
                store_keys(table, a, 0..500);
            }
            for a in &small {
                store_keys(table, a, 0..5);
            }
        };
        let unbounded = CallRecords::new(Duration::from_secs(3600), Duration::ZERO, usize::MAX);
        fill(&unbounded);
        let all = unbounded.held_bytes();
        assert_eq!(all, sum_of_footprints(&unbounded));
        assert_eq!(unbounded.shed_over_budget(), 0, "no bound, nothing shed");

        let budget = all / 2;
        let table = CallRecords::new(Duration::from_secs(3600), Duration::ZERO, budget);
        fill(&table);
        let shed = table.shed_over_budget();
        assert!(shed > 0 && shed < big.len(), "{shed} actors shed");
        assert_eq!(table.shed_total(), shed as u64, "every shed counted");
        let held = table.held_bytes();
        assert!(held <= budget / 4 * 3, "{held} bytes held, bound {budget}");
        assert_eq!(held, sum_of_footprints(&table));
        assert_eq!(table.shed_over_budget(), 0, "within the bound again");

        let now = 2_000;
        for a in &small {
            assert_eq!(table.lookup(a, "k0", now, false), Lookup::Stored, "{a:?}");
        }
        let mut compacted = 0;
        for a in &big {
            let found = table.lookup(a, "k0", now, false);
            assert_ne!(found, Lookup::New, "{a:?} called a stored key new");
            if found == Lookup::AskStore {
                compacted += 1;
                assert_eq!(table.let_go(a), (500, false), "{a:?}");
                assert_eq!(table.lookup(a, "never-sent", now, false), Lookup::New);
            }
        }
        assert_eq!(compacted, shed);
    }

    /// Tags alone over the bound: the largest actors forget their keys and
    /// ask the store about keys they do not know, unless marked new.
    #[test]
    fn when_tags_are_too_many_the_largest_forget_their_keys() {
        let big = actors("big", 4);
        let table = CallRecords::new(Duration::from_secs(3600), Duration::ZERO, 64 * 1024);
        for a in &big {
            // Past the fingerprints: most of them tags already.
            store_keys(&table, a, 0..MAX_IN_MEMORY + 5_000);
        }
        assert!(table.shed_over_budget() > 0);
        assert!(table.held_bytes() <= 48 * 1024, "{}", table.held_bytes());
        assert_eq!(table.held_bytes(), sum_of_footprints(&table));
        let now = 2_000;
        let forgot: Vec<_> = big.iter().filter(|a| table.let_go(a).1).collect();
        assert!(!forgot.is_empty());
        for a in forgot {
            assert_eq!(table.lookup(a, "k0", now, false), Lookup::AskStore);
            assert_eq!(table.lookup(a, "never-sent", now, false), Lookup::AskStore);
            assert_eq!(table.lookup(a, "never-sent", now, true), Lookup::New);
        }
    }

    /// The running total stays the sum of the actors' footprints through
    /// every kind of change: new lives, flushes, expiry, shedding, ends.
    #[test]
    fn the_total_follows_every_change() {
        let table = CallRecords::new(Duration::from_secs(10), Duration::ZERO, 64 * 1024);
        let all = actors("a", 30);
        for (i, a) in all.iter().enumerate() {
            store_keys(&table, a, 0..20 * i);
            assert_eq!(table.held_bytes(), sum_of_footprints(&table));
        }
        table.record(&all[3], "waiting", 1_000, KeyTerms::default(), ok());
        let reloaded = (0..300)
            .map(|i| troupe_storage::RecordedKey {
                key: format!("r{i}"),
                recorded_unix_ms: 5_000,
            })
            .collect();
        table.loaded(&all[4], reloaded, true);
        table.loaded(&all[5], Vec::new(), true);
        table.loaded(&all[6], Vec::new(), false);
        assert_eq!(table.held_bytes(), sum_of_footprints(&table));
        assert!(table.shed_over_budget() > 0);
        assert_eq!(table.held_bytes(), sum_of_footprints(&table));
        table.forget(&all[29]);
        table.forget(&all[4]);
        assert_eq!(table.held_bytes(), sum_of_footprints(&table));
        table.prune(14_000);
        assert_eq!(table.held_bytes(), sum_of_footprints(&table));
        for a in &all {
            table.forget(a);
        }
        assert_eq!(table.held_bytes(), 0);
    }
}
