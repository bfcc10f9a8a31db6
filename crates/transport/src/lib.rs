//! Daemon-to-daemon connections.
//!
//! With several daemons, a call that arrives at a daemon not owning the actor
//! is forwarded to the owner. This crate will own those connections: several
//! per peer, message classes on separate channels so a large payload never
//! blocks a small call, and per-actor-pair affinity to keep order. One node
//! needs none of it; for now it only names the message classes the channels
//! are split by, so the runtime and the binary can already speak of them.

/// Traffic classes that get their own channels to a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageClass {
    /// Calls and replies under the small-payload threshold.
    Small,
    /// Calls and replies whose payload passes the threshold.
    Bulk,
    /// Placement, hand-off and membership traffic.
    Control,
}

impl MessageClass {
    /// Payloads from this size on travel on the bulk channel.
    pub const BULK_THRESHOLD: usize = 64 * 1024;

    /// The class of a call carrying `payload_len` bytes.
    pub fn for_payload(payload_len: usize) -> Self {
        if payload_len >= Self::BULK_THRESHOLD {
            Self::Bulk
        } else {
            Self::Small
        }
    }
}
