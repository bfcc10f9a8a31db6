//! Raft storage on disk: the log, the vote and snapshots in one sled
//! database under the replica's data dir.
//!
//! This module owns the durable half of a replica. The log tree maps the
//! big-endian index to the JSON entry (big-endian so sled's key order is
//! index order); the meta tree holds the vote, the committed log id, the
//! last purged log id and the latest snapshot. The state machine itself
//! lives in memory and is rebuilt on restart from the snapshot plus the
//! committed log, which openraft replays.

// openraft's storage traits fix the error type (a large one).
#![allow(clippy::result_large_err)]

use std::path::Path;

use openraft::{AnyError, ErrorSubject, ErrorVerb, StorageError, StorageIOError};
use serde::{Deserialize, Serialize};

type NodeId = u64;
type StorageResult<T> = Result<T, StorageError<NodeId>>;

mod log_store;
mod state_machine_store;

pub use log_store::LogStore;
pub use state_machine_store::{Applied, StateMachineStore, StoreOpenError};

const VOTE: &[u8] = b"vote";
const COMMITTED: &[u8] = b"committed";
const PURGED: &[u8] = b"last_purged";
const SNAPSHOT: &[u8] = b"snapshot";

fn io_err(
    subject: ErrorSubject<NodeId>,
    verb: ErrorVerb,
    e: impl std::error::Error + 'static,
) -> StorageError<NodeId> {
    StorageIOError::new(subject, verb, AnyError::new(&e)).into()
}

/// Opens (or creates) the replica's database.
pub fn open(dir: &Path) -> Result<sled::Db, sled::Error> {
    sled::open(dir.join("raft"))
}

fn get_json<T: for<'de> Deserialize<'de>>(
    tree: &sled::Tree,
    key: &[u8],
    subject: ErrorSubject<NodeId>,
) -> StorageResult<Option<T>> {
    let Some(bytes) = tree
        .get(key)
        .map_err(|e| io_err(subject.clone(), ErrorVerb::Read, e))?
    else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| io_err(subject, ErrorVerb::Read, e))
}

async fn put_json<T: Serialize>(
    tree: &sled::Tree,
    key: &[u8],
    value: &T,
    subject: ErrorSubject<NodeId>,
) -> StorageResult<()> {
    let bytes =
        serde_json::to_vec(value).map_err(|e| io_err(subject.clone(), ErrorVerb::Write, e))?;
    tree.insert(key, bytes)
        .map_err(|e| io_err(subject.clone(), ErrorVerb::Write, e))?;
    tree.flush_async()
        .await
        .map_err(|e| io_err(subject, ErrorVerb::Write, e))?;
    Ok(())
}

/// Held by every handle on the database; the database (and its file
/// lock) is closed once the last one is dropped, which
/// [`StoreClosed::closed`] awaits. Openraft drops its copies from tasks that
/// end after `Raft::shutdown` returns.
#[derive(Debug, Clone)]
pub struct StoreGuard {
    _held: tokio::sync::mpsc::Sender<()>,
}

impl StoreGuard {
    pub fn new() -> (StoreGuard, StoreClosed) {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        (StoreGuard { _held: tx }, StoreClosed(rx))
    }
}

/// Completes when every [`StoreGuard`] is gone.
#[derive(Debug)]
pub struct StoreClosed(tokio::sync::mpsc::Receiver<()>);

impl StoreClosed {
    pub async fn closed(mut self) {
        // Nobody sends: `recv` ends when the last sender is dropped.
        while self.0.recv().await.is_some() {}
    }
}
