//! Every actor the store holds anything of, for a copy of the whole store.
//!
//! Four key spaces of the state tree begin with an actor's prefix: state
//! (untagged: its keys start with the type's length, 0 or 1), inbox
//! entries, dead letters and call records (each behind its tag byte). Each
//! is walked by seeking past one actor at a time, so a page costs a seek
//! per actor, not a scan of its keys, and the spaces are merged in the
//! order of the actors' prefixes, which is the order pages continue in.

use std::collections::BTreeSet;

use troupe_storage::StoreError;

use crate::db::{Failure, Handles};
use crate::keys::{actor_prefix, read_segment};

/// The first byte of each key space: `None` for state.
const SPACES: [Option<u8>; 4] = [
    None,
    Some(crate::inbox::INBOX),
    Some(crate::inbox::DEAD),
    Some(crate::records::RECORD),
];

/// What follows an actor's prefix in every space (a state key's length, a
/// big-endian seq, a UTF-8 record key) sorts before this.
const PAST_ACTOR: [u8; 9] = [0xff; 9];

pub(crate) fn stored_actors(
    db: &Handles,
    after: Option<(&str, &str)>,
    limit: usize,
) -> Result<Vec<(String, String)>, Failure> {
    let after = after.map(|(ty, id)| actor_prefix(ty, id));
    let mut prefixes = BTreeSet::new();
    for space in SPACES {
        prefixes.extend(in_space(db, space, after.as_deref(), limit)?);
    }
    prefixes
        .into_iter()
        .take(limit)
        .map(|prefix| {
            let (ty, rest) = read_segment(&prefix).ok_or_else(corrupt)?;
            let (id, _) = read_segment(rest).ok_or_else(corrupt)?;
            Ok((ty.to_owned(), id.to_owned()))
        })
        .collect()
}

/// The prefixes of the first `limit` actors of one space after `after`.
fn in_space(
    db: &Handles,
    space: Option<u8>,
    after: Option<&[u8]>,
    limit: usize,
) -> Result<Vec<Vec<u8>>, Failure> {
    let head: Vec<u8> = space.into_iter().collect();
    let past = |prefix: &[u8]| [head.as_slice(), prefix, &PAST_ACTOR].concat();
    let mut start = match after {
        Some(prefix) => past(prefix),
        None => head.clone(),
    };
    let mut out = Vec::new();
    while out.len() < limit {
        let Some(item) = db.state.range(start.clone()..).next() else {
            break;
        };
        let (key, _) = item?;
        let in_this_space = match space {
            Some(tag) => key.first() == Some(&tag),
            // The tagged spaces start at the lowest tag.
            None => key.first().is_some_and(|b| *b < crate::records::AGE),
        };
        if !in_this_space {
            break;
        }
        let rest = key.get(head.len()..).ok_or_else(corrupt)?;
        let (ty, rest) = read_segment(rest).ok_or_else(corrupt)?;
        let (id, _) = read_segment(rest).ok_or_else(corrupt)?;
        let prefix = actor_prefix(ty, id);
        start = past(&prefix);
        out.push(prefix);
    }
    Ok(out)
}

fn corrupt() -> Failure {
    Failure::Store(StoreError::Corrupt("malformed actor key".into()))
}

#[cfg(test)]
mod tests {
    use troupe_storage::StoreError;

    use crate::{SledReminders, SledStore};

    #[tokio::test]
    async fn sled_stores_copy_whole() -> Result<(), StoreError> {
        let dir = tempfile::tempdir().map_err(|e| StoreError::Io(e.to_string()))?;
        let store = SledStore::open(dir.path())?;
        let reminders = SledReminders::open(&store)?;
        troupe_storage::conformance::copy(troupe_storage::Stores {
            state: &store,
            reminders: &reminders,
        })
        .await
    }
}
