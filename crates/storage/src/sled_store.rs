//! The embedded store: one sled tree, keys encoded so that one actor's keys
//! are contiguous and no type/id/key value can collide with another.

use std::path::Path;

use async_trait::async_trait;
use bytes::Bytes;

use crate::{ActorWrite, StateStore, StoreError, StoredState};

/// State in a sled database under the daemon's data directory.
#[derive(Debug, Clone)]
pub struct SledStore {
    db: sled::Db,
    state: sled::Tree,
    path: String,
}

impl SledStore {
    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let path = dir.display().to_string();
        let db = sled::open(dir).map_err(|source| StoreError::Open {
            path: path.clone(),
            source,
        })?;
        let state = db.open_tree("state").map_err(|source| StoreError::Open {
            path: path.clone(),
            source,
        })?;
        Ok(Self { db, state, path })
    }

    /// The database, for other trees that live beside the state (reminders).
    pub(crate) fn db(&self) -> &sled::Db {
        &self.db
    }
}

/// `len(type) u16 | type | len(id) u16 | id`: a prefix shared by all keys of
/// one actor. Length prefixes (not separators) keep any UTF-8 name safe.
pub(crate) fn actor_prefix(actor_type: &str, actor_id: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + actor_type.len() + actor_id.len() + 16);
    push_segment(&mut out, actor_type);
    push_segment(&mut out, actor_id);
    out
}

fn push_segment(out: &mut Vec<u8>, s: &str) {
    // Names are validated to at most 256 bytes by the runtime; saturate to be
    // safe rather than wrap if a caller ever bypasses that.
    let len = u16::try_from(s.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

pub(crate) fn type_prefix(actor_type: &str) -> Vec<u8> {
    let mut out = Vec::new();
    push_segment(&mut out, actor_type);
    out
}

/// Splits `len | id | rest` after a type prefix into the id.
pub(crate) fn read_segment(buf: &[u8]) -> Option<(&str, &[u8])> {
    let len = u16::from_be_bytes([*buf.first()?, *buf.get(1)?]) as usize;
    let s = buf.get(2..2 + len)?;
    Some((std::str::from_utf8(s).ok()?, &buf[2 + len..]))
}

fn io(e: sled::Error) -> StoreError {
    StoreError::Io(e.to_string())
}

#[async_trait]
impl StateStore for SledStore {
    fn describe(&self) -> String {
        format!("sled:{}", self.path)
    }

    async fn load(&self, actor_type: &str, actor_id: &str) -> Result<StoredState, StoreError> {
        let prefix = actor_prefix(actor_type, actor_id);
        let mut out = Vec::new();
        // Reads come from sled's page cache; they are short enough to run inline.
        for item in self.state.scan_prefix(&prefix) {
            let (k, v) = item.map_err(io)?;
            let key = std::str::from_utf8(&k[prefix.len()..]).map_err(|_| {
                StoreError::Corrupt(format!("state key of {actor_type}/{actor_id} is not UTF-8"))
            })?;
            out.push((key.to_owned(), Bytes::copy_from_slice(&v)));
        }
        Ok(out)
    }

    async fn write_batch(&self, batch: &[ActorWrite]) -> Result<(), StoreError> {
        let mut sled_batch = sled::Batch::default();
        for write in batch {
            let prefix = actor_prefix(&write.actor_type, &write.actor_id);
            for (key, value) in &write.changes {
                let mut full = prefix.clone();
                full.extend_from_slice(key.as_bytes());
                match value {
                    Some(v) => sled_batch.insert(full, v.as_ref()),
                    None => sled_batch.remove(full),
                }
            }
        }
        let tree = self.state.clone();
        let db = self.db.clone();
        // apply_batch plus the fsync behind flush() block; keep them off the
        // async workers.
        tokio::task::spawn_blocking(move || {
            tree.apply_batch(sled_batch).map_err(io)?;
            db.flush().map_err(io)?;
            Ok(())
        })
        .await
        .map_err(|e| StoreError::Io(format!("flush task failed: {e}")))?
    }

    async fn list_actors(
        &self,
        actor_type: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let prefix = type_prefix(actor_type);
        let start = match after {
            // The smallest key past every key of actor `after`.
            Some(id) => {
                let mut k = actor_prefix(actor_type, id);
                k.push(0xff);
                k
            }
            None => prefix.clone(),
        };
        let mut ids: Vec<String> = Vec::new();
        for item in self.state.range(start..) {
            let (k, _) = item.map_err(io)?;
            if !k.starts_with(&prefix) {
                break;
            }
            let Some((id, _)) = read_segment(&k[prefix.len()..]) else {
                return Err(StoreError::Corrupt("malformed actor key".into()));
            };
            if ids.last().map(String::as_str) != Some(id) {
                if ids.len() == limit {
                    break;
                }
                ids.push(id.to_owned());
            }
        }
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::write;

    /// sled releases its directory lock shortly after the last handle is
    /// dropped (a background thread finishes first); retry briefly.
    async fn reopen(path: &Path) -> Result<SledStore, StoreError> {
        let mut tries = 0;
        loop {
            match SledStore::open(path) {
                Err(StoreError::Open { .. }) if tries < 100 => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                other => return other,
            }
        }
    }

    #[tokio::test]
    async fn batches_survive_reopen_and_actors_do_not_bleed_into_each_other(
    ) -> Result<(), StoreError> {
        let dir = tempfile::tempdir().map_err(|e| StoreError::Io(e.to_string()))?;
        {
            let store = SledStore::open(dir.path())?;
            store
                .write_batch(&[
                    write("counter", "a", &[("n", Some("1")), ("gone", Some("x"))]),
                    write("counter", "ab", &[("n", Some("2"))]),
                    write("counterx", "a", &[("n", Some("3"))]),
                ])
                .await?;
            store
                .write_batch(&[write("counter", "a", &[("gone", None)])])
                .await?;
        }
        let store = reopen(dir.path()).await?;
        let a = store.load("counter", "a").await?;
        assert_eq!(a, vec![("n".to_string(), Bytes::from_static(b"1"))]);
        assert_eq!(
            store.list_actors("counter", None, 10).await?,
            vec!["a", "ab"]
        );
        assert_eq!(
            store.list_actors("counter", Some("a"), 10).await?,
            vec!["ab"]
        );
        assert_eq!(store.list_actors("counter", None, 1).await?, vec!["a"]);
        Ok(())
    }
}
