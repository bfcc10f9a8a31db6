//! In-memory state and reminders for tests and benchmarks: nothing survives
//! the process.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;

use crate::fencing::EpochCheck;
use crate::{
    ActorWrite, DeadLetter, DeadLetterKey, Epoch, FencedActor, InboxEntry, InboxOp,
    ReminderApplied, ReminderKey, ReminderOp, ReminderRecord, ReminderStore, ReminderWrite,
    StateStore, StoreError, StoredState,
};

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
    epochs: Epochs,
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

    /// A reminder store whose writes are fenced by the same epochs as this
    /// store's.
    pub fn reminders(&self) -> MemoryReminders {
        MemoryReminders {
            epochs: self.epochs.clone(),
            ..MemoryReminders::default()
        }
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
        let inboxes = self.inboxes.lock();
        let key = (actor_type.to_owned(), actor_id.to_owned());
        Ok(inboxes
            .entries
            .get(&key)
            .map(|m| {
                m.iter()
                    .map(|(seq, data)| InboxEntry {
                        seq: *seq,
                        data: data.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn inbox_actors(
        &self,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let inboxes = self.inboxes.lock();
        Ok(inboxes
            .entries
            .keys()
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
        let inboxes = self.inboxes.lock();
        Ok(inboxes
            .dead
            .values()
            .filter(|d| actor_type.is_none_or(|t| d.key.actor_type == t))
            .filter(|d| after.is_none_or(|a| &d.key > a))
            .take(limit)
            .cloned()
            .collect())
    }

    async fn get_dead_letter(&self, key: &DeadLetterKey) -> Result<Option<DeadLetter>, StoreError> {
        Ok(self.inboxes.lock().dead.get(key).cloned())
    }

    async fn remove_dead_letter(&self, key: &DeadLetterKey) -> Result<bool, StoreError> {
        Ok(self.inboxes.lock().dead.remove(key).is_some())
    }
}

/// Every actor's inbox and the dead letters, in key order.
#[derive(Debug, Default)]
struct Inboxes {
    entries: BTreeMap<ActorKey, BTreeMap<u64, Bytes>>,
    dead: BTreeMap<DeadLetterKey, DeadLetter>,
}

impl Inboxes {
    fn apply(&mut self, actor: &ActorKey, ops: &[InboxOp]) {
        if ops.is_empty() {
            return;
        }
        let inbox = self.entries.entry(actor.clone()).or_default();
        for op in ops {
            match op {
                InboxOp::Append(entry) => {
                    inbox.insert(entry.seq, entry.data.clone());
                }
                InboxOp::Remove { seq } => {
                    inbox.remove(seq);
                }
                InboxOp::DeadLetter(letter) => {
                    inbox.remove(&letter.key.seq);
                    self.dead.insert(letter.key.clone(), letter.clone());
                }
            }
        }
        if inbox.is_empty() {
            self.entries.remove(actor);
        }
    }
}

/// Reminders in memory, for tests and benchmarks.
#[derive(Debug, Default)]
pub struct MemoryReminders {
    inner: Mutex<MemoryInner>,
    epochs: Epochs,
}

#[derive(Debug, Default)]
struct MemoryInner {
    records: BTreeMap<ReminderKey, (u64, Bytes)>,
    by_due: BTreeSet<(u64, ReminderKey)>,
}

impl MemoryReminders {
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl ReminderStore for MemoryReminders {
    async fn apply_reminders(
        &self,
        writes: &[ReminderWrite],
    ) -> Result<Vec<ReminderApplied>, StoreError> {
        let mut inner = self.inner.lock();
        let admitted = checked(
            &self.epochs,
            writes.iter().map(|w| {
                let key = w.op.key();
                (
                    key.actor_type.as_str(),
                    key.actor_id.as_str(),
                    w.epoch,
                    &w.op,
                )
            }),
        );
        let mut answers = vec![ReminderApplied::Fenced; writes.len()];
        for (i, (ok, op)) in admitted.iter().enumerate() {
            if let (true, ReminderOp::Put(r)) = (ok, op) {
                if let Some((old, _)) = inner
                    .records
                    .insert(r.key.clone(), (r.due_unix_ms, r.data.clone()))
                {
                    inner.by_due.remove(&(old, r.key.clone()));
                }
                inner.by_due.insert((r.due_unix_ms, r.key.clone()));
                answers[i] = ReminderApplied::Put;
            }
        }
        for (i, (ok, op)) in admitted.iter().enumerate() {
            if let (true, ReminderOp::Delete(key)) = (ok, op) {
                let existed = match inner.records.remove(key) {
                    Some((due, _)) => {
                        inner.by_due.remove(&(due, key.clone()));
                        true
                    }
                    None => false,
                };
                answers[i] = ReminderApplied::Deleted { existed };
            }
        }
        Ok(answers)
    }

    async fn get_reminder(&self, key: &ReminderKey) -> Result<Option<ReminderRecord>, StoreError> {
        Ok(self
            .inner
            .lock()
            .records
            .get(key)
            .map(|(due, data)| ReminderRecord {
                key: key.clone(),
                due_unix_ms: *due,
                data: data.clone(),
            }))
    }

    async fn due_reminders(
        &self,
        after: Option<(u64, &ReminderKey)>,
        until_unix_ms: u64,
        limit: usize,
    ) -> Result<Vec<ReminderRecord>, StoreError> {
        use std::ops::Bound;
        let inner = self.inner.lock();
        let lower = match after {
            Some((due, key)) => Bound::Excluded((due, key.clone())),
            None => Bound::Unbounded,
        };
        Ok(inner
            .by_due
            .range((lower, Bound::Unbounded))
            .take_while(|(due, _)| *due <= until_unix_ms)
            .take(limit)
            .filter_map(|(due, key)| {
                inner.records.get(key).map(|(_, data)| ReminderRecord {
                    key: key.clone(),
                    due_unix_ms: *due,
                    data: data.clone(),
                })
            })
            .collect())
    }

    async fn list_reminders(
        &self,
        actor_type: Option<&str>,
        actor_id: Option<&str>,
        after: Option<&ReminderKey>,
        limit: usize,
    ) -> Result<Vec<ReminderRecord>, StoreError> {
        let inner = self.inner.lock();
        Ok(inner
            .records
            .iter()
            .filter(|(k, _)| after.is_none_or(|a| *k > a))
            .filter(|(k, _)| actor_type.is_none_or(|t| k.actor_type == t))
            .filter(|(k, _)| actor_id.is_none_or(|i| k.actor_id == i))
            .take(limit)
            .map(|(k, (due, data))| ReminderRecord {
                key: k.clone(),
                due_unix_ms: *due,
                data: data.clone(),
            })
            .collect())
    }

    async fn count_reminders(&self) -> Result<u64, StoreError> {
        Ok(self.inner.lock().records.len() as u64)
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
    async fn memory_inboxes_keep_the_store_contract() -> Result<(), StoreError> {
        crate::conformance::inbox(&MemoryStore::new()).await?;
        crate::conformance::inbox_fencing(&MemoryStore::new()).await
    }

    #[tokio::test]
    async fn memory_stores_keep_the_fencing_contract() -> Result<(), StoreError> {
        let state = MemoryStore::new();
        crate::conformance::fencing(&state, &state.reminders()).await
    }
}
