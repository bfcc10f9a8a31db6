//! A flush of actor state written actor by actor: each actor's keys (state,
//! inbox, call records) atomically, the whole flush durable at one fsync.
//!
//! Not one `sled::Batch` for the whole flush: sled applies a batch under its
//! process-wide write lock, which every read of every tree takes shared, so
//! a flush of a second's dirty actors held up every reminder load and state
//! read for as long as it took to apply (`cargo bench -p troupe-runtime
//! --bench reminders -- --state-on-sled`). The store contract asks for each
//! actor's write to be atomic, not the flush.
//!
//! Nor one batch per actor: sled starts every batch by writing out its log
//! buffer, so that the batch's entries lie in one buffer, and syncs that
//! write's range. A flush of 10,000 keyed calls (a call record and a state
//! key per actor) made thousands of such writes, 9 KB written per call,
//! and a third of a keyed call's daemon CPU. Actors' writes are grouped, in
//! order, into batches of up to [`BATCH_OPS`] operations: a batch holds
//! sled's write lock for a few hundred keys at most, and the buffer writes
//! come a few hundred keys apart. An actor's operations never straddle two
//! batches. An actor of one key met outside a group is still written
//! alone: sled spends about half the CPU on a lone insert that it spends
//! on a key in a batch (2.6 against 4.7 µs, 200,000 one-key updates in
//! batches of 256 or none, measured outside the daemon), and a lone insert
//! takes no write lock, so a flush of such actors (a reminder's firing
//! writing one key) leaves readers alone.

use sled::IVec;

use crate::db::{Failure, Handles};
use crate::records::Staged;

/// One actor's write as sled operations.
#[derive(Default)]
pub(crate) struct ActorOps {
    /// Puts (`Some`) and removals (`None`), in order.
    pub(crate) ops: Vec<(Vec<u8>, Option<IVec>)>,
    /// Call records, moved among `ops` when written unless their key is
    /// stored already (`records::index`).
    pub(crate) records: Vec<Staged>,
}

impl ActorOps {
    pub(crate) fn insert(&mut self, key: Vec<u8>, value: impl Into<IVec>) {
        self.ops.push((key, Some(value.into())));
    }

    pub(crate) fn remove(&mut self, key: Vec<u8>) {
        self.ops.push((key, None));
    }
}

/// Operations in one sled batch, unless one actor's write has more: enough
/// to spread sled's log-buffer write over many actors, few enough that its
/// write lock is held for well under a millisecond.
const BATCH_OPS: usize = 256;

/// Applies each actor's operations atomically, in order, then makes them
/// durable. A crash before the flush may keep some actors' writes and not
/// others, never part of one actor's. Runs with the store's writes
/// serialised (the runtime's flusher writes one batch at a time).
pub(crate) fn apply(db: &Handles, mut actors: Vec<ActorOps>) -> Result<(), Failure> {
    {
        // Expiry waits while records and their index are half written.
        let _records = actors
            .iter()
            .any(|a| !a.records.is_empty())
            .then(|| db.records.lock());
        crate::records::index(db, &mut actors)?;
        let mut group = Vec::new();
        for actor in actors {
            if !group.is_empty() && group.len() + actor.ops.len() > BATCH_OPS {
                write_group(db, std::mem::take(&mut group))?;
            }
            if group.is_empty() && actor.ops.len() == 1 {
                // Alone, without the write lock that would stall readers.
                write_group(db, actor.ops)?;
            } else {
                group.extend(actor.ops);
            }
        }
        write_group(db, group)?;
    }
    db.sync()?;
    Ok(())
}

/// Writes whole actors' operations atomically: a lone key as an atomic
/// operation of its own (which takes sled's write lock shared), more as a
/// batch.
fn write_group(db: &Handles, ops: Vec<(Vec<u8>, Option<IVec>)>) -> Result<(), Failure> {
    match <[_; 1]>::try_from(ops) {
        Ok([(key, Some(value))]) => drop(db.state.insert(key, value)?),
        Ok([(key, None)]) => drop(db.state.remove(key)?),
        Err(ops) if ops.is_empty() => {}
        Err(ops) => {
            #[cfg(test)]
            db.batches.lock().push(ops.len());
            let mut batch = sled::Batch::default();
            for (key, value) in ops {
                match value {
                    Some(v) => batch.insert(key, v),
                    None => batch.remove(key),
                }
            }
            db.state.apply_batch(batch)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use troupe_storage::conformance::write;
    use troupe_storage::{ActorWrite, CallRecord, StateStore, StoreError};

    use super::BATCH_OPS;
    use crate::SledStore;

    /// A keyed call's write: one state key and its call record.
    fn keyed_call(id: &str) -> ActorWrite {
        let mut w = write("counter", id, &[("n", Some("1"))]);
        w.records = vec![CallRecord {
            key: format!("{id}-call"),
            recorded_unix_ms: 1_000,
            data: Bytes::from_static(b"ok"),
            new_key: false,
        }];
        w
    }

    fn store() -> Result<(tempfile::TempDir, SledStore), StoreError> {
        let dir = tempfile::tempdir().map_err(|e| StoreError::Io(e.to_string()))?;
        let store = SledStore::open(dir.path())?;
        Ok((dir, store))
    }

    #[tokio::test]
    async fn a_flush_of_keyed_calls_writes_a_few_batches_of_whole_actors() -> Result<(), StoreError>
    {
        let (_dir, store) = store()?;
        let writes: Vec<_> = (0..1_000).map(|i| keyed_call(&format!("a{i}"))).collect();
        store.write_batch(&writes).await?;
        let batches = store.db.batches().unwrap_or_default();
        // A batch per actor made sled write out its log buffer 1,000 times.
        assert!(batches.len() <= 2_000 / BATCH_OPS + 1, "{batches:?}");
        assert!(
            batches.iter().all(|n| n % 2 == 0 && *n <= BATCH_OPS),
            "an actor's two keys split, or a batch too large: {batches:?}"
        );
        assert_eq!(batches.iter().sum::<usize>(), 2_000);
        for id in ["a0", "a511", "a999"] {
            assert_eq!(
                store.load("counter", id).await?,
                vec![("n".to_string(), Bytes::from_static(b"1"))]
            );
            let record = store
                .load_record("counter", id, &format!("{id}-call"))
                .await?;
            assert_eq!(record.map(|r| r.data), Some(Bytes::from_static(b"ok")));
        }
        Ok(())
    }

    /// Encoding 60,000 actors' writes takes 17-26 ms on the flushing
    /// worker: it must yield now and then, not hold that worker's other
    /// tasks until the write reaches the blocking pool.
    #[tokio::test]
    async fn encoding_a_large_flush_yields_before_the_write() -> Result<(), StoreError> {
        let (_dir, store) = store()?;
        let writes: Vec<_> = (0..2_000).map(|i| keyed_call(&format!("a{i}"))).collect();
        let mut flush = std::pin::pin!(store.write_batch(&writes));
        let first = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(std::future::Future::poll(flush.as_mut(), cx))
        })
        .await;
        assert!(first.is_pending());
        assert_eq!(
            store.db.writes_begun(),
            0,
            "the whole batch was encoded in one poll"
        );
        flush.await?;
        assert_eq!(store.db.writes_begun(), 1);
        assert_eq!(store.load("counter", "a1999").await?.len(), 1);
        Ok(())
    }

    #[tokio::test]
    async fn an_actor_larger_than_a_batch_is_one_batch_and_lone_keys_take_no_batch(
    ) -> Result<(), StoreError> {
        let (_dir, store) = store()?;
        let keys: Vec<String> = (0..BATCH_OPS + 44).map(|i| format!("k{i}")).collect();
        let big: Vec<(&str, Option<&str>)> = keys.iter().map(|k| (k.as_str(), Some("v"))).collect();
        let two = [("x", Some("1")), ("y", Some("2"))];
        store
            .write_batch(&[
                write("t", "lone1", &[("n", Some("1"))]),
                write("t", "lone2", &[("n", Some("1"))]),
                write("t", "pair1", &two),
                write("t", "big", &big),
                write("t", "pair2", &two),
                write("t", "lone3", &[("n", Some("1"))]),
            ])
            .await?;
        // The lone keys before any group are written alone; the first pair
        // cannot take the big actor in and goes by itself; the big actor
        // is one batch however large; the last pair takes the lone key
        // after it in.
        assert_eq!(
            store.db.batches().unwrap_or_default(),
            vec![2, BATCH_OPS + 44, 3]
        );
        assert_eq!(store.load("t", "big").await?.len(), BATCH_OPS + 44);
        assert_eq!(store.load("t", "lone3").await?.len(), 1);
        Ok(())
    }
}
