//! A batch of reminder writes as single-key sled operations, ordered so
//! that a crash between any two of them leaves every reminder either as it
//! was or as written.
//!
//! Not one `sled::Batch`: sled applies a batch under its process-wide write
//! lock, which every read of every tree waits for, so the scheduler's loads
//! stalled behind each group commit (in `cargo bench -p troupe-runtime
//! --bench reminders` firings followed the loads, 18–40k/s against 50k/s due).
//! Single-key operations take that lock shared and run beside the loads.
//!
//! sled recovers a prefix of its log, so after a crash the store holds the
//! effect of some first operations of a batch. The order makes each such
//! prefix harmless:
//! - a put inserts its new index entry, then the record (whose old value
//!   names the old due time), then removes the old index entry;
//! - a delete empties the record (its old value names the due time), then
//!   removes the index entry. An empty record is a deleted reminder, a
//!   tombstone that [`super::sweep`] removes later, in key order.
//!
//! What a cut-short batch leaves is at worst an index entry whose due time is
//! not its record's: an orphan. Loads skip it and hand it back, and the next
//! batch removes it if it is still one. The record's old value comes back
//! from the write that replaces or removes it, so no write reads first.

use troupe_storage::{ReminderApplied, ReminderOp, ReminderWrite};

use super::sweep::Sweep;
use super::{tagged, BY_DUE, RECORD};
use crate::db::{Failure, Handles};

/// A write reduced to what the batch needs: the record key without its tag,
/// and what becomes of it.
pub(super) struct Prepared {
    bare: Vec<u8>,
    /// `Some(due | data)`: a put; `None`: a delete.
    value: Option<Vec<u8>>,
}

impl Prepared {
    pub(super) fn new(write: &ReminderWrite) -> Self {
        match &write.op {
            ReminderOp::Put(r) => {
                let mut value = r.due_unix_ms.to_be_bytes().to_vec();
                value.extend_from_slice(&r.data);
                Self {
                    bare: super::bare_key(&r.key),
                    value: Some(value),
                }
            }
            ReminderOp::Delete(key) => Self {
                bare: super::bare_key(key),
                value: None,
            },
        }
    }

    /// Bytes the batch writes for it, for the free-space check.
    pub(super) fn bytes(&self) -> u64 {
        let value = self.value.as_ref().map_or(0, Vec::len);
        self.bare.len().saturating_mul(2).saturating_add(value) as u64
    }
}

/// The due time stored in a record's value.
pub(super) fn due_of(value: &[u8]) -> Option<[u8; 8]> {
    value.get(..8).and_then(|d| d.try_into().ok())
}

/// An index key's due time and its record's key without the tag.
pub(super) fn index_parts(key: &[u8]) -> Option<(&[u8], &[u8])> {
    Some((key.get(1..9)?, key.get(9..)?))
}

/// Whether an index entry of `due` belongs to the stored `record`: not an
/// orphan.
pub(super) fn indexes(record: Option<&[u8]>, due: &[u8]) -> bool {
    record.and_then(|value| value.get(..8)) == Some(due)
}

/// Applies `writes` (every put before every delete, see the trait),
/// removes those of `orphans` (whole index keys) that still are orphans,
/// and takes `sweep`'s next step. Runs on the blocking pool, the only
/// writer of the tree (the scheduler's single writer calls it), so what it
/// reads cannot change under it.
pub(super) fn apply(
    db: &Handles,
    writes: &[Prepared],
    orphans: &[Vec<u8>],
    sweep: &Sweep,
) -> Result<Vec<ReminderApplied>, Failure> {
    let tree = &db.reminders;
    sweep.prepare(tree, writes.iter().any(|w| w.value.is_none()))?;
    for orphan in orphans {
        let Some((due, bare)) = index_parts(orphan) else {
            continue;
        };
        if !indexes(tree.get(tagged(RECORD, &[bare]))?.as_deref(), due) {
            tree.remove(orphan.as_slice())?;
        }
    }
    let puts = writes
        .iter()
        .filter_map(|w| w.value.as_ref().map(|value| (w, value)));
    for (write, value) in puts {
        let Some(due) = due_of(value) else { continue };
        tree.insert(tagged(BY_DUE, &[&due, &write.bare]), &[] as &[u8])?;
        let old = tree.insert(tagged(RECORD, &[&write.bare]), value.as_slice())?;
        if let Some(old_due) = old.as_deref().and_then(due_of) {
            if old_due != due {
                tree.remove(tagged(BY_DUE, &[&old_due, &write.bare]))?;
            }
        }
    }
    let mut existed = Vec::new();
    for write in writes.iter().filter(|w| w.value.is_none()) {
        let record = tagged(RECORD, &[&write.bare]);
        let old = tree.insert(&record, &[] as &[u8])?;
        match old.as_deref().and_then(due_of) {
            Some(old_due) => {
                tree.remove(tagged(BY_DUE, &[&old_due, &write.bare]))?;
            }
            // Nothing to delete: no tombstone for a key that never was.
            None if old.is_none() => {
                tree.remove(&record)?;
            }
            None => {}
        }
        existed.push(old.is_some_and(|v| !v.is_empty()));
    }
    let tombstones = existed.iter().filter(|e| **e).count();
    if tombstones > 0 {
        sweep.deleted(tombstones);
    }
    sweep.step(tree, writes.len())?;
    // What a batch without writes changes (orphans and tombstones removed,
    // the sweep's mark) may be lost to a crash: the next start meets them
    // again. sled's own flusher writes it out within half a second, so an
    // idle sweep does not fsync at each of its up to ten batches a second.
    if !writes.is_empty() {
        db.sync()?;
    }
    let mut existed = existed.into_iter();
    Ok(writes
        .iter()
        .map(|write| match write.value {
            Some(_) => ReminderApplied::Put,
            None => ReminderApplied::Deleted {
                existed: existed.next().unwrap_or(false),
            },
        })
        .collect())
}
