//! What a durable tell carries through the mailbox and its turn: plain
//! data, apart from the inbox's logic, so that activations and hosts can
//! hold it without depending on the module that reaches the runtime's
//! shared state (scripts/module-cycles).

use bytes::Bytes;

use super::stats::Held;
use crate::reply::Reply;

/// Which inbox entry a turn delivers.
#[derive(Debug, Clone)]
pub(crate) struct InboxDelivery {
    /// 0 until sequenced.
    pub(crate) seq: u64,
    /// Failed attempts so far.
    pub(crate) attempts: u32,
    /// The stored entry (kept for a dead letter).
    pub(crate) data: Bytes,
    /// A failed delivery waiting out its backoff: until then neither it nor
    /// any durable tell behind it runs (order holds), other calls do.
    pub(crate) backoff_until: Option<tokio::time::Instant>,
    /// Counts it in its type's inbox depth while it lives; set once it is
    /// sequenced or read from the store.
    pub(crate) held: Option<Held>,
}

impl InboxTag {
    /// Whether this delivery waits out a retry backoff at `now`.
    pub(crate) fn in_backoff(&self, now: tokio::time::Instant) -> bool {
        self.delivery.backoff_until.is_some_and(|t| t > now)
    }
}

/// A durable tell's envelope tag.
#[derive(Debug)]
pub(crate) struct InboxTag {
    pub(crate) delivery: InboxDelivery,
    /// The caller's acknowledgement, until it is held for the batch that
    /// stores the append.
    pub(crate) ack: Option<Reply>,
}
