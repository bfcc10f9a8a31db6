//! [`MemoryReminders`] with a test's hooks around its calls: for tests of
//! what the store's caller (the scheduler) does while the store holds a
//! read, or while it asks for housekeeping.

use async_trait::async_trait;

use crate::{
    MemoryReminders, ReminderApplied, ReminderKey, ReminderRecord, ReminderStore, ReminderWrite,
    StoreError,
};

/// What a test does around the calls of a [`HookedReminders`]; each hook
/// does nothing unless the test says otherwise.
#[async_trait]
pub trait ReminderHooks: Send + Sync + std::fmt::Debug + 'static {
    /// Before a batch is applied.
    fn applying(&self, _writes: &[ReminderWrite]) {}

    /// After a read of due reminders (at most `limit`), before its caller
    /// gets `records`: it may hold the read.
    async fn read_due(&self, _records: &[ReminderRecord], _limit: usize) {}

    /// After a read of one reminder, before its caller gets `record`: it
    /// may hold the read.
    async fn read_one(&self, _key: &ReminderKey, _record: Option<&ReminderRecord>) {}

    /// What the store answers to [`ReminderStore::wants_idle_batches`].
    fn wants_idle_batches(&self) -> bool {
        false
    }
}

/// Reminders in memory, with `hooks` around the calls.
#[derive(Debug, Default)]
pub struct HookedReminders<H> {
    pub inner: MemoryReminders,
    pub hooks: H,
}

impl<H> HookedReminders<H> {
    pub fn new(hooks: H) -> Self {
        Self {
            inner: MemoryReminders::new(),
            hooks,
        }
    }
}

#[async_trait]
impl<H: ReminderHooks> ReminderStore for HookedReminders<H> {
    async fn apply_reminders(
        &self,
        writes: &[ReminderWrite],
    ) -> Result<Vec<ReminderApplied>, StoreError> {
        self.hooks.applying(writes);
        self.inner.apply_reminders(writes).await
    }

    async fn get_reminder(&self, key: &ReminderKey) -> Result<Option<ReminderRecord>, StoreError> {
        let record = self.inner.get_reminder(key).await?;
        self.hooks.read_one(key, record.as_ref()).await;
        Ok(record)
    }

    async fn due_reminders(
        &self,
        after: Option<(u64, &ReminderKey)>,
        until_unix_ms: u64,
        limit: usize,
    ) -> Result<Vec<ReminderRecord>, StoreError> {
        let records = self
            .inner
            .due_reminders(after, until_unix_ms, limit)
            .await?;
        self.hooks.read_due(&records, limit).await;
        Ok(records)
    }

    async fn list_reminders(
        &self,
        actor_type: Option<&str>,
        actor_id: Option<&str>,
        after: Option<&ReminderKey>,
        limit: usize,
    ) -> Result<Vec<ReminderRecord>, StoreError> {
        self.inner
            .list_reminders(actor_type, actor_id, after, limit)
            .await
    }

    async fn count_reminders(&self) -> Result<u64, StoreError> {
        self.inner.count_reminders().await
    }

    fn wants_idle_batches(&self) -> bool {
        self.hooks.wants_idle_batches()
    }
}
