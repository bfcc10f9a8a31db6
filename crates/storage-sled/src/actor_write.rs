//! A flush of actor state written actor by actor: each actor's keys (state,
//! inbox, call records) atomically, the whole flush durable at one fsync.
//!
//! Not one `sled::Batch` for the whole flush: sled applies a batch under its
//! process-wide write lock, which every read of every tree takes shared, so
//! a flush of a second's dirty actors held up every reminder load and state
//! read for as long as it took to apply (`cargo bench -p troupe-runtime
//! --bench reminders -- --state-on-sled`). The store contract asks for each
//! actor's write to be atomic, not the flush. An actor whose write is one
//! key is written alone, an atomic operation that takes the lock shared; an
//! actor with more keys is a batch of its own, which holds the lock for
//! those keys only.

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
        for actor in actors {
            write_one(db, actor.ops)?;
        }
    }
    db.sync()?;
    Ok(())
}

fn write_one(db: &Handles, ops: Vec<(Vec<u8>, Option<IVec>)>) -> Result<(), Failure> {
    match <[_; 1]>::try_from(ops) {
        Ok([(key, Some(value))]) => drop(db.state.insert(key, value)?),
        Ok([(key, None)]) => drop(db.state.remove(key)?),
        Err(ops) if ops.is_empty() => {}
        Err(ops) => {
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
