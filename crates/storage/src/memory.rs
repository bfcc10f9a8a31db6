//! An in-memory store for tests and benchmarks: nothing survives the process.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;

use crate::{ActorWrite, StateStore, StoreError, StoredState};

type ActorKey = (String, String);

/// State kept in a map; counts batches and key writes so benchmarks can
/// report how many storage writes write-behind saved.
#[derive(Debug, Default)]
pub struct MemoryStore {
    actors: Mutex<BTreeMap<ActorKey, BTreeMap<String, Bytes>>>,
    batches: AtomicU64,
    key_writes: AtomicU64,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of `write_batch` calls so far.
    pub fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }

    /// Number of key sets and deletes written so far.
    pub fn key_writes(&self) -> u64 {
        self.key_writes.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl StateStore for MemoryStore {
    fn describe(&self) -> String {
        "memory".into()
    }

    async fn load(&self, actor_type: &str, actor_id: &str) -> Result<StoredState, StoreError> {
        let actors = self.actors.lock();
        Ok(actors
            .get(&(actor_type.to_owned(), actor_id.to_owned()))
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default())
    }

    async fn write_batch(&self, batch: &[ActorWrite]) -> Result<(), StoreError> {
        let mut actors = self.actors.lock();
        self.batches.fetch_add(1, Ordering::Relaxed);
        for write in batch {
            let actor = (write.actor_type.clone(), write.actor_id.clone());
            let entry = actors.entry(actor.clone()).or_default();
            for (key, value) in &write.changes {
                self.key_writes.fetch_add(1, Ordering::Relaxed);
                match value {
                    Some(v) => entry.insert(key.clone(), v.clone()),
                    None => entry.remove(key),
                };
            }
            if entry.is_empty() {
                actors.remove(&actor);
            }
        }
        Ok(())
    }

    async fn list_actors(
        &self,
        actor_type: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let actors = self.actors.lock();
        Ok(actors
            .keys()
            .filter(|(ty, id)| ty == actor_type && after.is_none_or(|a| id.as_str() > a))
            .take(limit)
            .map(|(_, id)| id.clone())
            .collect())
    }
}
