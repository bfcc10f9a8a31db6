//! Reminders in the daemon's sled database, beside the state.

use std::collections::HashMap;

use async_trait::async_trait;
use bytes::Bytes;
use troupe_storage::{
    ReminderApplied, ReminderKey, ReminderOp, ReminderRecord, ReminderStore, ReminderWrite,
    StoreError,
};

use crate::db::{Failure, SledDb};
use crate::keys::{actor_prefix, read_segment, type_prefix};
use crate::SledStore;

/// Reminders in the daemon's sled database, beside the state.
///
/// One tree (`reminders`) holds both the records and the due-time index,
/// under different key prefixes, so one `apply_batch` changes both
/// atomically (sled's multi-tree transactions cost several times more per
/// reminder):
/// `R | actor prefix | name` → `due (u64 BE) | data`;
/// `D | due (u64 BE) | actor prefix | name` → ().
///
/// The database is the state store's, re-opened after an I/O error by
/// whichever store meets it first (see [`crate::db`]).
#[derive(Debug, Clone)]
pub struct SledReminders {
    db: SledDb,
}

const RECORD: u8 = b'R';
const BY_DUE: u8 = b'D';

impl SledReminders {
    /// The reminders in `store`'s database (its `reminders` tree is opened
    /// with the database).
    pub fn open(store: &SledStore) -> Result<Self, StoreError> {
        Ok(Self {
            db: store.db().clone(),
        })
    }
}

/// `actor prefix | name`: a record key without its tag.
fn bare_key(key: &ReminderKey) -> Vec<u8> {
    let mut k = actor_prefix(&key.actor_type, &key.actor_id);
    k.extend_from_slice(key.name.as_bytes());
    k
}

fn tagged(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
    let mut k = vec![tag];
    for p in parts {
        k.extend_from_slice(p);
    }
    k
}

fn record_key(key: &ReminderKey) -> Vec<u8> {
    tagged(RECORD, &[&bare_key(key)])
}

fn due_key(due: u64, key: &ReminderKey) -> Vec<u8> {
    tagged(BY_DUE, &[&due.to_be_bytes(), &bare_key(key)])
}

fn parse_record_key(k: &[u8]) -> Result<ReminderKey, StoreError> {
    let corrupt = || StoreError::Corrupt("malformed reminder key".into());
    let (actor_type, rest) = read_segment(k).ok_or_else(corrupt)?;
    let (actor_id, rest) = read_segment(rest).ok_or_else(corrupt)?;
    let name = std::str::from_utf8(rest).map_err(|_| corrupt())?;
    Ok(ReminderKey {
        actor_type: actor_type.to_owned(),
        actor_id: actor_id.to_owned(),
        name: name.to_owned(),
    })
}

fn parse_record(key: ReminderKey, value: &[u8]) -> Result<ReminderRecord, StoreError> {
    let due: [u8; 8] = value
        .get(..8)
        .and_then(|d| d.try_into().ok())
        .ok_or_else(|| StoreError::Corrupt("reminder record shorter than its due time".into()))?;
    Ok(ReminderRecord {
        key,
        due_unix_ms: u64::from_be_bytes(due),
        data: Bytes::copy_from_slice(&value[8..]),
    })
}

#[async_trait]
impl ReminderStore for SledReminders {
    async fn apply_reminders(
        &self,
        writes: &[ReminderWrite],
    ) -> Result<Vec<ReminderApplied>, StoreError> {
        // Epochs are not checked: see the crate doc.
        let puts: Vec<(Vec<u8>, Vec<u8>, [u8; 8])> = writes
            .iter()
            .filter_map(|w| match &w.op {
                ReminderOp::Put(r) => Some(r),
                ReminderOp::Delete(_) => None,
            })
            .map(|r| {
                let due = r.due_unix_ms.to_be_bytes();
                let mut value = due.to_vec();
                value.extend_from_slice(&r.data);
                (bare_key(&r.key), value, due)
            })
            .collect();
        let deletes: Vec<Vec<u8>> = writes
            .iter()
            .filter_map(|w| match &w.op {
                ReminderOp::Delete(key) => Some(bare_key(key)),
                ReminderOp::Put(_) => None,
            })
            .collect();
        let puts_in_order: Vec<bool> = writes
            .iter()
            .map(|w| matches!(w.op, ReminderOp::Put(_)))
            .collect();
        // Each put is a record and an index entry; a delete, two removals.
        let bytes = puts.iter().fold(0u64, |sum, (key, value, _)| {
            sum.saturating_add(key.len().saturating_mul(2).saturating_add(value.len()) as u64)
        });
        // Reads, the batch and the fsync block: `write` keeps them off the
        // async workers.
        self.db
            .write(bytes, move |db| {
                let tree = &db.reminders;
                // Only the scheduler's single writer calls this, so the due times
                // read here cannot change before the batch applies. An op on a
                // key already in this batch sees that earlier op's result.
                let mut seen: HashMap<Vec<u8>, Option<[u8; 8]>> = HashMap::new();
                let old_due = |seen: &HashMap<Vec<u8>, Option<[u8; 8]>>,
                               bare: &[u8]|
                 -> Result<Option<[u8; 8]>, Failure> {
                    if let Some(d) = seen.get(bare) {
                        return Ok(*d);
                    }
                    Ok(tree
                        .get(tagged(RECORD, &[bare]))?
                        .and_then(|v| v.get(..8).and_then(|d| d.try_into().ok())))
                };
                let mut batch = sled::Batch::default();
                for (bare, value, due) in &puts {
                    if let Some(old) = old_due(&seen, bare)? {
                        batch.remove(tagged(BY_DUE, &[&old, bare]));
                    }
                    batch.insert(tagged(RECORD, &[bare]), value.as_slice());
                    batch.insert(tagged(BY_DUE, &[due, bare]), &[] as &[u8]);
                    seen.insert(bare.clone(), Some(*due));
                }
                let mut existed = Vec::with_capacity(deletes.len());
                for bare in &deletes {
                    match old_due(&seen, bare)? {
                        Some(old) => {
                            batch.remove(tagged(BY_DUE, &[&old, bare]));
                            batch.remove(tagged(RECORD, &[bare]));
                            existed.push(true);
                        }
                        None => existed.push(false),
                    }
                    seen.insert(bare.clone(), None);
                }
                tree.apply_batch(batch)?;
                db.db.flush()?;
                let mut existed = existed.into_iter();
                Ok(puts_in_order
                    .iter()
                    .map(|put| match put {
                        true => ReminderApplied::Put,
                        false => ReminderApplied::Deleted {
                            existed: existed.next().unwrap_or(false),
                        },
                    })
                    .collect())
            })
            .await
    }

    async fn get_reminder(&self, key: &ReminderKey) -> Result<Option<ReminderRecord>, StoreError> {
        let key = key.clone();
        self.db
            .read(move |db| match db.reminders.get(record_key(&key))? {
                Some(v) => Ok(Some(parse_record(key, &v)?)),
                None => Ok(None),
            })
            .await
    }

    async fn due_reminders(
        &self,
        after: Option<(u64, &ReminderKey)>,
        until_unix_ms: u64,
        limit: usize,
    ) -> Result<Vec<ReminderRecord>, StoreError> {
        let start = match after {
            Some((due, key)) => {
                let mut k = due_key(due, key);
                k.push(0); // strictly after the cursor
                k
            }
            None => vec![BY_DUE],
        };
        let end = tagged(BY_DUE, &[&until_unix_ms.saturating_add(1).to_be_bytes()]);
        self.db
            .read(move |db| {
                let mut out = Vec::new();
                for item in db.reminders.range(start..end) {
                    if out.len() == limit {
                        break;
                    }
                    let (k, _) = item?;
                    let bare = k
                        .get(9..)
                        .ok_or_else(|| StoreError::Corrupt("short reminder index key".into()))?;
                    let key = parse_record_key(bare)?;
                    // The index and the records change in one batch; a
                    // missing record would be corruption: skip it rather
                    // than fail the load.
                    if let Some(v) = db.reminders.get(tagged(RECORD, &[bare]))? {
                        out.push(parse_record(key, &v)?);
                    }
                }
                Ok(out)
            })
            .await
    }

    async fn list_reminders(
        &self,
        actor_type: Option<&str>,
        actor_id: Option<&str>,
        after: Option<&ReminderKey>,
        limit: usize,
    ) -> Result<Vec<ReminderRecord>, StoreError> {
        let prefix = match (actor_type, actor_id) {
            (Some(t), Some(i)) => tagged(RECORD, &[&actor_prefix(t, i)]),
            (Some(t), None) => tagged(RECORD, &[&type_prefix(t)]),
            _ => vec![RECORD],
        };
        let start = match after {
            Some(key) => {
                let mut k = record_key(key);
                k.push(0);
                k.max(prefix.clone())
            }
            None => prefix.clone(),
        };
        self.db
            .read(move |db| {
                let mut out = Vec::new();
                for item in db.reminders.range(start..) {
                    if out.len() == limit {
                        break;
                    }
                    let (k, v) = item?;
                    if !k.starts_with(&prefix) {
                        break;
                    }
                    out.push(parse_record(parse_record_key(&k[1..])?, &v)?);
                }
                Ok(out)
            })
            .await
    }

    async fn count_reminders(&self) -> Result<u64, StoreError> {
        // Records only, not index entries; a read error fails the count
        // instead of being counted.
        self.db
            .read(|db| {
                let mut n = 0u64;
                for item in db.reminders.scan_prefix([RECORD]) {
                    item?;
                    n += 1;
                }
                Ok(n)
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sled_reminders_keep_the_store_contract() -> Result<(), StoreError> {
        let dir = tempfile::tempdir().map_err(|e| StoreError::Io(e.to_string()))?;
        let store = SledStore::open(dir.path())?;
        troupe_storage::conformance::reminders(&SledReminders::open(&store)?).await
    }
}
