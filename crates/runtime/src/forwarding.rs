//! The seam to other daemons: every per-actor request as one type, its
//! answer, and the trait the binary implements over its transport to carry
//! a request to the daemon that owns the actor. `routing` decides when.

use std::time::Duration;

use bytes::Bytes;

use crate::error::{CallError, Unavailable};
use crate::schedule::timers::TimerSpec;
use crate::schedule::{AlarmSpec, ReminderInfo, ReminderSpec};
use crate::types::{ActorId, BoxFuture, Call, Payload};
use crate::watch::{Cursor, Polled, TypeFrom, WatchedType};

/// Another daemon, as the placement table names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub node: String,
    /// host:port of its API.
    pub address: String,
}

impl Peer {
    /// This daemon has no link to the peer (it runs alone).
    pub(crate) fn unreachable(&self) -> CallError {
        Unavailable::PeerUnreachable {
            node: self.node.clone(),
            address: self.address.clone(),
        }
        .into()
    }
}

/// A request about one actor, which any daemon may receive: answered by the
/// daemon that owns the actor, forwarded there by any other.
#[derive(Debug, Clone)]
pub enum ActorRequest {
    Invoke(Call),
    Tell(Call),
    /// A tell stored in the actor's inbox before it is acknowledged
    /// (docs/delivery.md): the owner answers once its append is stored.
    TellDurable(Call),
    /// A durable tell to store now and deliver once `delay` has passed
    /// (`delayed_tell`); its call always carries an idempotency key.
    TellLater {
        call: Call,
        delay: std::time::Duration,
    },
    GetState {
        actor: ActorId,
        keys: Vec<String>,
    },
    SetReminder(ReminderSpec),
    GetReminder {
        actor: ActorId,
        name: String,
    },
    DeleteReminder {
        actor: ActorId,
        name: String,
    },
    /// Holds a reminder's firings until it is resumed.
    PauseReminder {
        actor: ActorId,
        name: String,
    },
    ResumeReminder {
        actor: ActorId,
        name: String,
    },
    SetAlarm(AlarmSpec),
    GetAlarm {
        actor: ActorId,
    },
    DeleteAlarm {
        actor: ActorId,
    },
    SetTimer(TimerSpec),
    DeleteTimer {
        actor: ActorId,
        name: String,
    },
    /// A watcher's long poll for the actor's events (`watch`): those after
    /// `after` (`None`: a position to watch from), or the first published
    /// within `wait`.
    PollEvents {
        actor: ActorId,
        after: Option<Cursor>,
        wait: Duration,
    },
}

impl ActorRequest {
    /// The actor the request is about; its owner answers.
    pub fn actor(&self) -> &ActorId {
        match self {
            Self::Invoke(call)
            | Self::Tell(call)
            | Self::TellDurable(call)
            | Self::TellLater { call, .. } => &call.actor,
            Self::SetReminder(spec) => &spec.actor,
            Self::SetAlarm(spec) => &spec.actor,
            Self::SetTimer(spec) => &spec.actor,
            Self::GetState { actor, .. }
            | Self::GetReminder { actor, .. }
            | Self::DeleteReminder { actor, .. }
            | Self::PauseReminder { actor, .. }
            | Self::ResumeReminder { actor, .. }
            | Self::GetAlarm { actor }
            | Self::DeleteAlarm { actor }
            | Self::DeleteTimer { actor, .. }
            | Self::PollEvents { actor, .. } => actor,
        }
    }
}

impl ActorRequest {
    /// The call, for the requests that are calls.
    pub fn call(&self) -> Option<&Call> {
        match self {
            Self::Invoke(call)
            | Self::Tell(call)
            | Self::TellDurable(call)
            | Self::TellLater { call, .. } => Some(call),
            _ => None,
        }
    }

    pub fn call_mut(&mut self) -> Option<&mut Call> {
        match self {
            Self::Invoke(call)
            | Self::Tell(call)
            | Self::TellDurable(call)
            | Self::TellLater { call, .. } => Some(call),
            _ => None,
        }
    }
}

/// The answer to an [`ActorRequest`].
#[derive(Debug, Clone, PartialEq)]
pub enum ActorResponse {
    /// An invoked method's result.
    Payload(Payload),
    /// A tell was queued; a timer was started.
    Accepted,
    /// A delayed tell was stored, to be delivered then (by the owner's
    /// clock; for a retry, the time of the one that waits already).
    TellScheduled { due_unix_ms: u64 },
    /// The state read (sorted by key), whether the actor is active, and
    /// when those of the keys read that expire do (unix ms).
    State {
        entries: Vec<(String, Bytes)>,
        active: bool,
        expires: Box<[(String, u64)]>,
    },
    /// The reminder or alarm set or read; `None`: there is none. Boxed: it
    /// is several times the size of every other answer, which are moved
    /// once per call.
    Reminder(Option<Box<ReminderInfo>>),
    /// Whether there was a reminder, alarm or timer to delete.
    Deleted(bool),
    /// A poll's events. Boxed, as `Reminder`.
    Events(Box<Polled>),
}

impl ActorResponse {
    /// Another variant than the request's: a peer broke the protocol.
    pub(crate) fn unexpected(self, wanted: &str) -> CallError {
        CallError::Internal(format!("expected {wanted} in answer, got {self:?}"))
    }
}

/// What travels with a request besides its body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestContext {
    /// How long the caller waits; `None`: the daemon's call timeout.
    pub timeout: Option<Duration>,
    /// Times the request was forwarded between daemons (when handed to a
    /// [`Forwarder`], this forward included).
    pub hops: u32,
    /// The caller's W3C trace context, passed on unchanged for requests
    /// that are not calls (calls carry their trace in their extra).
    pub traceparent: String,
    pub tracestate: String,
}

impl RequestContext {
    /// The context a call carries itself.
    pub fn of_call(call: &Call) -> Self {
        Self {
            timeout: call.timeout,
            hops: call.extra.as_ref().map_or(0, |e| e.hops),
            ..Self::default()
        }
    }
}

/// Carries requests to the daemon that owns their actor. The binary
/// implements it over `crates/transport`; the runtime only knows the owner.
pub trait Forwarder: Send + Sync + std::fmt::Debug + 'static {
    /// Has `owner` answer `request`; its answer (or error) is the answer.
    fn forward(
        &self,
        owner: &Peer,
        request: ActorRequest,
        context: RequestContext,
    ) -> BoxFuture<Result<ActorResponse, CallError>>;

    /// Has `host` answer one long poll of the events of the actors of a
    /// type it runs that `watched` wants (`Runtime::poll_type_events`):
    /// from `from` on, waiting up to `wait`.
    fn poll_type_events(
        &self,
        host: &Peer,
        watched: &WatchedType,
        from: &TypeFrom,
        wait: Duration,
    ) -> BoxFuture<Result<Polled, CallError>> {
        let _ = (watched, from, wait);
        let unreachable = host.unreachable();
        Box::pin(async move { Err(unreachable) })
    }
}
