//! Call records in the state tree, under their own first bytes: `RECORD |
//! actor | key -> recorded_ms u64 | data`, and an age index `AGE |
//! recorded_ms | actor | key -> ()` that expiry walks oldest first. State
//! keys start with 0 or 1 (see `inbox`), so neither range meets state, and
//! one atomic write carries an actor's state and records together.

use bytes::Bytes;
use sled::IVec;
use troupe_storage::{CallRecord, StoreError};

use crate::actor_write::ActorOps;
use crate::db::{Failure, Handles};
use crate::keys::{actor_prefix, read_segment};

const RECORD: u8 = 0xfc;
const AGE: u8 = 0xfb;

fn record_key(actor: &[u8], key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + actor.len() + key.len());
    out.push(RECORD);
    out.extend_from_slice(actor);
    out.extend_from_slice(key.as_bytes());
    out
}

fn age_key(at: u64, actor: &[u8], key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + actor.len() + key.len());
    out.push(AGE);
    out.extend_from_slice(&at.to_be_bytes());
    out.extend_from_slice(actor);
    out.extend_from_slice(key.as_bytes());
    out
}

/// One record as the keys and value it is written under.
pub(crate) struct Staged {
    key: Vec<u8>,
    age: Vec<u8>,
    value: Vec<u8>,
}

/// One actor's records as sled writes; the bytes they take are added to
/// `bytes`.
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
                age: age_key(r.recorded_unix_ms, &actor, &r.key),
                value,
            };
            let size = staged.key.len() + staged.age.len() + staged.value.len();
            *bytes = bytes.saturating_add(size as u64);
            staged
        })
        .collect()
}

/// Adds the records not stored yet to an actor's operations (a key
/// recorded already keeps its first answer). Runs with the store's writes
/// serialised.
pub(crate) fn stage(
    db: &Handles,
    write: &mut ActorOps,
    staged: Vec<Staged>,
) -> Result<(), Failure> {
    for s in staged {
        if db.state.contains_key(&s.key)? {
            continue;
        }
        write.insert(s.key, s.value);
        write.insert(s.age, IVec::default());
    }
    Ok(())
}

fn corrupt(what: &str) -> Failure {
    StoreError::Corrupt(format!("malformed {what} in the sled store")).into()
}

fn decode(key: &str, value: &[u8]) -> Result<CallRecord, Failure> {
    let at = value
        .get(..8)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map(u64::from_be_bytes)
        .ok_or_else(|| corrupt("call record"))?;
    Ok(CallRecord {
        key: key.to_owned(),
        recorded_unix_ms: at,
        data: Bytes::copy_from_slice(&value[8..]),
    })
}

/// Reads all the actor's records (they are keyed by call key, not time)
/// and keeps the `limit` most recent.
pub(crate) fn load(
    db: &Handles,
    actor_type: &str,
    actor_id: &str,
    since_unix_ms: u64,
    limit: usize,
) -> Result<Vec<CallRecord>, Failure> {
    let prefix = record_key(&actor_prefix(actor_type, actor_id), "");
    let mut out = Vec::new();
    for item in db.state.scan_prefix(&prefix) {
        let (k, v) = item?;
        let key = k
            .get(prefix.len()..)
            .and_then(|s| std::str::from_utf8(s).ok())
            .ok_or_else(|| corrupt("call-record key"))?;
        let record = decode(key, &v)?;
        if record.recorded_unix_ms >= since_unix_ms {
            out.push(record);
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

/// Removes up to `limit` records older than `before_unix_ms`, oldest first,
/// with their age entries, in one batch.
pub(crate) fn expire(db: &Handles, before_unix_ms: u64, limit: usize) -> Result<u64, Failure> {
    let mut end = vec![AGE];
    end.extend_from_slice(&before_unix_ms.to_be_bytes());
    let mut batch = sled::Batch::default();
    let mut removed = 0u64;
    for item in db.state.range(vec![AGE]..end).take(limit) {
        let (age, _) = item?;
        let rest = age.get(9..).ok_or_else(|| corrupt("call-record age key"))?;
        // `rest` is `actor | key`: the record's key without its tag.
        let (_, after_type) = read_segment(rest).ok_or_else(|| corrupt("call-record age key"))?;
        read_segment(after_type).ok_or_else(|| corrupt("call-record age key"))?;
        let mut record = vec![RECORD];
        record.extend_from_slice(rest);
        batch.remove(record);
        batch.remove(age.to_vec());
        removed += 1;
    }
    if removed > 0 {
        db.state.apply_batch(batch)?;
    }
    Ok(removed)
}
