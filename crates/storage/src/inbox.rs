//! Actor inboxes: durable tells stored before they are acknowledged, and the
//! dead letters they become when every delivery attempt failed.
//!
//! Inbox changes travel inside [`crate::ActorWrite`] (field `inbox`), so a
//! store applies them in the same atomic, fenced batch as the actor's state:
//! the append of a tell is group-committed with other writes, and the
//! removal of a handled tell lands together with the state changes of the
//! turn that handled it (or not at all). The entry's `data` is the runtime's
//! own encoding; a store only keeps it, ordered by `seq` per actor.

use bytes::Bytes;

/// One durable tell waiting in its actor's inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxEntry {
    /// Orders the actor's entries: delivered lowest first. Unique per actor.
    pub seq: u64,
    pub data: Bytes,
}

/// A change to one actor's inbox, applied with the actor's state changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InboxOp {
    /// Stores a tell.
    Append(InboxEntry),
    /// Forgets a handled tell (absent: nothing to do).
    Remove { seq: u64 },
    /// Moves a tell whose deliveries all failed to the dead letters: the
    /// inbox entry (if stored) is removed and the letter stored, together.
    DeadLetter(DeadLetter),
}

/// Which dead letter: its actor and its inbox sequence number.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeadLetterKey {
    pub actor_type: String,
    pub actor_id: String,
    pub seq: u64,
}

/// A tell that was not delivered after its retry policy, kept until an
/// operator re-drives or drops it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub key: DeadLetterKey,
    /// The inbox entry as it was stored.
    pub data: Bytes,
    /// Why the last attempt failed.
    pub error: String,
    pub attempts: u32,
    /// When it was given up on, in milliseconds since the Unix epoch.
    pub failed_unix_ms: u64,
}
