//! One batch of reminder writes as one sled batch: each put is a record and
//! an index entry, each delete two removals, and the old index entry of a
//! reminder that moves is found from the record, or from the writer's
//! `stored_due` hint without reading it.
//!
//! A wrong hint removes an index entry that is not there and leaves the real
//! one behind, pointing at a record that moved on or is gone. Loads skip
//! such an entry (its due time is not the record's) and hand it back as an
//! orphan; the next batch removes it if it is still one.

use std::collections::HashMap;

use troupe_storage::{ReminderApplied, ReminderOp, ReminderWrite};

use super::{tagged, BY_DUE, RECORD};
use crate::db::{Failure, Handles};

/// A write reduced to what the batch needs: the record key without its tag,
/// and what becomes of it.
pub(super) struct Prepared {
    bare: Vec<u8>,
    /// `Some(due | data)`: a put; `None`: a delete.
    value: Option<Vec<u8>>,
    hint: Option<[u8; 8]>,
}

impl Prepared {
    pub(super) fn new(write: &ReminderWrite) -> Self {
        let hint = write.stored_due.map(u64::to_be_bytes);
        match &write.op {
            ReminderOp::Put(r) => {
                let mut value = r.due_unix_ms.to_be_bytes().to_vec();
                value.extend_from_slice(&r.data);
                Self {
                    bare: super::bare_key(&r.key),
                    value: Some(value),
                    hint,
                }
            }
            ReminderOp::Delete(key) => Self {
                bare: super::bare_key(key),
                value: None,
                hint,
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

/// Applies `writes` (every put before every delete, see the trait) and
/// removes those of `orphans` (whole index keys) that still are orphans.
/// Runs on the blocking pool, the only writer of the tree (the scheduler's
/// single writer calls it), so what it reads cannot change before the batch
/// applies.
pub(super) fn apply(
    db: &Handles,
    writes: &[Prepared],
    orphans: &[Vec<u8>],
) -> Result<Vec<ReminderApplied>, Failure> {
    let tree = &db.reminders;
    let mut batch = sled::Batch::default();
    // First, so that a put in this batch that re-creates the same entry
    // overrides the removal.
    for orphan in orphans {
        let Some((due, bare)) = index_parts(orphan) else {
            continue;
        };
        if !indexes(tree.get(tagged(RECORD, &[bare]))?.as_deref(), due) {
            batch.remove(orphan.as_slice());
        }
    }
    // An op on a key already in this batch sees that earlier op's result.
    let mut seen: HashMap<&[u8], Option<[u8; 8]>> = HashMap::new();
    let old_due = |seen: &HashMap<&[u8], Option<[u8; 8]>>,
                   write: &Prepared|
     -> Result<Option<[u8; 8]>, Failure> {
        if let Some(d) = seen.get(write.bare.as_slice()) {
            return Ok(*d);
        }
        if let Some(hint) = write.hint {
            return Ok(Some(hint));
        }
        Ok(tree
            .get(tagged(RECORD, &[&write.bare]))?
            .as_deref()
            .and_then(due_of))
    };
    let puts = writes
        .iter()
        .filter_map(|w| w.value.as_ref().map(|value| (w, value)));
    for (write, value) in puts {
        let Some(due) = due_of(value) else { continue };
        if let Some(old) = old_due(&seen, write)? {
            batch.remove(tagged(BY_DUE, &[&old, &write.bare]));
        }
        batch.insert(tagged(RECORD, &[&write.bare]), value.as_slice());
        batch.insert(tagged(BY_DUE, &[&due, &write.bare]), &[] as &[u8]);
        seen.insert(&write.bare, Some(due));
    }
    let mut existed = Vec::new();
    for write in writes.iter().filter(|w| w.value.is_none()) {
        match old_due(&seen, write)? {
            Some(old) => {
                batch.remove(tagged(BY_DUE, &[&old, &write.bare]));
                batch.remove(tagged(RECORD, &[&write.bare]));
                existed.push(true);
            }
            None => existed.push(false),
        }
        seen.insert(&write.bare, None);
    }
    tree.apply_batch(batch)?;
    db.db.flush()?;
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
