//! Inboxes and dead letters in the state tree, under their own first byte
//! (`INBOX`, `DEAD`): state keys start with a type length of at most 256
//! (first byte 0 or 1), so neither range meets state, and one atomic write
//! carries an actor's state and inbox together.

use bytes::Bytes;
use troupe_storage::{DeadLetter, DeadLetterKey, InboxEntry, InboxOp, StoreError};

use crate::actor_write::ActorOps;
use crate::db::{Failure, Handles};
use crate::keys::{actor_prefix, read_segment};
use crate::purge::Removal;

pub(crate) const INBOX: u8 = 0xfe;
pub(crate) const DEAD: u8 = 0xfd;

fn prefixed(tag: u8, actor_type: &str, actor_id: &str) -> Vec<u8> {
    let mut out = vec![tag];
    out.extend_from_slice(&actor_prefix(actor_type, actor_id));
    out
}

fn seq_key(tag: u8, actor_type: &str, actor_id: &str, seq: u64) -> Vec<u8> {
    let mut out = prefixed(tag, actor_type, actor_id);
    out.extend_from_slice(&seq.to_be_bytes());
    out
}

/// Adds one actor's inbox ops to its write; returns the bytes they write.
pub(crate) fn stage(
    write: &mut ActorOps,
    actor_type: &str,
    actor_id: &str,
    ops: &[InboxOp],
) -> u64 {
    let mut bytes = 0u64;
    for op in ops {
        match op {
            InboxOp::Append(entry) => {
                let key = seq_key(INBOX, actor_type, actor_id, entry.seq);
                bytes = bytes.saturating_add((key.len() + entry.data.len()) as u64);
                write.insert(key, entry.data.as_ref());
            }
            InboxOp::Remove { seq } => write.remove(seq_key(INBOX, actor_type, actor_id, *seq)),
            InboxOp::DeadLetter(letter) => {
                write.remove(seq_key(INBOX, actor_type, actor_id, letter.key.seq));
                let value = encode_dead(letter);
                bytes = bytes.saturating_add(value.len() as u64);
                write.insert(seq_key(DEAD, actor_type, actor_id, letter.key.seq), value);
            }
        }
    }
    bytes
}

/// `attempts u32 | failed_unix_ms u64 | len(error) u32 | error | data`.
fn encode_dead(letter: &DeadLetter) -> Vec<u8> {
    let error = letter.error.as_bytes();
    let mut out = Vec::with_capacity(16 + error.len() + letter.data.len());
    out.extend_from_slice(&letter.attempts.to_be_bytes());
    out.extend_from_slice(&letter.failed_unix_ms.to_be_bytes());
    out.extend_from_slice(&u32::try_from(error.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(error);
    out.extend_from_slice(&letter.data);
    out
}

fn corrupt(what: &str) -> Failure {
    StoreError::Corrupt(format!("malformed {what} in the sled store")).into()
}

/// Splits `tag | len | type | len | id | seq` into its parts.
fn parse_key(key: &[u8]) -> Option<(String, String, u64)> {
    let (ty, rest) = read_segment(key.get(1..)?)?;
    let (id, rest) = read_segment(rest)?;
    let seq = u64::from_be_bytes(rest.try_into().ok()?);
    Some((ty.to_owned(), id.to_owned(), seq))
}

fn decode_dead(key: &[u8], value: &[u8]) -> Result<DeadLetter, Failure> {
    let (actor_type, actor_id, seq) = parse_key(key).ok_or_else(|| corrupt("dead-letter key"))?;
    let field =
        |range: std::ops::Range<usize>| value.get(range).ok_or_else(|| corrupt("dead letter"));
    let attempts = u32::from_be_bytes(
        field(0..4)?
            .try_into()
            .map_err(|_| corrupt("dead letter"))?,
    );
    let failed_unix_ms = u64::from_be_bytes(
        field(4..12)?
            .try_into()
            .map_err(|_| corrupt("dead letter"))?,
    );
    let len = u32::from_be_bytes(
        field(12..16)?
            .try_into()
            .map_err(|_| corrupt("dead letter"))?,
    );
    let end = 16usize.saturating_add(len as usize);
    let error = String::from_utf8_lossy(field(16..end)?).into_owned();
    Ok(DeadLetter {
        key: DeadLetterKey {
            actor_type,
            actor_id,
            seq,
        },
        data: Bytes::copy_from_slice(field(end..value.len())?),
        error,
        attempts,
        failed_unix_ms,
    })
}

pub(crate) fn load(
    db: &Handles,
    actor_type: &str,
    actor_id: &str,
) -> Result<Vec<InboxEntry>, Failure> {
    let prefix = prefixed(INBOX, actor_type, actor_id);
    let mut out = Vec::new();
    for item in db.state.scan_prefix(&prefix) {
        let (k, v) = item?;
        let seq = k
            .get(prefix.len()..)
            .and_then(|s| <[u8; 8]>::try_from(s).ok())
            .map(u64::from_be_bytes)
            .ok_or_else(|| corrupt("inbox key"))?;
        out.push(InboxEntry {
            seq,
            data: Bytes::copy_from_slice(&v),
        });
    }
    Ok(out)
}

pub(crate) fn actors(
    db: &Handles,
    after: Option<(&str, &str)>,
    limit: usize,
) -> Result<Vec<(String, String)>, Failure> {
    let mut start = match after {
        // Past every entry of actor `after`.
        Some((ty, id)) => {
            let mut k = prefixed(INBOX, ty, id);
            k.extend_from_slice(&[0xff; 9]);
            k
        }
        None => vec![INBOX],
    };
    let mut out = Vec::new();
    while out.len() < limit {
        let Some(item) = db.state.range(start.clone()..).next() else {
            break;
        };
        let (k, _) = item?;
        if k.first() != Some(&INBOX) {
            break;
        }
        let (ty, id, _) = parse_key(&k).ok_or_else(|| corrupt("inbox key"))?;
        // Skip the rest of this actor's entries in one seek.
        start = prefixed(INBOX, &ty, &id);
        start.extend_from_slice(&[0xff; 9]);
        out.push((ty, id));
    }
    Ok(out)
}

pub(crate) fn list_dead(
    db: &Handles,
    actor_type: Option<&str>,
    after: Option<&DeadLetterKey>,
    limit: usize,
) -> Result<Vec<DeadLetter>, Failure> {
    let prefix = match actor_type {
        Some(ty) => {
            let mut p = vec![DEAD];
            p.extend_from_slice(&crate::keys::type_prefix(ty));
            p
        }
        None => vec![DEAD],
    };
    let start = match after {
        Some(key) => {
            let mut k = seq_key(DEAD, &key.actor_type, &key.actor_id, key.seq);
            k.push(0);
            k
        }
        None => prefix.clone(),
    };
    let mut out = Vec::new();
    for item in db.state.range(start..) {
        if out.len() >= limit {
            break;
        }
        let (k, v) = item?;
        if !k.starts_with(&prefix) {
            break;
        }
        out.push(decode_dead(&k, &v)?);
    }
    Ok(out)
}

pub(crate) fn get_dead(db: &Handles, key: &DeadLetterKey) -> Result<Option<DeadLetter>, Failure> {
    let k = seq_key(DEAD, &key.actor_type, &key.actor_id, key.seq);
    match db.state.get(&k)? {
        Some(v) => Ok(Some(decode_dead(&k, &v)?)),
        None => Ok(None),
    }
}

/// Adds the removal of the actor's inbox entries and dead letters to
/// `removal`; returns how many of each.
pub(crate) fn purge(
    db: &Handles,
    actor_type: &str,
    actor_id: &str,
    removal: &mut Removal,
) -> Result<(u64, u64), Failure> {
    let mut counts = [0u64; 2];
    for (count, tag) in counts.iter_mut().zip([INBOX, DEAD]) {
        for item in db.state.scan_prefix(prefixed(tag, actor_type, actor_id)) {
            let (key, _) = item?;
            removal.remove(key);
            *count += 1;
        }
    }
    let [entries, dead] = counts;
    Ok((entries, dead))
}

pub(crate) fn dead_key(key: &DeadLetterKey) -> Vec<u8> {
    seq_key(DEAD, &key.actor_type, &key.actor_id, key.seq)
}
