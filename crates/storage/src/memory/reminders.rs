//! The in-memory reminder store; its writes are fenced by the epochs of the
//! [`MemoryStore`](super::MemoryStore) it came from.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;

use super::{checked, Epochs};
use crate::{
    ReminderApplied, ReminderKey, ReminderOp, ReminderRecord, ReminderStore, ReminderWrite,
    StoreError,
};

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

    /// Fenced by `epochs`, a state store's.
    pub(super) fn with_epochs(epochs: Epochs) -> Self {
        Self {
            epochs,
            ..Self::default()
        }
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
