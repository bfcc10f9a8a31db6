//! Durable reminders: records addressed by (actor type, actor id, name) and
//! an index by due time, so the scheduler loads only what is due soon.
//!
//! The record's `data` is the runtime's own encoding (period, payload,
//! retry state); a store only keeps it and orders records by `due_unix_ms`.

use async_trait::async_trait;
use bytes::Bytes;

use crate::StoreError;

/// Which reminder.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReminderKey {
    pub actor_type: String,
    pub actor_id: String,
    pub name: String,
}

/// One stored reminder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReminderRecord {
    pub key: ReminderKey,
    /// When it fires next, in milliseconds since the Unix epoch.
    pub due_unix_ms: u64,
    pub data: Bytes,
}

/// A change to one reminder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReminderOp {
    /// Insert or replace.
    Put(ReminderRecord),
    Delete(ReminderKey),
}

impl ReminderOp {
    pub fn key(&self) -> &ReminderKey {
        match self {
            ReminderOp::Put(record) => &record.key,
            ReminderOp::Delete(key) => key,
        }
    }
}

/// A reminder change with the writer's owner epoch for its actor (fenced
/// like state writes: see [`crate::StateStore`]; `None`: not fenced).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReminderWrite {
    pub op: ReminderOp,
    pub epoch: Option<crate::Epoch>,
}

/// What became of one [`ReminderWrite`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReminderApplied {
    Put,
    /// Whether the reminder existed before.
    Deleted {
        existed: bool,
    },
    /// Refused: a newer owner has written or claimed the actor.
    Fenced,
}

/// Where reminders and alarms live.
#[async_trait]
pub trait ReminderStore: Send + Sync + std::fmt::Debug + 'static {
    /// Applies `writes`, durably once it returns `Ok`, every put before
    /// every delete (a delete queued with a put of the same reminder wins),
    /// except writes refused by their actor's epoch. Returns one answer per
    /// write, in order. Each write is atomic; the batch need not be: after a
    /// crash (or an error) mid-batch, some of its writes, taken in that
    /// order, may stand, each wholly.
    async fn apply_reminders(
        &self,
        writes: &[ReminderWrite],
    ) -> Result<Vec<ReminderApplied>, StoreError>;

    async fn get_reminder(&self, key: &ReminderKey) -> Result<Option<ReminderRecord>, StoreError>;

    /// Reminders due at or before `until_unix_ms`, in due order (ties by
    /// key), strictly after the cursor `after`, at most `limit`.
    async fn due_reminders(
        &self,
        after: Option<(u64, &ReminderKey)>,
        until_unix_ms: u64,
        limit: usize,
    ) -> Result<Vec<ReminderRecord>, StoreError>;

    /// Reminders of a type (and an actor), in key order, after `after`.
    async fn list_reminders(
        &self,
        actor_type: Option<&str>,
        actor_id: Option<&str>,
        after: Option<&ReminderKey>,
        limit: usize,
    ) -> Result<Vec<ReminderRecord>, StoreError>;

    async fn count_reminders(&self) -> Result<u64, StoreError>;

    /// Whether the store has housekeeping that an empty
    /// [`apply_reminders`](Self::apply_reminders) advances (the sled store
    /// removes deleted reminders' records a little per batch). The writer
    /// gives it empty batches while no writes come, until it says no.
    fn wants_idle_batches(&self) -> bool {
        false
    }
}
