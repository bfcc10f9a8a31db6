//! The Raft state machine: the placement state in memory, applied from the
//! log, and its snapshots on disk.

use std::fmt::Debug;
use std::io::Cursor;
use std::sync::{Arc, RwLock};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, OptionalSend,
    RaftSnapshotBuilder, SnapshotMeta, StoredMembership,
};
use serde::{Deserialize, Serialize};

use super::{get_json, io_err, put_json, NodeId, StorageResult, StoreGuard, SNAPSHOT};
use crate::state::ClusterState;
use crate::TypeConfig;
use troupe_placement::table::Table;

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
    use super::super::open;
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
