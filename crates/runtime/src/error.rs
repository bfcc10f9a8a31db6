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
    #[error("no app hosts actor type '{actor_type}'; registered types: [{}]. Start an app that registers it, or check the type name", abridged_list(registered, 10))]
    UnknownType {
        actor_type: String,
        registered: Vec<String>,
    },
    #[error("{0}")]
    InvalidArgument(String),
    /// A bound was reached (mailbox, pending calls, a peer's send queue):
    /// the call was refused before it ran, so resending it later is safe
    /// ([`CallError::retry_after`]).
    #[error("{0}")]
    Overloaded(String),
    /// A message is larger than a limit allows (an actor's reply past
    /// `--max-payload-bytes`, or another daemon's size refusal). The work
    /// may have run; resending the same message fails the same way.
    #[error("{0}")]
    TooLarge(String),
    /// Another daemon refused the forwarded call before it ran, and said
    /// how long to wait at least before resending it: its refusal, kept
    /// as it came so the caller gets the same advice.
    #[error("{message}")]
    RemoteOverloaded {
        message: String,
        retry_after: Duration,
    },
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
    /// Work for the actor does not fit in one message to the app hosting
    /// it. Only this work fails; the app stays attached. Boxed: it is rare,
    /// and every `Result<_, CallError>` would otherwise carry its size.
    #[error(transparent)]
    TooLargeForApp(Box<TooLargeForApp>),
    /// The daemon's memory is near its limit: it refuses new work until it
    /// falls back (`memory_gate`). RESOURCE_EXHAUSTED.
    #[error(transparent)]
    MemoryPressure(MemoryPressure),
    /// The actor code raised.
    #[error("actor raised {0}")]
    Actor(ActorFailure),
    /// The call does not fit the actor's current condition (e.g. a timer
    /// for an actor that is not active).
    #[error("{0}")]
    FailedPrecondition(String),
    /// The call carries a chain this daemon did not issue to a running
    /// turn (FAILED_PRECONDITION): it was refused, and ran nowhere.
    #[error(transparent)]
    ChainRefused(#[from] ChainRefused),
    /// A state edit's expectation did not hold: a key changed since the
    /// caller read it. Nothing changed (ABORTED); read it again and decide
    /// anew.
    #[error("{0}")]
    Conflict(String),
    /// What was asked for does not exist (e.g. a reminder).
    #[error("{0}")]
    NotFound(String),
    #[error("internal error: {0}")]
    Internal(String),
}

/// The least pause before resending a call refused for a bound: queues
/// and mailboxes drain as turns end, within milliseconds.
pub const OVERLOADED_RETRY_AFTER: Duration = Duration::from_millis(100);
/// The least pause before resending a call refused for memory: the gate
/// reads memory every 100 ms, and what was in flight when it closed takes
/// about a second to drain and flush.
pub const MEMORY_PRESSURE_RETRY_AFTER: Duration = Duration::from_millis(500);

impl CallError {
    /// For a refusal that ran nothing, how long a caller should wait at
    /// least before sending the same call again; `None` for every other
    /// error, where a resend would fail alike or could run the work twice.
    /// The binary sends it as gRPC's retry pushback, which the SDKs honour.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            CallError::Overloaded(_) => Some(OVERLOADED_RETRY_AFTER),
            CallError::MemoryPressure(_) => Some(MEMORY_PRESSURE_RETRY_AFTER),
            CallError::RemoteOverloaded { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }
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
    /// Another daemon has what was asked for (a type's events) and this
    /// one has no link to it.
    #[error(
        "daemon {node} ({address}) has part of what was asked for, and this daemon cannot reach \
         it (it has no links to other daemons); ask through that daemon"
    )]
    PeerUnreachable { node: String, address: String },
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

/// Why new work was refused for memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the daemon is shedding load: its resident memory ({:.1} MiB) reached {percent}% of its \
     memory limit ({:.1} MiB), so it refuses new calls until that falls below \
     {resume_percent}%. Retry with backoff; if it lasts, raise the daemon's memory limit or \
     have it keep less (--sled-cache-bytes, --idempotency-retention, --max-activations), or \
     turn shedding off with --memory-shed-percent 0",
    mib(*resident_bytes),
    mib(*limit_bytes)
)]
pub struct MemoryPressure {
    pub resident_bytes: u64,
    pub limit_bytes: u64,
    pub percent: u8,
    pub resume_percent: u8,
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// Work the daemon did not send to an app because the one message holding
/// it would have been larger than `limit`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{} is {bytes} bytes in one message, more than {}; {}", self.what(), self.bound_text(), self.remedy())]
pub struct TooLargeForApp {
    pub actor: ActorId,
    pub work: AppWork,
    /// The encoded message.
    pub bytes: usize,
    pub limit: usize,
    /// Which side's limit it is.
    pub bound: MessageBound,
    /// The app's name, as it registered.
    pub app: String,
}

/// What did not fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppWork {
    /// A turn: a call's method, or the reminder or timer it fires.
    Turn { name: String },
    /// An activation: the message carries the actor's stored state.
    Activation,
}

/// Whose limit a message to an app went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageBound {
    /// The app's own receive limit (`Register.max_receive_bytes`).
    App,
    /// The most the daemon sends in one message: twice
    /// `--max-payload-bytes` plus room for framing.
    Daemon,
}

impl TooLargeForApp {
    fn what(&self) -> String {
        match &self.work {
            AppWork::Turn { name } => format!("the turn '{name}' of {}", self.actor),
            AppWork::Activation => format!("activating {} (with its stored state)", self.actor),
        }
    }

    fn bound_text(&self) -> String {
        match self.bound {
            MessageBound::App => format!(
                "app '{}' receives ({} bytes, the max_receive_bytes it registered with)",
                self.app, self.limit
            ),
            MessageBound::Daemon => format!(
                "the daemon sends to an app ({} bytes: twice --max-payload-bytes plus 64 KiB)",
                self.limit
            ),
        }
    }

    fn remedy(&self) -> &'static str {
        match (self.bound, &self.work) {
            (MessageBound::App, AppWork::Turn { .. }) => {
                "raise the app's receive limit (the App option max_receive_bytes, \
                 maxReceiveBytes in TypeScript) or send a smaller payload"
            }
            (MessageBound::App, AppWork::Activation) => {
                "raise the app's receive limit (the App option max_receive_bytes, \
                 maxReceiveBytes in TypeScript): the actor cannot activate on that app until its \
                 state fits"
            }
            (MessageBound::Daemon, AppWork::Turn { .. }) => {
                "send a smaller payload or less metadata, or raise the daemon's \
                 --max-payload-bytes"
            }
            (MessageBound::Daemon, AppWork::Activation) => {
                "raise the daemon's --max-payload-bytes: the actor cannot activate until its \
                 state fits in one message"
            }
        }
    }
}

impl From<TooLargeForApp> for CallError {
    fn from(error: TooLargeForApp) -> Self {
        Self::TooLargeForApp(Box::new(error))
    }
}

/// Why a call's chain was not honoured. A chain lets a call run nested in
/// the turn of an actor on it, so the daemon honours only the chain it
/// issued to a turn that still runs; `chain` is the chain's id and actors
/// (never its token).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainRefused {
    #[error(
        "call chain {chain} has no token: the daemon honours only a chain it issued to a running \
         turn. From inside a turn pass the turn's chain unchanged (the SDKs do); from outside a \
         turn send no chain"
    )]
    NoToken { chain: String },
    #[error(
        "call chain {chain} was not issued by this daemon: its token does not verify (made up, \
         altered, or issued by another daemon or before a restart). Pass a turn's chain \
         unchanged, to the daemon that sent the turn; from outside a turn send no chain"
    )]
    NotIssued { chain: String },
    #[error(
        "call chain {chain} was issued to a turn that has ended; a chain is valid only while \
         its turn runs. Make the call before the turn returns (await it), or send it without a \
         chain as a call of its own"
    )]
    TurnEnded { chain: String },
}

impl ChainRefused {
    /// A short label, for logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NoToken { .. } => "no_token",
            Self::NotIssued { .. } => "not_issued",
            Self::TurnEnded { .. } => "turn_ended",
        }
    }
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

/// Quotes `text` for an error message, cut after `max` characters with its
/// length said. Status messages travel in an HTTP/2 header: one that
/// repeats a caller's input whole can outgrow the header limit, and the
/// caller then sees a protocol error instead of what was wrong.
pub fn abridged(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => format!("{text:?}"),
        Some((cut, _)) => format!("{:?}… ({} bytes)", &text[..cut], text.len()),
    }
}

/// `text` as it is, or cut after `max` characters with its length said:
/// for names already known to be printable, where [`abridged`]'s quotes
/// would only add noise.
pub fn shortened(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(max) {
        None => std::borrow::Cow::Borrowed(text),
        Some((cut, _)) => format!("{}… ({} bytes)", &text[..cut], text.len()).into(),
    }
}

/// `items` joined for a message, at most `max` of them and how many more.
pub fn abridged_list(items: &[String], max: usize) -> String {
    let shown: Vec<&str> = items.iter().take(max).map(String::as_str).collect();
    match items.len().saturating_sub(max) {
        0 => shown.join(", "),
        more => format!("{}, and {more} more", shown.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_large_for_app_says_both_sizes_whose_limit_and_what_to_raise() {
        let cases = [
            (
                AppWork::Turn {
                    name: "echo".into(),
                },
                MessageBound::App,
                "max_receive_bytes",
            ),
            (AppWork::Activation, MessageBound::App, "max_receive_bytes"),
            (
                AppWork::Turn {
                    name: "echo".into(),
                },
                MessageBound::Daemon,
                "--max-payload-bytes",
            ),
            (
                AppWork::Activation,
                MessageBound::Daemon,
                "--max-payload-bytes",
            ),
        ];
        for (work, bound, remedy) in cases {
            let error = CallError::from(TooLargeForApp {
                actor: ActorId::new("counter", "c1"),
                work,
                bytes: 2_000_000,
                limit: 1_000_000,
                bound,
                app: "billing".into(),
            });
            let text = error.to_string();
            for part in ["counter/c1", "2000000 bytes", "1000000 bytes", remedy] {
                assert!(text.contains(part), "{part:?} not in: {text}");
            }
            assert_eq!(
                text.contains("'billing'"),
                bound == MessageBound::App,
                "{text}"
            );
        }
    }

    #[test]
    fn messages_quote_input_cut_short() {
        let long = "x".repeat(100_000);
        let quoted = super::abridged(&long, 64);
        assert!(quoted.len() < 100, "{quoted}");
        assert!(quoted.contains("100000 bytes"), "{quoted}");
        assert_eq!(super::abridged("short", 64), "\"short\"");
        let types: Vec<String> = (0..1000).map(|i| format!("type-{i}")).collect();
        let error = CallError::UnknownType {
            actor_type: "nosuch".into(),
            registered: types,
        };
        let text = error.to_string();
        assert!(text.len() < 1024, "{text}");
        assert!(text.contains("and 990 more"), "{text}");
    }
}
