//! Errors a caller of the runtime can see. Each maps to one gRPC status in
//! the binary; each message says what was wrong and what to do. Causes that
//! callers act on differently are variants of their own, so code (and
//! tests) match on types, never on message text.

use std::time::Duration;

use troupe_storage::StoreError;

use crate::types::{ActorFailure, ActorId};

#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// No app has registered the actor type.
    #[error("no app hosts actor type '{actor_type}'; registered types: [{}]. Start an app that registers it, or check the type name", registered.join(", "))]
    UnknownType {
        actor_type: String,
        registered: Vec<String>,
    },
    #[error("{0}")]
    InvalidArgument(String),
    /// A bound was reached (mailbox, pending calls).
    #[error("{0}")]
    Overloaded(String),
    /// The hosting app or the daemon cannot serve the call now; retrying
    /// later (or against another daemon) may work.
    #[error(transparent)]
    Unavailable(#[from] Unavailable),
    #[error("{0}")]
    DeadlineExceeded(String),
    /// A turn ran past its type's turn timeout: its caller is answered, its
    /// place under the bounds freed, and the actor deactivated.
    #[error(
        "the turn of {actor} ran past its type's turn timeout ({limit:?}); the actor was \
         deactivated and its app told. Make the handler return sooner, or raise the type's \
         turn_timeout"
    )]
    TurnTimedOut { actor: ActorId, limit: Duration },
    /// The actor code raised.
    #[error("actor raised {0}")]
    Actor(ActorFailure),
    /// The call does not fit the actor's current condition (e.g. a timer
    /// for an actor that is not active).
    #[error("{0}")]
    FailedPrecondition(String),
    /// What was asked for does not exist (e.g. a reminder).
    #[error("{0}")]
    NotFound(String),
    #[error("internal error: {0}")]
    Internal(String),
}

/// Why a call cannot be served now.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unavailable {
    /// SIGTERM (or [`Runtime::shutdown`](crate::Runtime::shutdown)) began:
    /// new calls are refused while the actors drain.
    #[error("the daemon is shutting down; retry after it restarts or against another daemon")]
    ShuttingDown,
    /// The placement lease lapsed: another daemon may own this daemon's
    /// actors now, so it serves none until it rejoins.
    #[error(
        "this daemon lost its placement lease (it cannot reach the placement service), so it \
         serves no actors until it rejoins; retry, or call another daemon"
    )]
    LeaseLapsed,
    /// The store refused this daemon's write or claim for the actor: a
    /// newer owner has it (this daemon lost it while paused or cut off, or
    /// routed by an old table). Its activation here was dropped.
    #[error(
        "actor {actor} is owned by another daemon now (the store refused this daemon's write as \
         older than the new owner's); the change was not stored; retry: the call goes to the \
         owner"
    )]
    Fenced { actor: ActorId },
    /// A placement change is moving the actor and did not finish in time.
    #[error(
        "actor {actor} is moving between daemons and the placement change did not finish in \
         time; retry"
    )]
    Moving { actor: ActorId },
    /// Another daemon owns the actor and this one cannot forward to it.
    #[error("actor {actor} is owned by daemon {node} ({address}); call that daemon")]
    NotOwner {
        actor: ActorId,
        node: String,
        address: String,
    },
    /// Daemons disagree on the placement table.
    #[error(
        "actor {actor} was forwarded {hops} times without reaching its owner (daemons disagree \
         on the placement table); retry"
    )]
    TooManyHops { actor: ActorId, hops: u32 },
    /// The type is known, but no app hosting it connected in time.
    #[error(
        "no connected app hosts actor type '{actor_type}' (waited {waited:?}); start or restart \
         the app that registers it"
    )]
    NoHost {
        actor_type: String,
        waited: Duration,
    },
    /// The app hosting the actor went away while it had the work.
    #[error("{0}")]
    HostGone(HostGone),
    /// The state or reminder store failed.
    #[error("{what}: {source}; {remedy}")]
    Store {
        /// What the runtime was doing.
        what: String,
        #[source]
        source: StoreError,
        /// What happens now, and what the caller may do.
        remedy: &'static str,
    },
    /// The call was dropped without an answer (its activation ended).
    #[error("the call to {actor} was dropped before it finished; retry it")]
    Dropped { actor: ActorId },
    /// The daemon that owns the actor cannot be reached.
    #[error(
        "the daemon that owns {actor} is unreachable: {reason}; retry (placement moves its \
         actors to other daemons once it is gone)"
    )]
    OwnerUnreachable { actor: String, reason: String },
    /// Another daemon answered UNAVAILABLE; its message as it came.
    #[error("{message}")]
    Remote { message: String },
}

/// What the app had when it went away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HostGone {
    #[error("the app hosting the actor went away during activation; retry the call")]
    DuringActivation,
    #[error(
        "the app hosting the actor disconnected before the turn finished; the call may or may \
         not have run"
    )]
    DuringTurn,
}

impl Unavailable {
    /// A store failure while doing `what`.
    pub fn store(what: impl Into<String>, source: StoreError) -> Self {
        Self::Store {
            what: what.into(),
            source,
            remedy: "retry later",
        }
    }
}

/// Invalid runtime configuration, reported before anything starts.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("invalid runtime configuration: {0}")]
pub struct ConfigError(pub String);
