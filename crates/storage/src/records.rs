//! Call records: the answers of keyed calls (idempotency keys), kept with
//! their actor so a retry of the same logical call gets the recorded answer
//! instead of running the method again.
//!
//! Records travel inside [`crate::ActorWrite`] (field `records`), so a store
//! writes a call's record in the same atomic, fenced batch as the state
//! changes of the turn that answered it: either both are stored or neither,
//! and a retry after a crash finds the answer exactly when the effects are
//! there. The record's `data` is the runtime's own encoding. Records expire
//! by age: [`crate::StateStore::expire_records`] forgets those recorded
//! before a time, whatever actor they belong to.

use bytes::Bytes;

/// The recorded answer of one keyed call to one actor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRecord {
    /// The caller's idempotency key; unique per actor.
    pub key: String,
    /// Where its retention starts, in milliseconds since the Unix epoch:
    /// when it was recorded, or earlier for a key its caller resends only
    /// for a while, so that it expires then. Stores keep it as given.
    pub recorded_unix_ms: u64,
    pub data: Bytes,
    /// Written only: the caller said it never sent the key before
    /// (`new_key`), and the daemon knew no record of it, so no store holds
    /// one and a store may write the record without looking for an earlier
    /// one first. False asks the store to keep an earlier record's answer.
    /// Records read back say false.
    pub new_key: bool,
}

/// A call record without its answer: what an activation reads, to tell a
/// retry from a new call (the answer is read when a retry asks for it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedKey {
    pub key: String,
    pub recorded_unix_ms: u64,
}
