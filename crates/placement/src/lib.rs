//! Who owns which actor.
//!
//! The runtime asks a [`Placement`] before it activates an actor: only the
//! owner may activate it, which is how the single-activation guarantee is
//! kept. One node needs no coordination ([`SingleNode`]); the replicated
//! placement service (Raft through openraft) and consistent hashing over the
//! daemons that host a type arrive with the cluster work and implement the
//! same trait.

/// The node that owns an actor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// This daemon: activate here.
    Local,
    /// Another daemon, by its transport address: forward the call there.
    Remote { node: String, address: String },
}

/// Decides where actors live.
pub trait Placement: Send + Sync + std::fmt::Debug + 'static {
    /// The owner of `(actor_type, actor_id)` under the current table.
    fn owner(&self, actor_type: &str, actor_id: &str) -> Owner;

    /// Version of the placement table the answers come from.
    fn table_version(&self) -> u64;
}

/// One daemon owns every actor.
#[derive(Debug, Default, Clone, Copy)]
pub struct SingleNode;

impl Placement for SingleNode {
    fn owner(&self, _actor_type: &str, _actor_id: &str) -> Owner {
        Owner::Local
    }

    fn table_version(&self) -> u64 {
        1
    }
}
