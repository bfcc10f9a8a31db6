//! Actor state in one sled tree (`state`), keyed by [`crate::keys`] so one
//! actor's keys are contiguous.

use std::path::Path;

use async_trait::async_trait;
use bytes::Bytes;
use troupe_storage::{
    ActorWrite, CallRecord, DeadLetter, DeadLetterKey, Epoch, FencedActor, InboxEntry, PurgedActor,
    RecordedKey, StateStore, StoreError, StoredState,
};

use crate::actor_write::ActorOps;
use crate::db::SledDb;
use crate::keys::{actor_prefix, read_segment, type_prefix};

/// State in a sled database under the daemon's data directory.
///
/// The database is re-opened after an I/O error (see [`crate::db`]), so a
/// full disk that gets space again needs no restart.
#[derive(Debug, Clone)]
pub struct SledStore {
    pub(crate) db: SledDb,
}

/// sled's page cache bound when none is given: what the daemon's
/// `--sled-cache-bytes` defaults to. sled's own default (1 GiB) let a
/// daemon holding a million reminders grow past 1.6 GB; this keeps it within
/// 600 MB (`cargo bench -p troupe-runtime --bench reminders`) while the
/// due-time index and the records being fired stay cached.
pub const DEFAULT_CACHE_BYTES: u64 = 256 * 1024 * 1024;

impl SledStore {
    /// Opens (or creates) the store in `dir`, with the default page cache
    /// ([`DEFAULT_CACHE_BYTES`]).
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        Self::open_with_cache(dir, DEFAULT_CACHE_BYTES)
    }

    /// Opens (or creates) the store in `dir`, sled's page cache bounded to
    /// about `cache_bytes` (sled counts its nodes' sizes, not allocator
    /// overhead, so the process holds somewhat more).
    pub fn open_with_cache(dir: &Path, cache_bytes: u64) -> Result<Self, StoreError> {
        Ok(Self {
            db: SledDb::open(dir, cache_bytes)?,
        })
    }

    /// The data directory the database lives in.
    pub fn dir(&self) -> &Path {
        self.db.dir()
    }

    /// The database, shared with the reminders that live beside the state.
    pub(crate) fn db(&self) -> &SledDb {
        &self.db
    }
}

#[async_trait]
impl StateStore for SledStore {
    fn describe(&self) -> String {
        format!("sled:{}", self.db.dir().display())
    }

    async fn size_on_disk(&self) -> Option<u64> {
        self.db.read(|db| Ok(db.db.size_on_disk()?)).await.ok()
    }

    async fn load(&self, actor_type: &str, actor_id: &str) -> Result<StoredState, StoreError> {
        let prefix = actor_prefix(actor_type, actor_id);
        let actor = format!("{actor_type}/{actor_id}");
        self.db
            .read(move |db| {
                let mut out = Vec::new();
                for item in db.state.scan_prefix(&prefix) {
                    let (k, v) = item?;
                    let key = std::str::from_utf8(&k[prefix.len()..]).map_err(|_| {
                        StoreError::Corrupt(format!("state key of {actor} is not UTF-8"))
                    })?;
                    out.push((key.to_owned(), Bytes::copy_from_slice(&v)));
                }
                Ok(out)
            })
            .await
    }

    async fn claim(
        &self,
        actor_type: &str,
        actor_id: &str,
        _epoch: Epoch,
    ) -> Result<StoredState, StoreError> {
        // No other daemon can hold this database: see the crate doc.
        self.load(actor_type, actor_id).await
    }

    async fn write_batch(&self, batch: &[ActorWrite]) -> Result<Vec<FencedActor>, StoreError> {
        let mut bytes = 0u64;
        let mut actors = Vec::with_capacity(batch.len());
        for write in batch {
            let mut ops = ActorOps::default();
            let prefix = actor_prefix(&write.actor_type, &write.actor_id);
            for (key, value) in &write.changes {
                let mut full = prefix.clone();
                full.extend_from_slice(key.as_bytes());
                let size = full
                    .len()
                    .saturating_add(value.as_ref().map_or(0, |v| v.len()));
                bytes = bytes.saturating_add(size as u64);
                match value {
                    Some(v) => ops.insert(full, v.as_ref()),
                    None => ops.remove(full),
                }
            }
            let inbox_bytes =
                crate::inbox::stage(&mut ops, &write.actor_type, &write.actor_id, &write.inbox);
            bytes = bytes.saturating_add(inbox_bytes);
            ops.records = crate::records::prepare(
                &write.actor_type,
                &write.actor_id,
                &write.records,
                &mut bytes,
            );
            actors.push(ops);
            // Encoding a flush of 60,000 actors takes 17-26 ms: yield now
            // and then, so that it does not hold the worker's other tasks.
            tokio::task::consume_budget().await;
        }
        self.db
            .write(bytes, move |db| {
                crate::actor_write::apply(db, actors)?;
                Ok(Vec::new())
            })
            .await
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
        self.db
            .read(move |db| {
                let mut ids: Vec<String> = Vec::new();
                for item in db.state.range(start..) {
                    let (k, _) = item?;
                    if !k.starts_with(&prefix) {
                        break;
                    }
                    let Some((id, _)) = read_segment(&k[prefix.len()..]) else {
                        return Err(StoreError::Corrupt("malformed actor key".into()).into());
                    };
                    if ids.last().map(String::as_str) != Some(id) {
                        if ids.len() == limit {
                            break;
                        }
                        ids.push(id.to_owned());
                    }
                }
                Ok(ids)
            })
            .await
    }

    async fn load_inbox(
        &self,
        actor_type: &str,
        actor_id: &str,
    ) -> Result<Vec<InboxEntry>, StoreError> {
        let (ty, id) = (actor_type.to_owned(), actor_id.to_owned());
        self.db
            .read(move |db| crate::inbox::load(db, &ty, &id))
            .await
    }

    async fn inbox_actors(
        &self,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let after = after.map(|(t, i)| (t.to_owned(), i.to_owned()));
        self.db
            .read(move |db| {
                let after = after.as_ref().map(|(t, i)| (t.as_str(), i.as_str()));
                crate::inbox::actors(db, after, limit)
            })
            .await
    }

    async fn stored_actors(
        &self,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let after = after.map(|(t, i)| (t.to_owned(), i.to_owned()));
        self.db
            .read(move |db| {
                let after = after.as_ref().map(|(t, i)| (t.as_str(), i.as_str()));
                crate::stored_actors::stored_actors(db, after, limit)
            })
            .await
    }

    async fn list_dead_letters(
        &self,
        actor_type: Option<&str>,
        after: Option<&DeadLetterKey>,
        limit: usize,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        let (ty, after) = (actor_type.map(str::to_owned), after.cloned());
        self.db
            .read(move |db| crate::inbox::list_dead(db, ty.as_deref(), after.as_ref(), limit))
            .await
    }

    async fn get_dead_letter(&self, key: &DeadLetterKey) -> Result<Option<DeadLetter>, StoreError> {
        let key = key.clone();
        self.db
            .read(move |db| crate::inbox::get_dead(db, &key))
            .await
    }

    async fn load_record_keys(
        &self,
        actor_type: &str,
        actor_id: &str,
        since_unix_ms: u64,
        limit: usize,
    ) -> Result<Vec<RecordedKey>, StoreError> {
        let (ty, id) = (actor_type.to_owned(), actor_id.to_owned());
        self.db
            .read(move |db| crate::records::load_keys(db, &ty, &id, since_unix_ms, limit))
            .await
    }

    async fn load_record(
        &self,
        actor_type: &str,
        actor_id: &str,
        key: &str,
    ) -> Result<Option<CallRecord>, StoreError> {
        let (ty, id, key) = (actor_type.to_owned(), actor_id.to_owned(), key.to_owned());
        self.db
            .read(move |db| crate::records::get(db, &ty, &id, &key))
            .await
    }

    async fn purge_actor(
        &self,
        actor_type: &str,
        actor_id: &str,
        _epoch: Option<Epoch>,
    ) -> Result<PurgedActor, StoreError> {
        // Not fenced, as no write here is: see the crate doc.
        crate::purge::purge(&self.db, actor_type, actor_id).await
    }

    async fn expire_records(&self, before_unix_ms: u64, limit: usize) -> Result<u64, StoreError> {
        self.db
            .write(0, move |db| {
                let _records = db.records.lock();
                crate::records::expire(db, before_unix_ms, limit)
            })
            .await
    }

    async fn remove_dead_letter(&self, key: &DeadLetterKey) -> Result<bool, StoreError> {
        let key = crate::inbox::dead_key(key);
        self.db
            .write(0, move |db| {
                let existed = db.state.remove(key)?.is_some();
                db.sync()?;
                Ok(existed)
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_storage::conformance::write;

    #[tokio::test]
    async fn sled_inboxes_keep_the_store_contract() -> Result<(), StoreError> {
        let dir = tempfile::tempdir().map_err(|e| StoreError::Io(e.to_string()))?;
        let store = SledStore::open(dir.path())?;
        troupe_storage::conformance::inbox(&store).await?;
        troupe_storage::conformance::records(&store).await?;
        // Inbox and dead-letter keys never show up as actors with state:
        // only `a` has a state key.
        assert_eq!(store.list_actors("i", None, 10).await?, vec!["a"]);
        assert!(store.list_actors("j", None, 10).await?.is_empty());
        Ok(())
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
        // The dropped store's lock lingers a moment; the open waits it out.
        let store = SledStore::open(dir.path())?;
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
