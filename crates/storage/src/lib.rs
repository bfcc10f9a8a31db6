//! The contract between the runtime and whatever keeps actor state and
//! reminders between activations.
//!
//! The runtime keeps each active actor's state in memory and hands dirty keys
//! to a [`StateStore`] in batches (write-behind); durable reminders live in a
//! [`ReminderStore`]. This crate owns those traits, the records they move and
//! [`StoreError`], and names no backend: the embedded sled store is
//! `troupe-storage-sled`, the shared PostgreSQL store `troupe-storage-postgres`,
//! so a crate that needs only the contract (the runtime) never compiles a
//! database driver. [`MemoryStore`] and [`MemoryReminders`] keep everything in
//! the process, for tests and benchmarks. A store only sees opaque bytes
//! addressed by (actor type, actor id, key).

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
mod copy;
pub mod export;
pub mod fencing;
mod inbox;
mod memory;
mod records;
mod reminders;

pub use copy::{copy_store, Copied, CopyError, Stores};
pub use inbox::{DeadLetter, DeadLetterKey, InboxEntry, InboxOp};
pub use memory::{MemoryReminders, MemoryStore};
pub use records::{CallRecord, RecordedKey};
pub use reminders::{
    ReminderApplied, ReminderKey, ReminderOp, ReminderRecord, ReminderStore, ReminderWrite,
};

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

/// Every key of one actor's stored state.
pub type StoredState = Vec<(String, Bytes)>;

/// The changes of one actor written by one flush.
#[derive(Debug, Clone)]
pub struct ActorWrite {
    pub actor_type: String,
    pub actor_id: String,
    /// The writer's owner epoch for this actor (see [`Epoch`]); `None`: not
    /// fenced (a single daemon, which nothing else can write beside).
    pub epoch: Option<Epoch>,
    /// `None` deletes the key.
    pub changes: Vec<(String, Option<Bytes>)>,
    /// Inbox appends, removals and dead letters, applied atomically with
    /// `changes` and refused with them when fenced. A batch
    /// never names one `seq` twice for an actor.
    pub inbox: Vec<InboxOp>,
    /// Answers of keyed calls, stored atomically with `changes` and fenced
    /// with them (a key recorded again keeps its first record).
    pub records: Vec<CallRecord>,
}

impl ActorWrite {
    /// Whether the write changes nothing.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty() && self.inbox.is_empty() && self.records.is_empty()
    }
}

/// An owner epoch: a fencing token that orders the daemons that have owned
/// one actor. A daemon writes an actor with the version of the placement
/// table under which it owns it, and a later owner always owns it under a
/// later table, so a store that keeps, per actor, the largest epoch it has
/// seen and refuses any write with a smaller one refuses exactly the writes
/// of owners that lost the actor, however late they arrive.
pub type Epoch = u64;

/// An actor whose write the store refused: a newer owner has written or
/// claimed it (its epoch is past the write's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencedActor {
    pub actor_type: String,
    pub actor_id: String,
    /// The epoch the refused write carried.
    pub epoch: Epoch,
}

/// A backend's own error, kept as the cause of a [`StoreError`] without
/// this crate naming the backend's type. Shared so errors stay cheap to clone.
pub type BackendError = Arc<dyn std::error::Error + Send + Sync>;

/// A storage failure. The message says what failed; the runtime keeps dirty
/// state in memory and retries, so no failure here loses data by itself.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the state store at {path}: {source} (check that the directory is writable and no other troupe daemon uses it)")]
    Open {
        path: String,
        #[source]
        source: BackendError,
    },
    #[error(
        "cannot connect to PostgreSQL at {url}: {reason} (check that the server is running and \
         reachable there, and that the user, password and database in the URL are right)"
    )]
    Connect { url: String, reason: String },
    #[error(
        "invalid PostgreSQL connection URL: {0} (expected \
         postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE)"
    )]
    Config(String),
    #[error("cannot set up the state schema in PostgreSQL at {url}: {reason}")]
    Schema { url: String, reason: String },
    #[error("state store I/O failed: {0}")]
    Io(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// A write refused before it started because the file system under the
    /// store may not have room for it.
    #[error(
        "not enough free space for a write to the state store at {path}: {available} bytes \
         available, {needed} needed (No space left on device); free space on that file system \
         and the write goes through by itself at its next retry"
    )]
    NoSpace {
        path: String,
        available: u64,
        needed: u64,
    },
    /// A claim with an epoch older than the actor's: another daemon owns it
    /// now.
    #[error(
        "actor {actor_type}/{actor_id} is owned under a newer placement table than {epoch}: \
         another daemon owns it now (this daemon's table is behind; the call is retried there)"
    )]
    Fenced {
        actor_type: String,
        actor_id: String,
        epoch: Epoch,
    },
}

/// What [`StateStore::purge_actor`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PurgedActor {
    pub state_keys: u64,
    pub inbox_entries: u64,
    pub dead_letters: u64,
    pub call_records: u64,
}

impl PurgedActor {
    /// Whether there was nothing to remove.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Where actor state lives between activations.
///
/// `write_batch` must apply each actor's write atomically (its state
/// changes, inbox operations and call records all or none) and the whole
/// batch durably before it returns: the runtime answers `durable` calls
/// once it has. A batch cut short by a crash may have applied some actors'
/// writes and not others; nothing of it was acknowledged yet, and every
/// write is one an actor may see again (the flusher writes a failed batch
/// again), so a store is free to apply actors one at a time.
///
/// Fencing: a store keeps, per actor, the largest [`Epoch`] it was written
/// or claimed with, and refuses writes with a smaller one, checking and
/// writing atomically (in PostgreSQL, in one transaction), so a write held
/// by a paused daemon cannot land after a newer owner read the state.
/// Writes and claims without an epoch are neither checked nor recorded.
#[async_trait]
pub trait StateStore: Send + Sync + std::fmt::Debug + 'static {
    /// A short description for status output, e.g. `sled:/var/lib/troupe`.
    fn describe(&self) -> String;

    /// The bytes the store takes on disk, for status output, when it can
    /// tell without a scan; `None` when it cannot (a shared database, or
    /// memory).
    async fn size_on_disk(&self) -> Option<u64> {
        None
    }

    /// Reads every key of one actor's state (inspection; no claim).
    async fn load(&self, actor_type: &str, actor_id: &str) -> Result<StoredState, StoreError>;

    /// Raises the actor's epoch to `epoch` and then reads its state, as an
    /// activation does: no write with an older epoch can land after this
    /// read. [`StoreError::Fenced`] when the actor's epoch is already newer.
    async fn claim(
        &self,
        actor_type: &str,
        actor_id: &str,
        epoch: Epoch,
    ) -> Result<StoredState, StoreError>;

    /// Writes the changes of several actors durably, each actor's
    /// atomically, except the actors whose epoch is newer than their
    /// write's: those are left as they were and returned.
    async fn write_batch(&self, batch: &[ActorWrite]) -> Result<Vec<FencedActor>, StoreError>;

    /// Lists ids of actors of a type that have stored state, in id order,
    /// starting after `after`.
    async fn list_actors(
        &self,
        actor_type: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError>;

    /// The actor's inbox, lowest `seq` first.
    async fn load_inbox(
        &self,
        actor_type: &str,
        actor_id: &str,
    ) -> Result<Vec<InboxEntry>, StoreError>;

    /// Actors with at least one inbox entry, in (type, id) order, after
    /// `after`: the ones to activate after a restart or a hand-off.
    async fn inbox_actors(
        &self,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError>;

    /// Every actor this store holds anything of (state, inbox entries, dead
    /// letters or call records), each once, in the store's own order, after
    /// `after` (the last actor of the page before): what a copy of the whole
    /// store walks.
    async fn stored_actors(
        &self,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError>;

    /// Everything stored for each of `actors` but its dead letters (state,
    /// inbox entries, call records), as the unfenced write that recreates
    /// it, in the order given: what a copy of the whole store reads, a page
    /// of [`StateStore::stored_actors`] at a time. The default reads actor
    /// by actor ([`export::one_by_one`]); a database answers in a few
    /// queries.
    async fn export_actors(
        &self,
        actors: &[(String, String)],
    ) -> Result<Vec<ActorWrite>, StoreError> {
        export::one_by_one(self, actors).await
    }

    /// Dead letters (of one type when `actor_type` is set), in key order,
    /// after `after`.
    async fn list_dead_letters(
        &self,
        actor_type: Option<&str>,
        after: Option<&DeadLetterKey>,
        limit: usize,
    ) -> Result<Vec<DeadLetter>, StoreError>;

    async fn get_dead_letter(&self, key: &DeadLetterKey) -> Result<Option<DeadLetter>, StoreError>;

    /// Forgets a dead letter; whether it existed.
    async fn remove_dead_letter(&self, key: &DeadLetterKey) -> Result<bool, StoreError>;

    /// The keys of the actor's `limit` most recent call records among those
    /// recorded at or after `since_unix_ms`, in no particular order, without
    /// their answers.
    async fn load_record_keys(
        &self,
        actor_type: &str,
        actor_id: &str,
        since_unix_ms: u64,
        limit: usize,
    ) -> Result<Vec<RecordedKey>, StoreError>;

    /// One call record of the actor, by key.
    async fn load_record(
        &self,
        actor_type: &str,
        actor_id: &str,
        key: &str,
    ) -> Result<Option<CallRecord>, StoreError>;

    /// Removes everything stored for one actor except its reminders (which
    /// live in the [`ReminderStore`]): every state key, inbox entry, dead
    /// letter and call record, atomically, and says how many of each went
    /// (an operator's erasure of an actor; the runtime holds its activation
    /// off meanwhile). Fenced as a write with `epoch` is: refused with
    /// [`StoreError::Fenced`], removing nothing, when the actor's epoch is
    /// newer; the actor's epoch itself is kept, so an older owner's write
    /// stays refused. Purging an actor with nothing stored is not an error.
    async fn purge_actor(
        &self,
        actor_type: &str,
        actor_id: &str,
        epoch: Option<Epoch>,
    ) -> Result<PurgedActor, StoreError>;

    /// Forgets up to `limit` call records (of any actor) recorded before
    /// `before_unix_ms`; returns how many went. Not fenced: an expired
    /// record is no one's to keep.
    async fn expire_records(&self, before_unix_ms: u64, limit: usize) -> Result<u64, StoreError>;
}
