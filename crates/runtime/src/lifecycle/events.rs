//! The activation log: one line when an activation starts serving and one
//! when it stops, under target `troupe::activation`, so a checker can read
//! every daemon's log and prove no actor was live in two places at once.
//! Written here, where the lifecycle decides, so every way an activation
//! ends (deactivation, its app leaving, fencing) logs its end exactly once.

use tracing::info;

use crate::clock::unix_now_ms;
use crate::types::{ActorId, DeactivateReason};

/// The log target the single-activation checker reads.
pub const ACTIVATION_LOG: &str = "troupe::activation";

/// How an activation ended, as the log names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Its host answered the deactivation.
    Deactivated(DeactivateReason),
    /// Its host went away.
    AppDetached,
}

impl Ended {
    fn as_str(self) -> &'static str {
        match self {
            Ended::Deactivated(reason) => reason.as_str(),
            Ended::AppDetached => "app_detached",
        }
    }
}

/// The host confirmed the activation: it serves turns from now on.
pub(crate) fn activated(node: &str, actor: &ActorId) {
    info!(
        target: ACTIVATION_LOG,
        event = "activated",
        actor = %actor,
        node = %node,
        unix_ms = unix_now_ms(),
    );
}

/// The activation serves nothing any more.
pub(crate) fn ended(node: &str, actor: &ActorId, how: Ended) {
    deactivated(node, actor, how.as_str(), unix_now_ms());
}

pub(crate) fn deactivated(node: &str, actor: &ActorId, reason: &str, unix_ms: u64) {
    info!(
        target: ACTIVATION_LOG,
        event = "deactivated",
        reason,
        actor = %actor,
        node = %node,
        unix_ms,
    );
}

/// The daemon's placement lease ended at `unix_ms`: it served nothing since.
pub(crate) fn lease_lapsed(node: &str, unix_ms: u64) {
    info!(
        target: ACTIVATION_LOG,
        event = "lease_lapsed",
        node = %node,
        unix_ms,
    );
}
