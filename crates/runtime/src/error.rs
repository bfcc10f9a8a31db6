//! Errors a caller of the runtime can see. Each maps to one gRPC status in
//! the binary; each message says what was wrong and what to do.

use crate::types::ActorFailure;

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
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
    /// The hosting app or the daemon cannot serve the call now; retrying later may work.
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    DeadlineExceeded(String),
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

/// Invalid runtime configuration, reported before anything starts.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("invalid runtime configuration: {0}")]
pub struct ConfigError(pub String);
