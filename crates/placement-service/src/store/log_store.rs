//! The Raft log and the vote, in the replica's sled database.

use std::fmt::Debug;
use std::ops::RangeBounds;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{Entry, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftLogReader, Vote};

use super::{
    get_json, io_err, put_json, NodeId, StorageResult, StoreGuard, COMMITTED, PURGED, VOTE,
};
use crate::TypeConfig;

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
