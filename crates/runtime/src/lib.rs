//! The actor runtime: activation, mailboxes and turns, the state cache and
//! write-behind flushing.
//!
//! A call enters through [`Runtime::invoke`] or [`Runtime::tell`], lands in
//! the actor's bounded mailbox and, one turn at a time, reaches the
//! [`ActorHost`] that registered the actor's type: an app over its gRPC
//! stream (in the binary) or an in-process [`FnHost`]. The host answers with
//! the result and the turn's state changes, which the runtime applies
//! atomically to its cache and hands to the [`StateStore`] in batches.
//! Storage and placement are reached only through their traits.
//!
//! [`StateStore`]: troupe_storage::StateStore

mod activation;
mod config;
mod directory;
mod error;
mod flush;
mod host;
mod hosts;
mod local;
mod metrics;
mod run_queue;
mod runtime;
pub(crate) mod scheduler;
mod slots;
mod types;
pub mod validate;

pub use config::RuntimeConfig;
pub use error::{CallError, ConfigError};
pub use flush::FlushBacklog;
pub use host::{
    ActivateDone, ActivateRequest, ActorHost, DeactivateDone, DeactivateRequest, TurnDone,
    TurnOutcome, TurnRequest,
};
pub use hosts::HostRegistration;
pub use local::FnHost;
pub use runtime::{
    ActivationState, ActorDetails, ActorInfo, ActorRef, Forwarder, Route, Runtime, RuntimeStatus,
    TimerInfo, TypeStatus, MAX_FORWARD_HOPS,
};
pub use scheduler::BoxFuture;
pub use scheduler::{MissedFirings, ReminderInfo, ReminderSpec, RetryPolicy};
pub use types::{
    ActorFailure, ActorId, Call, CallChain, CallExtra, CallTrace, ContentType, DeactivateReason,
    Payload, StateChange, StateMap, StateMode, StateSnapshot, TurnKind, TypeOptions, TypeSpec,
    TRACE_TARGET,
};
