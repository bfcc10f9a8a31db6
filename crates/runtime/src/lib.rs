//! The actor runtime: activation, mailboxes and turns, the state cache and
//! write-behind flushing, reminders, alarms and timers.
//!
//! A call enters through [`Runtime::invoke`] or [`Runtime::tell`], lands in
//! the actor's bounded mailbox and, one turn at a time, reaches the
//! [`ActorHost`] that registered the actor's type: an app over its gRPC
//! stream (in the binary) or an in-process [`FnHost`]. The host answers with
//! the result and the turn's state changes, which the runtime applies
//! atomically to its cache and hands to the [`StateStore`] in batches.
//! Storage and placement are reached only through their traits.
//!
//! The module map is in `runtime.rs`; docs/architecture.md follows a call,
//! a state change and a reminder through it.
//!
//! [`StateStore`]: troupe_storage::StateStore

mod activation;
mod advance;
mod chain_token;
pub mod clock;
mod config;
mod delayed_tell;
mod directory;
mod dispatch;
mod error;
mod expiry;
mod flush;
mod fn_host;
mod forwarding;
mod host;
mod host_registry;
mod idempotency;
mod inbox;
pub mod input;
mod inspect;
mod lifecycle;
mod load_shedding;
mod mailbox;
mod memory_gate;
mod metrics;
mod reply;
mod retention;
mod routing;
mod runtime;
mod schedule;
mod scheduling;
mod shards;
mod shared;
mod shutdown;
mod state_read;
mod timer_turns;
mod turn;
mod types;
pub mod validate;
mod watch;

pub use advance::Advanced;
pub use config::RuntimeConfig;
pub use delayed_tell::{tell_reminder_name, DelayedTell, TELL_PREFIX};
pub use dispatch::ActorRef;
pub use error::{
    AppWork, CallError, ChainRefused, ConfigError, HostGone, MemoryPressure, MessageBound,
    TooLargeForApp, Unavailable,
};
pub use expiry::{is_expiry_key, EXPIRES_KEY, EXPIRE_NAME, MIN_TTL_MS};
pub use flush::FlushBacklog;
pub use fn_host::FnHost;
pub use forwarding::{ActorRequest, ActorResponse, Forwarder, Peer, RequestContext};
pub use host::{
    ActivateDone, ActivateRequest, ActorHost, DeactivateDone, DeactivateRequest, TurnDone,
    TurnOutcome, TurnRequest,
};
pub use host_registry::HostRegistration;
pub use inbox::stats::DeliveryCounts;
pub use inbox::status::{DeadLetterCount, DeliveryStatus, InboxRetry, DEAD_LETTERS_COUNTED};
pub use inbox::DeadLetterInfo;
pub use inspect::{
    ActivationState, ActorDetails, ActorInfo, EventsHeld, MemoryBounds, RuntimeStatus, TypeStatus,
};
pub use lifecycle::edit_state::EditedState;
pub use lifecycle::events::ACTIVATION_LOG;
pub use lifecycle::purge::Purged;
pub use memory_gate::{MemoryGateStatus, MemoryShedding, MemoryTransition};
pub use retention::RETAIN_NAME;
pub use routing::MAX_FORWARD_HOPS;
pub use runtime::Runtime;
pub use schedule::timers::{TimerInfo, TimerSpec};
pub use schedule::{
    jitter_delay, AlarmSpec, CronSchedule, MissedFirings, ReminderInfo, ReminderSpec, RetryPolicy,
    ALARM_NAME,
};
pub use shutdown::{ShutdownReport, UnwrittenState};
pub use types::{
    ActorFailure, ActorId, BoxFuture, Call, CallChain, CallExtra, CallTrace, ChainToken,
    ContentType, DeactivateReason, FailureKind, Payload, StateChange, StateMap, StateMode,
    StateSnapshot, TurnKind, TypeOptions, TypeSpec, TRACE_TARGET,
};
pub use watch::poll::{MAX_POLL_WAIT, POLL_SLACK};
pub use watch::{
    BadCursor, Cursor, EventTrace, Polled, TypeFrom, WatchedEvent, WatchedType, HELD_BYTES,
    HELD_BYTES_PER_ACTOR, HELD_EVENTS, KEPT_AFTER_LAST_POLL, MAX_EVENTS_PER_TURN,
};
