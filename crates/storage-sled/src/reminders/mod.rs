//! Reminders in the daemon's sled database, beside the state.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use troupe_storage::{
    ReminderApplied, ReminderKey, ReminderRecord, ReminderStore, ReminderWrite, StoreError,
};

use parking_lot::Mutex;

use crate::db::SledDb;
use crate::keys::{actor_prefix, read_segment, type_prefix};
use crate::SledStore;

mod sweep;
mod write;

use sweep::Sweep;
use write::{index_parts, indexes, Prepared};

/// Reminders in the daemon's sled database, beside the state.
///
/// One tree (`reminders`) holds both the records and the due-time index,
/// under different key prefixes:
/// `R | actor prefix | name` → `due (u64 BE) | data`;
/// `D | due (u64 BE) | actor prefix | name` → ().
/// A record with an empty value is a deleted reminder, until [`sweep`]
/// removes it; `S` → () says that a sweep is under way.
///
/// An index entry whose due time is not its record's is an orphan, left by
/// a batch a crash cut short (see [`write`]) or seen by a load while a
/// batch changes that reminder: loads skip it, and the next batch removes it
/// if it still is one.
///
/// The database is the state store's, re-opened after an I/O error by
/// whichever store meets it first (see [`crate::db`]).
#[derive(Debug, Clone)]
pub struct SledReminders {
    db: SledDb,
    /// Orphan index entries loads met, for the next batch to remove.
    orphans: Arc<Mutex<Vec<Vec<u8>>>>,
    /// Deleted reminders' records still to remove.
    sweep: Arc<Sweep>,
}

/// Orphans kept for removal at most; more wait for a later load to meet
/// them again (they only cost a skipped key).
const MAX_ORPHANS: usize = 4096;

const RECORD: u8 = b'R';
const BY_DUE: u8 = b'D';
const MARK: u8 = b'S';

impl SledReminders {
    /// The reminders in `store`'s database (its `reminders` tree is opened
    /// with the database).
    pub fn open(store: &SledStore) -> Result<Self, StoreError> {
        Ok(Self {
            db: store.db().clone(),
            orphans: Arc::default(),
            sweep: Arc::default(),
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
        let writes: Vec<Prepared> = writes.iter().map(Prepared::new).collect();
        let bytes = writes
            .iter()
            .fold(0u64, |sum, w| sum.saturating_add(w.bytes()));
        let orphans = std::mem::take(&mut *self.orphans.lock());
        let sweep = self.sweep.clone();
        // Reads, the batch and the fsync block: `write` keeps them off the
        // async workers.
        let applied = self
            .db
            .write(bytes, move |db| write::apply(db, &writes, &orphans, &sweep))
            .await;
        if applied.is_err() {
            self.sweep.failed();
        }
        applied
    }

    async fn get_reminder(&self, key: &ReminderKey) -> Result<Option<ReminderRecord>, StoreError> {
        let key = key.clone();
        self.db
            .read(move |db| match db.reminders.get(record_key(&key))? {
                Some(v) if !v.is_empty() => Ok(Some(parse_record(key, &v)?)),
                _ => Ok(None),
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
        // A load reads up to `limit` records: off the async workers.
        let (out, orphans) = self
            .db
            .scan(move |db| {
                let mut out = Vec::new();
                let mut orphans = Vec::new();
                for item in db.reminders.range(start..end) {
                    if out.len() == limit {
                        break;
                    }
                    let (k, _) = item?;
                    let Some((due, bare)) = index_parts(&k) else {
                        return Err(StoreError::Corrupt("short reminder index key".into()).into());
                    };
                    match db.reminders.get(tagged(RECORD, &[bare]))? {
                        Some(v) if indexes(Some(&v), due) => {
                            out.push(parse_record(parse_record_key(bare)?, &v)?);
                        }
                        // An orphan (see the type's doc): never fired.
                        _ => orphans.push(k.to_vec()),
                    }
                }
                Ok((out, orphans))
            })
            .await?;
        if !orphans.is_empty() {
            tracing::debug!(
                orphans = orphans.len(),
                "reminder index entries without their record"
            );
            let mut kept = self.orphans.lock();
            let room = MAX_ORPHANS.saturating_sub(kept.len());
            kept.extend(orphans.into_iter().take(room));
        }
        Ok(out)
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
                    if v.is_empty() {
                        continue; // deleted
                    }
                    out.push(parse_record(parse_record_key(&k[1..])?, &v)?);
                }
                Ok(out)
            })
            .await
    }

    fn wants_idle_batches(&self) -> bool {
        self.sweep.pending()
    }

    async fn count_reminders(&self) -> Result<u64, StoreError> {
        // Records only, not index entries; a read error fails the count
        // instead of being counted.
        self.db
            .read(|db| {
                let mut n = 0u64;
                for item in db.reminders.scan_prefix([RECORD]) {
                    let (_, v) = item?;
                    n += u64::from(!v.is_empty());
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

    fn key(name: &str) -> ReminderKey {
        ReminderKey {
            actor_type: "t".into(),
            actor_id: "a".into(),
            name: name.into(),
        }
    }

    fn put(name: &str, due: u64) -> ReminderWrite {
        ReminderWrite {
            op: troupe_storage::ReminderOp::Put(ReminderRecord {
                key: key(name),
                due_unix_ms: due,
                data: Bytes::from_static(b"d"),
            }),
            epoch: None,
        }
    }

    /// The due times of the index entries in the tree, in order.
    async fn index(reminders: &SledReminders) -> Result<Vec<u64>, StoreError> {
        reminders
            .db
            .read(|db| {
                let mut dues = Vec::new();
                for item in db.reminders.scan_prefix([BY_DUE]) {
                    let (k, _) = item?;
                    if let Some((due, _)) = index_parts(&k) {
                        dues.push(u64::from_be_bytes(due.try_into().unwrap_or_default()));
                    }
                }
                Ok(dues)
            })
            .await
    }

    /// A batch is single-key operations (see `write`): a crash may stop one
    /// after any of them. Each such state fires every reminder as it was or
    /// as written, and the next batch removes what the cut left.
    #[tokio::test]
    async fn a_batch_cut_short_fires_each_reminder_as_it_was_or_as_written(
    ) -> Result<(), StoreError> {
        let dir = tempfile::tempdir().map_err(|e| StoreError::Io(e.to_string()))?;
        let store = SledStore::open(dir.path())?;
        let reminders = SledReminders::open(&store)?;
        reminders
            .apply_reminders(&[
                put("moving", 1_000),
                put("deleted", 1_100),
                put("moved", 1_200),
            ])
            .await?;
        // Cut after the first operation of moving "moving" to 500 (its new
        // index entry), after the first of deleting "deleted" (its record),
        // and after the second of moving "moved" from 300 to 1200 (its old
        // index entry is still there).
        let (moving, deleted, moved) = (
            due_key(500, &key("moving")),
            record_key(&key("deleted")),
            due_key(300, &key("moved")),
        );
        reminders
            .db
            .write(0, move |db| {
                db.reminders.insert(moving, &[] as &[u8])?;
                db.reminders.remove(deleted)?;
                db.reminders.insert(moved, &[] as &[u8])?;
                Ok(())
            })
            .await?;
        assert_eq!(
            index(&reminders).await?,
            vec![300, 500, 1_000, 1_100, 1_200]
        );

        let due = reminders.due_reminders(None, 2_000, 10).await?;
        let due: Vec<_> = due
            .iter()
            .map(|r| (r.key.name.as_str(), r.due_unix_ms))
            .collect();
        assert_eq!(due, vec![("moving", 1_000), ("moved", 1_200)]);
        assert!(reminders.get_reminder(&key("deleted")).await?.is_none());
        reminders.apply_reminders(&[]).await?;
        assert_eq!(index(&reminders).await?, vec![1_000, 1_200]);
        Ok(())
    }
}
