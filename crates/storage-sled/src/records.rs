//! Call records in the state tree, under their own first bytes: `RECORD |
//! actor | key -> recorded_ms u64 | data`, and an age index that expiry
//! walks oldest first. State keys start with 0 or 1 (see `inbox`), so
//! neither range meets state.
//!
//! The age index has one entry per flush and recorded millisecond, `AGE |
//! recorded_ms | id u64 -> (len u32 | actor | key)*`, listing that
//! millisecond's records, not one entry per record: an index key per record
//! made a keyed call's write two keys (a sled batch, under sled's write
//! lock) instead of one, and cost a sixth of a keyed call's daemon CPU
//! (45–52 µs against 37–41 without it, `ghz -c 64`). Databases written before keep
//! entries of the old form, `AGE | recorded_ms | actor | key -> ()`; expiry
//! reads both, told apart by the empty value.
//!
//! A flush writes its index entries before its records, so an interrupted
//! flush may leave an entry naming records that are not there (expiry
//! removes nothing for them) but no record that no entry names. Expiry and
//! the index-then-records part of a flush exclude each other
//! ([`Handles::records`]), so expiry never takes an entry whose records are
//! still to come. An actor's purge removes its records and their names in
//! the index under the same lock (`purge`), rewriting the entries that
//! name other actors' records too.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use troupe_storage::{CallRecord, RecordedKey, StoreError};

use crate::actor_write::ActorOps;
use crate::db::{Failure, Handles};
use crate::keys::{actor_prefix, read_segment};
use crate::purge::Removal;

pub(crate) const RECORD: u8 = 0xfc;
pub(crate) const AGE: u8 = 0xfb;

fn record_key(actor: &[u8], key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + actor.len() + key.len());
    out.push(RECORD);
    out.extend_from_slice(actor);
    out.extend_from_slice(key.as_bytes());
    out
}

/// One record as the key and value it is written under.
pub(crate) struct Staged {
    key: Vec<u8>,
    at: u64,
    value: Vec<u8>,
    /// No earlier record can exist ([`CallRecord::new_key`]).
    new_key: bool,
}

/// One actor's records as sled writes; the bytes they take (with their
/// share of the age index) are added to `bytes`.
pub(crate) fn prepare(
    actor_type: &str,
    actor_id: &str,
    records: &[CallRecord],
    bytes: &mut u64,
) -> Vec<Staged> {
    let actor = actor_prefix(actor_type, actor_id);
    records
        .iter()
        .map(|r| {
            let mut value = Vec::with_capacity(8 + r.data.len());
            value.extend_from_slice(&r.recorded_unix_ms.to_be_bytes());
            value.extend_from_slice(&r.data);
            let staged = Staged {
                key: record_key(&actor, &r.key),
                at: r.recorded_unix_ms,
                value,
                new_key: r.new_key,
            };
            // The key twice: once as the record's, once in an index entry.
            let size = 2 * staged.key.len() + staged.value.len() + 4;
            *bytes = bytes.saturating_add(size as u64);
            staged
        })
        .collect()
}

/// Moves each actor's records that are not stored yet among its operations
/// (a key recorded already keeps its first answer) and writes the age
/// index entries that name them. A record of a key its caller said was
/// new is not looked for: a tree descent saved per keyed call, and every
/// call an SDK sends first is such a call. Call with [`Handles::records`]
/// held and the store's flushes serialised, before the actors' writes.
pub(crate) fn index(db: &Handles, actors: &mut [ActorOps]) -> Result<(), Failure> {
    let mut by_ms: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    for actor in actors.iter_mut() {
        for staged in std::mem::take(&mut actor.records) {
            if !staged.new_key && db.state.contains_key(&staged.key)? {
                continue;
            }
            let named = &staged.key[1..];
            let listing = by_ms.entry(staged.at).or_default();
            // Record keys are bounded far below 4 GiB (type, id and key are
            // validated names); saturating keeps a bad one from wrapping.
            let len = u32::try_from(named.len()).unwrap_or(u32::MAX);
            listing.extend_from_slice(&len.to_be_bytes());
            listing.extend_from_slice(named);
            actor.insert(staged.key, staged.value);
        }
    }
    for (at, listing) in by_ms {
        let mut key = Vec::with_capacity(17);
        key.push(AGE);
        key.extend_from_slice(&at.to_be_bytes());
        key.extend_from_slice(&db.db.generate_id()?.to_be_bytes());
        db.state.insert(key, listing)?;
    }
    Ok(())
}

fn corrupt(what: &str) -> Failure {
    StoreError::Corrupt(format!("malformed {what} in the sled store")).into()
}

fn recorded_at(value: &[u8]) -> Result<u64, Failure> {
    value
        .get(..8)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map(u64::from_be_bytes)
        .ok_or_else(|| corrupt("call record"))
}

fn decode(key: &str, value: &[u8]) -> Result<CallRecord, Failure> {
    Ok(CallRecord {
        key: key.to_owned(),
        recorded_unix_ms: recorded_at(value)?,
        data: Bytes::copy_from_slice(&value[8..]),
        new_key: false,
    })
}

/// Reads the keys of all the actor's records (they are keyed by call key,
/// not time) and keeps the `limit` most recent.
pub(crate) fn load_keys(
    db: &Handles,
    actor_type: &str,
    actor_id: &str,
    since_unix_ms: u64,
    limit: usize,
) -> Result<Vec<RecordedKey>, Failure> {
    let prefix = record_key(&actor_prefix(actor_type, actor_id), "");
    let mut out = Vec::new();
    for item in db.state.scan_prefix(&prefix) {
        let (k, v) = item?;
        let key = k
            .get(prefix.len()..)
            .and_then(|s| std::str::from_utf8(s).ok())
            .ok_or_else(|| corrupt("call-record key"))?;
        let at = recorded_at(&v)?;
        if at >= since_unix_ms {
            out.push(RecordedKey {
                key: key.to_owned(),
                recorded_unix_ms: at,
            });
        }
    }
    out.sort_by_key(|r| std::cmp::Reverse(r.recorded_unix_ms));
    out.truncate(limit);
    Ok(out)
}

pub(crate) fn get(
    db: &Handles,
    actor_type: &str,
    actor_id: &str,
    key: &str,
) -> Result<Option<CallRecord>, Failure> {
    let k = record_key(&actor_prefix(actor_type, actor_id), key);
    match db.state.get(&k)? {
        Some(v) => Ok(Some(decode(key, &v)?)),
        None => Ok(None),
    }
}

/// The record key for `named` (`actor | key`), checked to start with an
/// actor's two segments.
fn tagged(named: &[u8]) -> Result<Vec<u8>, Failure> {
    let (_, after_type) = read_segment(named).ok_or_else(|| corrupt("call-record age entry"))?;
    read_segment(after_type).ok_or_else(|| corrupt("call-record age entry"))?;
    let mut record = Vec::with_capacity(1 + named.len());
    record.push(RECORD);
    record.extend_from_slice(named);
    Ok(record)
}

/// Splits the first `len | actor | key` off an index entry's listing.
fn next_named(listing: &[u8]) -> Result<(&[u8], &[u8]), Failure> {
    let len = listing
        .get(..4)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
        .map(u32::from_be_bytes)
        .ok_or_else(|| corrupt("call-record age entry"))?;
    let rest = &listing[4..];
    let len = usize::try_from(len)
        .ok()
        .filter(|len| *len <= rest.len())
        .ok_or_else(|| corrupt("call-record age entry"))?;
    Ok(rest.split_at(len))
}

/// Removes up to `limit` records older than `before_unix_ms`, oldest first,
/// in one batch, with the index entries that named them; an entry that
/// names more than the limit leaves is rewritten with the rest. Call with
/// [`Handles::records`] held.
pub(crate) fn expire(db: &Handles, before_unix_ms: u64, limit: usize) -> Result<u64, Failure> {
    let mut end = vec![AGE];
    end.extend_from_slice(&before_unix_ms.to_be_bytes());
    let mut batch = sled::Batch::default();
    let mut removed = 0usize;
    for item in db.state.range(vec![AGE]..end) {
        if removed >= limit {
            break;
        }
        let (entry, listing) = item?;
        if listing.is_empty() {
            // The old form: the entry's key names its one record.
            let named = entry
                .get(9..)
                .ok_or_else(|| corrupt("call-record age key"))?;
            batch.remove(tagged(named)?);
            batch.remove(entry);
            removed += 1;
            continue;
        }
        let mut left: &[u8] = &listing;
        while !left.is_empty() && removed < limit {
            let (named, rest) = next_named(left)?;
            batch.remove(tagged(named)?);
            removed += 1;
            left = rest;
        }
        if left.is_empty() {
            batch.remove(entry);
        } else {
            batch.insert(entry, left);
        }
    }
    if removed > 0 {
        db.state.apply_batch(batch)?;
    }
    Ok(removed as u64)
}

/// Adds the removal of every call record of the actor, and of their names
/// in the age index, to `removal`; returns how many records. Only the
/// index entries of the records' own milliseconds are read (an entry lists
/// the records recorded at its millisecond), not the whole index. An entry
/// left naming nothing goes; one that names other actors' records too is
/// rewritten with theirs (never empty: that is the old form's mark). Call
/// with [`Handles::records`] held, so expiry does not rewrite the same
/// entries meanwhile.
pub(crate) fn purge(
    db: &Handles,
    actor_type: &str,
    actor_id: &str,
    removal: &mut Removal,
) -> Result<u64, Failure> {
    // Length-prefixed segments: a name starting with these bytes is one of
    // this actor's, never one of an actor whose id merely extends its id.
    let actor = actor_prefix(actor_type, actor_id);
    let mut at = BTreeSet::new();
    let mut count = 0u64;
    for item in db.state.scan_prefix(record_key(&actor, "")) {
        let (key, value) = item?;
        at.insert(recorded_at(&value)?);
        removal.remove(key);
        count += 1;
    }
    for ms in at {
        let mut prefix = vec![AGE];
        prefix.extend_from_slice(&ms.to_be_bytes());
        for item in db.state.scan_prefix(prefix) {
            let (entry, listing) = item?;
            if listing.is_empty() {
                // The old form: the entry's key names its one record.
                let named = entry
                    .get(9..)
                    .ok_or_else(|| corrupt("call-record age key"))?;
                if named.starts_with(&actor) {
                    removal.remove(entry);
                }
                continue;
            }
            let mut kept = Vec::with_capacity(listing.len());
            let mut dropped = false;
            let mut left: &[u8] = &listing;
            while !left.is_empty() {
                let (named, rest) = next_named(left)?;
                if named.starts_with(&actor) {
                    dropped = true;
                } else {
                    kept.extend_from_slice(&left[..left.len() - rest.len()]);
                }
                left = rest;
            }
            if !dropped {
                continue;
            }
            if kept.is_empty() {
                removal.remove(entry);
            } else {
                removal.insert(entry, kept);
            }
        }
    }
    Ok(count)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::SledStore;
    use troupe_storage::conformance::write;
    use troupe_storage::StateStore;

    fn keyed(id: &str, records: &[(&str, u64)]) -> troupe_storage::ActorWrite {
        let mut w = write("rec", id, &[]);
        w.records = records
            .iter()
            .map(|(key, at)| CallRecord {
                key: (*key).into(),
                recorded_unix_ms: *at,
                data: Bytes::from_static(b"answer"),
                new_key: false,
            })
            .collect();
        w
    }

    /// The age index's entries, as (recorded ms, records named).
    pub(crate) async fn index_entries(store: &SledStore) -> Result<Vec<(u64, usize)>, StoreError> {
        store
            .db()
            .read(|db| {
                let mut out = Vec::new();
                for item in db.state.scan_prefix([AGE]) {
                    let (entry, listing) = item?;
                    let at = entry
                        .get(1..9)
                        .and_then(|s| <[u8; 8]>::try_from(s).ok())
                        .map(u64::from_be_bytes)
                        .ok_or_else(|| corrupt("test entry"))?;
                    let mut named = 0;
                    let mut left: &[u8] = &listing;
                    while !left.is_empty() {
                        left = next_named(left)?.1;
                        named += 1;
                    }
                    out.push((at, named.max(usize::from(listing.is_empty()))));
                }
                Ok(out)
            })
            .await
    }

    fn open() -> Result<(tempfile::TempDir, SledStore), StoreError> {
        let dir = tempfile::tempdir().map_err(|e| StoreError::Io(e.to_string()))?;
        let store = SledStore::open(dir.path())?;
        Ok((dir, store))
    }

    #[tokio::test]
    async fn a_flush_indexes_its_records_once_per_millisecond() -> Result<(), StoreError> {
        let (_dir, store) = open()?;
        store
            .write_batch(&[
                keyed("a", &[("k1", 1_000), ("k2", 1_000)]),
                keyed("b", &[("k1", 1_000), ("k3", 1_001)]),
                keyed("c", &[("k1", 1_001)]),
            ])
            .await?;
        assert_eq!(index_entries(&store).await?, [(1_000, 3), (1_001, 2)]);
        // A key stored already is neither written again nor indexed again.
        store
            .write_batch(&[keyed("a", &[("k1", 1_002), ("k4", 1_002)])])
            .await?;
        assert_eq!(
            index_entries(&store).await?,
            [(1_000, 3), (1_001, 2), (1_002, 1)]
        );
        assert_eq!(store.expire_records(1_002, 100).await?, 5);
        assert!(store.load_record_keys("rec", "b", 0, 10).await?.is_empty());
        assert_eq!(store.load_record_keys("rec", "a", 0, 10).await?.len(), 1);
        assert_eq!(index_entries(&store).await?, [(1_002, 1)]);
        Ok(())
    }

    #[tokio::test]
    async fn an_entry_cut_by_the_limit_keeps_naming_the_rest() -> Result<(), StoreError> {
        let (_dir, store) = open()?;
        let three = [("k1", 1_000), ("k2", 1_000), ("k3", 1_000)];
        store.write_batch(&[keyed("a", &three)]).await?;
        assert_eq!(store.expire_records(2_000, 2).await?, 2);
        assert_eq!(index_entries(&store).await?, [(1_000, 1)]);
        assert_eq!(store.load_record_keys("rec", "a", 0, 10).await?.len(), 1);
        assert_eq!(store.expire_records(2_000, 2).await?, 1);
        assert!(index_entries(&store).await?.is_empty());
        assert!(store.load_record_keys("rec", "a", 0, 10).await?.is_empty());
        assert_eq!(store.expire_records(2_000, 2).await?, 0);
        Ok(())
    }

    /// Databases written before the index had one entry per flush keep
    /// entries of the old form (one per record, an empty value); they
    /// expire as before, beside the new ones.
    #[tokio::test]
    async fn old_form_entries_still_expire() -> Result<(), StoreError> {
        let (_dir, store) = open()?;
        old_form(&store, &[("old1", 900), ("old2", 1_100)]).await?;
        store.write_batch(&[keyed("new", &[("k", 1_000)])]).await?;
        assert_eq!(store.load_record_keys("rec", "old1", 0, 10).await?.len(), 1);
        assert_eq!(store.expire_records(1_050, 100).await?, 2);
        assert!(store
            .load_record_keys("rec", "old1", 0, 10)
            .await?
            .is_empty());
        assert!(store
            .load_record_keys("rec", "new", 0, 10)
            .await?
            .is_empty());
        assert_eq!(store.load_record_keys("rec", "old2", 0, 10).await?.len(), 1);
        assert_eq!(store.expire_records(2_000, 100).await?, 1);
        assert!(index_entries(&store).await?.is_empty());
        Ok(())
    }

    /// Records `k` of the actors as databases written before the index had
    /// one entry per flush hold them: an index entry per record.
    async fn old_form(store: &SledStore, records: &[(&str, u64)]) -> Result<(), StoreError> {
        let records: Vec<(String, u64)> =
            records.iter().map(|(id, at)| ((*id).into(), *at)).collect();
        store
            .db()
            .read(move |db| {
                for (id, at) in records {
                    let named = record_key(&actor_prefix("rec", &id), "k")[1..].to_vec();
                    let mut value = at.to_be_bytes().to_vec();
                    value.extend_from_slice(b"answer");
                    db.state.insert(tagged(&named)?, value)?;
                    let mut entry = vec![AGE];
                    entry.extend_from_slice(&at.to_be_bytes());
                    entry.extend_from_slice(&named);
                    db.state.insert(entry, sled::IVec::default())?;
                }
                Ok(())
            })
            .await
    }

    /// A purge finds an old-form entry by its record's millisecond, and
    /// leaves the entry of an actor whose id extends the purged one's.
    #[tokio::test]
    async fn a_purge_removes_old_form_entries_of_its_actor_only() -> Result<(), StoreError> {
        let (_dir, store) = open()?;
        old_form(&store, &[("a", 900), ("ab", 900)]).await?;
        assert_eq!(index_entries(&store).await?, [(900, 1), (900, 1)]);
        assert_eq!(store.purge_actor("rec", "a", None).await?.call_records, 1);
        assert_eq!(index_entries(&store).await?, [(900, 1)]);
        assert!(store.load_record_keys("rec", "a", 0, 10).await?.is_empty());
        assert_eq!(store.expire_records(1_000, 100).await?, 1);
        assert!(store.load_record_keys("rec", "ab", 0, 10).await?.is_empty());
        Ok(())
    }
}
