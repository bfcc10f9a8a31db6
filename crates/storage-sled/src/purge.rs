//! An actor's purge: its state keys, inbox entries, dead letters and call
//! records (with their names in the age index) removed in one sled batch.
//!
//! Everything of an actor lives in the state tree (`inbox`, `records`), so
//! one batch is atomic across all of it: a crash or a reader sees the actor
//! whole or gone. The removal goes through [`SledDb::write`] like any other
//! write, so a backup's instants that hold writes hold it back and a full disk refuses it
//! before sled sees it. The batch takes sled's write lock for as long as it
//! applies; an actor of many keys holds readers up that long, which an
//! operator's occasional purge may.
//!
//! Not fenced, as no write of this store is (see the crate doc): the epoch
//! is accepted and not checked, and none is stored.

use sled::IVec;
use troupe_storage::{PurgedActor, StoreError};

use crate::db::{Failure, Handles, SledDb};
use crate::keys::actor_prefix;

/// What a purge removes or rewrites, and roughly how many bytes sled logs
/// for it (what the write gate checks for room).
#[derive(Default)]
pub(crate) struct Removal {
    batch: sled::Batch,
    bytes: u64,
}

impl Removal {
    pub(crate) fn remove(&mut self, key: IVec) {
        self.bytes = self.bytes.saturating_add(key.len() as u64);
        self.batch.remove(key);
    }

    /// Replaces a value, as a purge does with the age index entries that
    /// list other actors' records beside the purged ones.
    pub(crate) fn insert(&mut self, key: IVec, value: Vec<u8>) {
        let size = key.len().saturating_add(value.len());
        self.bytes = self.bytes.saturating_add(size as u64);
        self.batch.insert(key, value);
    }
}

/// Finds everything of the actor and what removing it takes.
fn plan(db: &Handles, actor_type: &str, actor_id: &str) -> Result<(PurgedActor, Removal), Failure> {
    let mut removal = Removal::default();
    let mut state_keys = 0u64;
    // The prefix ends in the id's length-prefixed segment, so an actor
    // whose id extends this one's ("a", "ab") shares none of its keys.
    for item in db.state.scan_prefix(actor_prefix(actor_type, actor_id)) {
        let (key, _) = item?;
        removal.remove(key);
        state_keys += 1;
    }
    let (inbox_entries, dead_letters) =
        crate::inbox::purge(db, actor_type, actor_id, &mut removal)?;
    let call_records = crate::records::purge(db, actor_type, actor_id, &mut removal)?;
    let purged = PurgedActor {
        state_keys,
        inbox_entries,
        dead_letters,
        call_records,
    };
    Ok((purged, removal))
}

/// Removes everything stored for the actor but its reminders, durably.
pub(crate) async fn purge(
    db: &SledDb,
    actor_type: &str,
    actor_id: &str,
) -> Result<PurgedActor, StoreError> {
    let (ty, id) = (actor_type.to_owned(), actor_id.to_owned());
    // The gate checks for room before the write runs, so the removal is
    // sized by a scan of its own first; the write plans again, as the
    // actor may have changed in between.
    let bytes = db
        .scan(move |db| plan(db, &ty, &id).map(|(_, removal)| removal.bytes))
        .await?;
    let (ty, id) = (actor_type.to_owned(), actor_id.to_owned());
    db.write(bytes, move |db| {
        // Expiry rewrites the same age index entries, and a flush writes
        // its index entries before their records: neither may run between
        // reading the entries and replacing them.
        let _records = db.records.lock();
        let (purged, removal) = plan(db, &ty, &id)?;
        if !purged.is_empty() {
            db.state.apply_batch(removal.batch)?;
            db.sync()?;
        }
        Ok(purged)
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use troupe_storage::conformance::write;
    use troupe_storage::{CallRecord, StateStore, StoreError};

    use crate::SledStore;

    fn open() -> Result<(tempfile::TempDir, SledStore), StoreError> {
        let dir = tempfile::tempdir().map_err(|e| StoreError::Io(e.to_string()))?;
        let store = SledStore::open(dir.path())?;
        Ok((dir, store))
    }

    #[tokio::test]
    async fn sled_purges_keep_the_store_contract() -> Result<(), StoreError> {
        let (_dir, store) = open()?;
        troupe_storage::conformance::purge(&store).await
    }

    /// Epochs are accepted and not checked here (one daemon holds the
    /// database): a purge under any epoch goes through, as a write does.
    #[tokio::test]
    async fn a_purge_ignores_epochs_as_writes_do() -> Result<(), StoreError> {
        let (_dir, store) = open()?;
        store
            .write_batch(&[write("t", "a", &[("k", Some("v"))])])
            .await?;
        store.claim("t", "a", 9).await?;
        let purged = store.purge_actor("t", "a", Some(1)).await?;
        assert_eq!(purged.state_keys, 1);
        Ok(())
    }

    /// A purge is a write: while a backup holds writes back, it waits, and
    /// removes nothing until the backup is done.
    #[tokio::test]
    async fn a_purge_waits_for_a_paused_backup() -> Result<(), StoreError> {
        let (_dir, store) = open()?;
        store
            .write_batch(&[write("t", "a", &[("k", Some("v"))])])
            .await?;
        // Held on a thread of its own, as a backup holds it.
        let (paused_tx, paused) = tokio::sync::oneshot::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let holder = {
            let store = store.clone();
            std::thread::spawn(move || {
                let _paused = store.db.pause_writes();
                let _ = paused_tx.send(());
                let _ = released.recv();
            })
        };
        paused.await.map_err(|e| StoreError::Io(e.to_string()))?;
        let mut purging = tokio::spawn({
            let store = store.clone();
            async move { store.purge_actor("t", "a", None).await }
        });
        // Nothing signals a write that waits; one that did not wait ends in
        // a few milliseconds.
        assert!(
            tokio::time::timeout(Duration::from_millis(300), &mut purging)
                .await
                .is_err(),
            "the purge passed a paused store"
        );
        assert_eq!(store.load("t", "a").await?.len(), 1);
        drop(release);
        holder
            .join()
            .map_err(|_| StoreError::Io("the holder panicked".into()))?;
        let purged = purging.await.map_err(|e| StoreError::Io(e.to_string()))??;
        assert_eq!(purged.state_keys, 1);
        assert!(store.load("t", "a").await?.is_empty());
        Ok(())
    }

    /// One flush's age index entry lists both actors' records: the purge
    /// rewrites it with the other actor's names only, and removes the
    /// entries that named nothing else.
    #[tokio::test]
    async fn the_age_index_keeps_the_other_actors_names() -> Result<(), StoreError> {
        let (_dir, store) = open()?;
        let keyed = |id: &str, records: &[(&str, u64)]| {
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
        };
        store
            .write_batch(&[
                keyed("a", &[("k1", 1_000), ("k2", 1_001)]),
                keyed("b", &[("k1", 1_000)]),
            ])
            .await?;
        assert_eq!(
            crate::records::tests::index_entries(&store).await?,
            [(1_000, 2), (1_001, 1)]
        );
        assert_eq!(store.purge_actor("rec", "a", None).await?.call_records, 2);
        assert_eq!(
            crate::records::tests::index_entries(&store).await?,
            [(1_000, 1)]
        );
        assert_eq!(store.expire_records(2_000, 100).await?, 1);
        assert!(store.load_record_keys("rec", "b", 0, 10).await?.is_empty());
        Ok(())
    }
}
