//! What the runtime's sharded hash tables (the actor directory, the
//! scheduler's loaded reminders) share: which shard a hash picks, and when
//! a shard gives its memory back.

use hashbrown::HashTable;

const SHARD_BITS: u32 = 6;
pub(crate) const SHARDS: usize = 1 << SHARD_BITS;
/// Shards this small are left as they are: shrinking them saves nothing.
const MIN_SHRINK_CAPACITY: usize = 1024;

/// The shard of `hash`. hashbrown indexes buckets with the low bits and tags
/// slots with the top 7; taking the shard from either would leave the
/// tables with correlated bits (a shard on the top bits makes every tag
/// nearly the same, so each probe compares keys of cold entries). Bits
/// 48..54 are used by neither.
pub(crate) fn shard_of(hash: u64) -> usize {
    ((hash >> 48) as usize) & (SHARDS - 1)
}

/// A table never shrinks by itself: after a spike (200k actors that all
/// idled out, a million reminders fired) its memory would stay taken.
/// Halves `table` once it is a quarter full, so a steady churn does not
/// grow and shrink it again and again.
pub(crate) fn shrink_if_sparse<T>(table: &mut HashTable<T>, hash: impl Fn(&T) -> u64) {
    if table.capacity() > MIN_SHRINK_CAPACITY && table.len() < table.capacity() / 4 {
        table.shrink_to(table.len().saturating_mul(2), hash);
    }
}
