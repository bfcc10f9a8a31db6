//! Who owns which actor.
//!
//! The runtime asks a [`Placement`] before it activates an actor: only the
//! owner may activate it, which is how the single-activation guarantee is
//! kept. One node needs no coordination ([`SingleNode`]); in a cluster the
//! daemon's view of the replicated placement service answers
//! ([`view::ClusterPlacement`]), computing owners by consistent hashing over
//! the daemons that host a type. The protocol and why it keeps one
//! activation per actor: docs/architecture.md, "Cluster".
//!
//! This crate is the contract and the owner function only: the replicated
//! service (openraft, its storage and gRPC) is `troupe-placement-service`,
//! which the runtime never compiles.
//!
//! - [`ring`]: the owner function (consistent hashing, virtual nodes).
//! - [`table`]: the placement table (members, versions, the change in flight).
//! - [`view`]: [`view::ClusterPlacement`], the daemon's view of the table and
//!   its lease.

pub mod ring;
pub mod table;
pub mod view;

/// The node that owns an actor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// This daemon: activate here.
    Local,
    /// Another daemon, by its address: forward the call there.
    Remote { node: String, address: String },
    /// A table change is moving the actor between daemons: nobody may
    /// activate it until the change completes; calls wait for it.
    Moving,
    /// No daemon in the cluster hosts the actor's type.
    Unplaced,
}

/// The epoch a daemon writes an actor with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerEpoch {
    /// Nothing else can own the actor (a single daemon): writes are not
    /// fenced.
    Unfenced,
    /// This daemon owns it under the table with this version.
    Owned(u64),
    /// Not this daemon's under its current table.
    NotOwned,
}

/// Decides where actors live.
pub trait Placement: Send + Sync + std::fmt::Debug + 'static {
    /// The owner of `(actor_type, actor_id)` under the current table.
    fn owner(&self, actor_type: &str, actor_id: &str) -> Owner;

    /// Version of the placement table the answers come from.
    fn table_version(&self) -> u64;

    /// Whether this daemon may serve actors and write their state now. In a
    /// cluster this is the placement lease: once it lapses, another daemon
    /// may be given this daemon's actors.
    fn may_serve(&self) -> bool {
        true
    }

    /// The owner epoch this daemon writes the actor's state and reminders
    /// with: the version of the current table if this daemon owns the
    /// actor under it (also while handing it off: it is still its own until
    /// the change is promoted). A later owner always owns the actor under a
    /// later table, so stores refuse writes with an older epoch than the
    /// actor's (see `troupe_storage::Epoch`).
    fn epoch(&self, actor_type: &str, actor_id: &str) -> OwnerEpoch {
        let _ = (actor_type, actor_id);
        OwnerEpoch::Unfenced
    }

    /// When this daemon's right to serve ends, in unix milliseconds; `None`
    /// when it does not end (a single daemon). Sent with every turn, so the
    /// app refuses a turn that reaches it later.
    fn lease_end_unix_ms(&self) -> Option<u64> {
        None
    }

    /// Ticks (with the table version) whenever owners may have changed, so
    /// callers waiting on [`Owner::Moving`] look again. `None`: never changes.
    fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }

    /// Every daemon that may own an actor of `actor_type` now: the members
    /// hosting it under the current table and the change in flight, this
    /// daemon as [`Owner::Local`], each other once as [`Owner::Remote`].
    /// Where a type's events are published, for a watch of the whole type.
    fn hosts_of(&self, actor_type: &str) -> Vec<Owner> {
        let _ = actor_type;
        vec![Owner::Local]
    }
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
