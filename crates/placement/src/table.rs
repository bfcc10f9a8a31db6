//! The placement table: the members of the cluster and the versions owners
//! are computed from. The placement service replicates it; every daemon
//! holds the latest one it was sent ([`crate::view::ClusterPlacement`]).

use serde::{Deserialize, Serialize};

/// A daemon in the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Unique per daemon process run.
    pub node: String,
    /// host:port of the daemon's gRPC API.
    pub address: String,
    /// Actor types its apps host.
    pub types: Vec<String>,
    /// Asked to leave. Leavers are absent from the table they leave in, so
    /// they own nothing there; published tables never change after their
    /// version is assigned, so the placement service only sets this in its
    /// own membership, and owners are computed over every listed member.
    pub leaving: bool,
}

/// One version of the table: everything needed to compute owners.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableVersion {
    pub version: u64,
    /// Sorted by node.
    pub members: Vec<Member>,
}

impl TableVersion {
    /// Whether `node` is listed.
    pub fn contains(&self, node: &str) -> bool {
        self.members.iter().any(|m| m.node == node)
    }
}

/// The table daemons serve by, and the change in progress if any.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Table {
    pub current: TableVersion,
    pub next: Option<TableVersion>,
    /// Members of `current` that have not yet reported draining for `next`.
    pub waiting_for: Vec<String>,
}

impl Table {
    /// `(current, next)` versions; `next` is 0 when no change is in flight.
    /// Tables are ordered by this pair: a newer table never has a smaller one.
    pub fn versions(&self) -> (u64, u64) {
        (
            self.current.version,
            self.next.as_ref().map_or(0, |n| n.version),
        )
    }
}
