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

use std::fmt::Debug;
use std::io::Cursor;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::{Arc, RwLock};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    AnyError, BasicNode, Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, OptionalSend,
    RaftLogReader, RaftSnapshotBuilder, SnapshotMeta, StorageError, StorageIOError,
    StoredMembership, Vote,
};
use serde::{Deserialize, Serialize};

use super::state::ClusterState;
use super::TypeConfig;
use troupe_placement::table::Table;

type NodeId = u64;
type StorageResult<T> = Result<T, StorageError<NodeId>>;

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

/// The Raft log and vote.
#[derive(Debug, Clone)]
pub struct LogStore {
    log: sled::Tree,
    meta: sled::Tree,
    _guard: StoreGuard,
}

impl LogStore {
    pub fn new(db: &sled::Db, guard: StoreGuard) -> Result<Self, sled::Error> {
        Ok(LogStore {
            log: db.open_tree("log")?,
            meta: db.open_tree("meta")?,
            _guard: guard,
        })
    }

    /// Index of the last entry, for `troupe cluster status`.
    pub fn last_index(&self) -> u64 {
        match self.log.last() {
            Ok(Some((k, _))) => index_of(&k),
            _ => 0,
        }
    }
}

fn index_of(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    if key.len() == 8 {
        b.copy_from_slice(key);
    }
    u64::from_be_bytes(b)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        use std::ops::Bound;
        let start = match range.start_bound() {
            Bound::Included(i) => *i,
            Bound::Excluded(i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let mut out = Vec::new();
        for item in self.log.range(start.to_be_bytes()..) {
            let (k, v) = item.map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, e))?;
            let index = index_of(&k);
            if !range.contains(&index) {
                break;
            }
            let entry = serde_json::from_slice(&v)
                .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, e))?;
            out.push(entry);
        }
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let last_purged: Option<LogId<NodeId>> = get_json(&self.meta, PURGED, ErrorSubject::Logs)?;
        let last = match self
            .log
            .last()
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, e))?
        {
            Some((_, v)) => {
                let e: Entry<TypeConfig> = serde_json::from_slice(&v)
                    .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, e))?;
                Some(e.log_id)
            }
            None => last_purged,
        };
        Ok(LogState {
            last_purged_log_id: last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> StorageResult<()> {
        put_json(&self.meta, VOTE, vote, ErrorSubject::Vote).await
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<NodeId>>> {
        get_json(&self.meta, VOTE, ErrorSubject::Vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> StorageResult<()> {
        put_json(&self.meta, COMMITTED, &committed, ErrorSubject::Store).await
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<NodeId>>> {
        Ok(
            get_json::<Option<LogId<NodeId>>>(&self.meta, COMMITTED, ErrorSubject::Store)?
                .flatten(),
        )
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = sled::Batch::default();
        for entry in entries {
            let bytes = serde_json::to_vec(&entry)
                .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Write, e))?;
            batch.insert(&entry.log_id.index.to_be_bytes(), bytes);
        }
        self.log
            .apply_batch(batch)
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Write, e))?;
        // Openraft counts the entries as persisted only once told so: the
        // vote for them and their commit depend on it.
        let flushed = self.log.flush_async().await;
        callback.log_io_completed(flushed.map(|_| ()).map_err(std::io::Error::other));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        let mut batch = sled::Batch::default();
        for item in self.log.range(log_id.index.to_be_bytes()..) {
            let (k, _) = item.map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Delete, e))?;
            batch.remove(k);
        }
        self.log
            .apply_batch(batch)
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Delete, e))?;
        self.log
            .flush_async()
            .await
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Delete, e))?;
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        // Record the purge point first: a crash in between leaves extra
        // entries, never a gap.
        put_json(&self.meta, PURGED, &log_id, ErrorSubject::Logs).await?;
        let mut batch = sled::Batch::default();
        for item in self.log.range(..=log_id.index.to_be_bytes()) {
            let (k, _) = item.map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Delete, e))?;
            batch.remove(k);
        }
        self.log
            .apply_batch(batch)
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Delete, e))?;
        Ok(())
    }
}

/// What a snapshot holds besides openraft's metadata.
#[derive(Debug, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, BasicNode>,
    data: Vec<u8>,
}

/// The applied state, shared with the gRPC service, which reads tables
/// from it.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Applied {
    pub last_applied: Option<LogId<NodeId>>,
    pub membership: StoredMembership<NodeId, BasicNode>,
    pub state: ClusterState,
}

/// The state machine: applies committed entries and builds snapshots.
#[derive(Debug, Clone)]
pub struct StateMachineStore {
    applied: Arc<RwLock<Applied>>,
    meta: sled::Tree,
    on_apply: Arc<tokio::sync::watch::Sender<u64>>,
    _guard: StoreGuard,
}

impl StateMachineStore {
    /// Loads the latest snapshot, if any; openraft replays the log after it.
    pub fn new(db: &sled::Db, guard: StoreGuard) -> Result<Self, StoreOpenError> {
        let meta = db.open_tree("meta")?;
        let mut applied = Applied::default();
        if let Some(bytes) = meta.get(SNAPSHOT)? {
            let snap: StoredSnapshot = serde_json::from_slice(&bytes)?;
            applied = Applied {
                last_applied: snap.meta.last_log_id,
                membership: snap.meta.last_membership.clone(),
                state: serde_json::from_slice(&snap.data)?,
            };
        }
        let (on_apply, _) = tokio::sync::watch::channel(0);
        Ok(StateMachineStore {
            applied: Arc::new(RwLock::new(applied)),
            meta,
            on_apply: Arc::new(on_apply),
            _guard: guard,
        })
    }

    /// The applied state, for reads outside Raft.
    pub fn applied(&self) -> Arc<RwLock<Applied>> {
        self.applied.clone()
    }

    /// Ticks with the last applied index after every apply.
    pub fn applied_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.on_apply.subscribe()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Applied> {
        // The guarded data is replaced wholesale or mutated by infallible
        // code; a panic elsewhere cannot leave it half-applied.
        self.applied.write().unwrap_or_else(|e| e.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Applied> {
        self.applied.read().unwrap_or_else(|e| e.into_inner())
    }
}

/// The data dir holds something this replica cannot read.
#[derive(Debug, thiserror::Error)]
pub enum StoreOpenError {
    #[error("reading the placement database: {0}")]
    Sled(#[from] sled::Error),
    #[error("the stored placement snapshot is not valid JSON ({0}); the data dir was written by an incompatible version or is damaged")]
    Json(#[from] serde_json::Error),
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        let (meta, data) = {
            let applied = self.read();
            let data = serde_json::to_vec(&applied.state)
                .map_err(|e| io_err(ErrorSubject::StateMachine, ErrorVerb::Read, e))?;
            let id = match applied.last_applied {
                Some(l) => format!("{}-{}", l.leader_id, l.index),
                None => "empty".to_owned(),
            };
            let meta = SnapshotMeta {
                last_log_id: applied.last_applied,
                last_membership: applied.membership.clone(),
                snapshot_id: id,
            };
            (meta, data)
        };
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data: data.clone(),
        };
        put_json(&self.meta, SNAPSHOT, &stored, ErrorSubject::Snapshot(None)).await?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = StateMachineStore;

    async fn applied_state(
        &mut self,
    ) -> StorageResult<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>)> {
        let applied = self.read();
        Ok((applied.last_applied, applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<Table>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut out = Vec::new();
        let last = {
            let mut applied = self.write();
            for entry in entries {
                applied.last_applied = Some(entry.log_id);
                match entry.payload {
                    EntryPayload::Blank => out.push(applied.state.table()),
                    EntryPayload::Normal(command) => out.push(applied.state.apply(&command)),
                    EntryPayload::Membership(m) => {
                        applied.membership = StoredMembership::new(Some(entry.log_id), m);
                        out.push(applied.state.table());
                    }
                }
            }
            applied.last_applied.map_or(0, |l| l.index)
        };
        self.on_apply.send_replace(last);
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StorageResult<()> {
        let data = snapshot.into_inner();
        let state: ClusterState = serde_json::from_slice(&data).map_err(|e| {
            io_err(
                ErrorSubject::Snapshot(Some(meta.signature())),
                ErrorVerb::Read,
                e,
            )
        })?;
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data,
        };
        put_json(
            &self.meta,
            SNAPSHOT,
            &stored,
            ErrorSubject::Snapshot(Some(meta.signature())),
        )
        .await?;
        let last = {
            let mut applied = self.write();
            *applied = Applied {
                last_applied: meta.last_log_id,
                membership: meta.last_membership.clone(),
                state,
            };
            meta.last_log_id.map_or(0, |l| l.index)
        };
        self.on_apply.send_replace(last);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        let stored: Option<StoredSnapshot> =
            get_json(&self.meta, SNAPSHOT, ErrorSubject::Snapshot(None))?;
        Ok(stored.map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.data)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Command;
    use openraft::CommittedLeaderId;
    use troupe_placement::table::Member;

    fn join(index: u64, node: &str) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(Command::Join {
                member: Member {
                    node: node.into(),
                    address: "127.0.0.1:1".into(),
                    types: vec!["C".into()],
                    leaving: false,
                },
            }),
        }
    }

    #[tokio::test]
    async fn a_snapshot_restores_the_state_after_reopening(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let before = {
            let db = open(dir.path())?;
            let (guard, closed) = StoreGuard::new();
            let mut sm = StateMachineStore::new(&db, guard)?;
            let tables = sm.apply(vec![join(1, "a"), join(2, "b")]).await?;
            assert_eq!(tables.len(), 2);
            let snap = sm.build_snapshot().await?;
            assert_eq!(snap.meta.last_log_id.map(|l| l.index), Some(2));
            let before = sm.read().state.clone();
            drop(sm);
            drop(db);
            closed.closed().await;
            before
        };
        let db = open(dir.path())?;
        let (guard, _closed) = StoreGuard::new();
        let mut sm = StateMachineStore::new(&db, guard)?;
        let (last, _) = sm.applied_state().await?;
        assert_eq!(last.map(|l| l.index), Some(2));
        assert_eq!(sm.read().state, before);
        assert!(sm.get_current_snapshot().await?.is_some());
        Ok(())
    }
}
