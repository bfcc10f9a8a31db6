//! In-memory state and reminders for tests and benchmarks: nothing survives
//! the process.
//!
//! - `inbox`: actors' inboxes and the dead letters.
//! - `reminders`: [`MemoryReminders`].

mod inbox;
mod records;
mod reminders;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;

use crate::fencing::EpochCheck;
use crate::{
    ActorWrite, CallRecord, DeadLetter, DeadLetterKey, Epoch, FencedActor, InboxEntry, PurgedActor,
    RecordedKey, StateStore, StoreError, StoredState,
};
use inbox::Inboxes;
use records::Records;
pub use reminders::MemoryReminders;

type ActorKey = (String, String);

/// Actors' owner epochs, shared by a state store and the reminder store
/// beside it (as they share one database elsewhere).
type Epochs = Arc<Mutex<HashMap<ActorKey, Epoch>>>;

/// Runs the epoch check over the actors `writes` name, and stores what the
/// admitted ones raise.
fn checked<'a, T>(
    epochs: &Epochs,
    writes: impl Iterator<Item = (&'a str, &'a str, Option<Epoch>, T)>,
) -> Vec<(bool, T)> {
    let mut epochs = epochs.lock();
    let writes: Vec<_> = writes.collect();
    let mut check = EpochCheck::new(writes.iter().filter_map(|(ty, id, _, _)| {
        let key = ((*ty).to_owned(), (*id).to_owned());
        epochs.get(&key).map(|e| (key, *e))
    }));
    let admitted = writes
        .into_iter()
        .map(|(ty, id, epoch, item)| (check.admit(ty, id, epoch), item))
        .collect();
    for (ty, id, epoch) in check.raised() {
        epochs.insert((ty.to_owned(), id.to_owned()), epoch);
    }
    admitted
}

/// State kept in a map; counts batches and key writes so benchmarks can
/// report how many storage writes write-behind saved.
#[derive(Debug, Default)]
pub struct MemoryStore {
    actors: Mutex<BTreeMap<ActorKey, BTreeMap<String, Bytes>>>,
    /// Inboxes and dead letters; locked after `actors`, so a batch's state
    /// and inbox changes are seen together.
    inboxes: Mutex<Inboxes>,
    /// Call records; locked after `actors`, like `inboxes`.
    records: Mutex<Records>,
    epochs: Epochs,
    batches: AtomicU64,
    key_writes: AtomicU64,
    record_reads: AtomicU64,
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

    /// Number of `load_record` calls so far: the keyed calls that had to
    /// ask the store whether they were answered before.
    pub fn record_reads(&self) -> u64 {
        self.record_reads.load(Ordering::Relaxed)
    }

    /// A reminder store whose writes are fenced by the same epochs as this
    /// store's.
    pub fn reminders(&self) -> MemoryReminders {
        MemoryReminders::with_epochs(self.epochs.clone())
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

    async fn claim(
        &self,
        actor_type: &str,
        actor_id: &str,
        epoch: Epoch,
    ) -> Result<StoredState, StoreError> {
        let admitted = checked(
            &self.epochs,
            std::iter::once((actor_type, actor_id, Some(epoch), ())),
        );
        if admitted.iter().any(|(ok, ())| !ok) {
            return Err(StoreError::Fenced {
                actor_type: actor_type.to_owned(),
                actor_id: actor_id.to_owned(),
                epoch,
            });
        }
        self.load(actor_type, actor_id).await
    }

    async fn write_batch(&self, batch: &[ActorWrite]) -> Result<Vec<FencedActor>, StoreError> {
        let mut actors = self.actors.lock();
        self.batches.fetch_add(1, Ordering::Relaxed);
        let admitted = checked(
            &self.epochs,
            batch
                .iter()
                .map(|w| (w.actor_type.as_str(), w.actor_id.as_str(), w.epoch, w)),
        );
        let mut fenced = Vec::new();
        for (ok, write) in admitted {
            if !ok {
                fenced.push(FencedActor {
                    actor_type: write.actor_type.clone(),
                    actor_id: write.actor_id.clone(),
                    epoch: write.epoch.unwrap_or_default(),
                });
                continue;
            }
            let actor = (write.actor_type.clone(), write.actor_id.clone());
            self.inboxes.lock().apply(&actor, &write.inbox);
            self.records.lock().apply(&actor, &write.records);
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
        Ok(fenced)
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

    async fn load_inbox(
        &self,
        actor_type: &str,
        actor_id: &str,
    ) -> Result<Vec<InboxEntry>, StoreError> {
        Ok(self.inboxes.lock().load(actor_type, actor_id))
    }

    async fn inbox_actors(
        &self,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        Ok(self.inboxes.lock().actors(after, limit))
    }

    async fn stored_actors(
        &self,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let actors = self.actors.lock();
        let inboxes = self.inboxes.lock();
        let records = self.records.lock();
        let all: BTreeSet<&ActorKey> = actors
            .keys()
            .chain(inboxes.actor_keys())
            .chain(records.actor_keys())
            .collect();
        let dead: BTreeSet<ActorKey> = inboxes
            .dead
            .keys()
            .map(|k| (k.actor_type.clone(), k.actor_id.clone()))
            .collect();
        let all: BTreeSet<&ActorKey> = all.into_iter().chain(dead.iter()).collect();
        Ok(all
            .into_iter()
            .filter(|(ty, id)| {
                after.is_none_or(|(aty, aid)| (ty.as_str(), id.as_str()) > (aty, aid))
            })
            .take(limit)
            .cloned()
            .collect())
    }

    async fn list_dead_letters(
        &self,
        actor_type: Option<&str>,
        after: Option<&DeadLetterKey>,
        limit: usize,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        Ok(self.inboxes.lock().dead_letters(actor_type, after, limit))
    }

    async fn get_dead_letter(&self, key: &DeadLetterKey) -> Result<Option<DeadLetter>, StoreError> {
        Ok(self.inboxes.lock().dead.get(key).cloned())
    }

    async fn remove_dead_letter(&self, key: &DeadLetterKey) -> Result<bool, StoreError> {
        Ok(self.inboxes.lock().dead.remove(key).is_some())
    }

    async fn load_record_keys(
        &self,
        actor_type: &str,
        actor_id: &str,
        since_unix_ms: u64,
        limit: usize,
    ) -> Result<Vec<RecordedKey>, StoreError> {
        let actor = (actor_type.to_owned(), actor_id.to_owned());
        Ok(self.records.lock().load(&actor, since_unix_ms, limit))
    }

    async fn load_record(
        &self,
        actor_type: &str,
        actor_id: &str,
        key: &str,
    ) -> Result<Option<CallRecord>, StoreError> {
        self.record_reads.fetch_add(1, Ordering::Relaxed);
        let actor = (actor_type.to_owned(), actor_id.to_owned());
        Ok(self.records.lock().get(&actor, key))
    }

    async fn purge_actor(
        &self,
        actor_type: &str,
        actor_id: &str,
        epoch: Option<Epoch>,
    ) -> Result<PurgedActor, StoreError> {
        // Held throughout, as `write_batch` holds it, so no batch of the
        // actor lands between the epoch check and the removal.
        let mut actors = self.actors.lock();
        let admitted = checked(
            &self.epochs,
            std::iter::once((actor_type, actor_id, epoch, ())),
        );
        if admitted.iter().any(|(ok, ())| !ok) {
            return Err(StoreError::Fenced {
                actor_type: actor_type.to_owned(),
                actor_id: actor_id.to_owned(),
                epoch: epoch.unwrap_or_default(),
            });
        }
        let actor = (actor_type.to_owned(), actor_id.to_owned());
        let state_keys = actors.remove(&actor).map_or(0, |keys| keys.len() as u64);
        let (inbox_entries, dead_letters) = self.inboxes.lock().purge(&actor);
        let call_records = self.records.lock().purge(&actor);
        Ok(PurgedActor {
            state_keys,
            inbox_entries,
            dead_letters,
            call_records,
        })
    }

    async fn expire_records(&self, before_unix_ms: u64, limit: usize) -> Result<u64, StoreError> {
        Ok(self.records.lock().expire(before_unix_ms, limit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn memory_reminders_keep_the_store_contract() -> Result<(), StoreError> {
        crate::conformance::reminders(&MemoryReminders::new()).await
    }

    #[tokio::test]
    async fn memory_stores_copy_whole() -> Result<(), StoreError> {
        let (state, reminders) = (MemoryStore::new(), MemoryReminders::new());
        crate::conformance::copy(crate::Stores {
            state: &state,
            reminders: &reminders,
        })
        .await
    }

    #[tokio::test]
    async fn memory_inboxes_keep_the_store_contract() -> Result<(), StoreError> {
        crate::conformance::inbox(&MemoryStore::new()).await?;
        crate::conformance::inbox_fencing(&MemoryStore::new()).await
    }

    #[tokio::test]
    async fn memory_call_records_keep_the_store_contract() -> Result<(), StoreError> {
        crate::conformance::records(&MemoryStore::new()).await?;
        crate::conformance::records_fencing(&MemoryStore::new()).await
    }

    #[tokio::test]
    async fn memory_purges_keep_the_store_contract() -> Result<(), StoreError> {
        crate::conformance::purge(&MemoryStore::new()).await?;
        crate::conformance::purge_fencing(&MemoryStore::new()).await
    }

    #[tokio::test]
    async fn memory_stores_keep_the_fencing_contract() -> Result<(), StoreError> {
        let state = MemoryStore::new();
        crate::conformance::fencing(&state, &state.reminders()).await
    }
}
