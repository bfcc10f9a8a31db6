//! A call as a caller hands it to the runtime: the chain it belongs to,
//! what it carries besides its payload (metadata, trace, idempotency key,
//! delivery), and its deadline.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::{ActorId, Payload, TurnKind};

/// The chain of calls a call belongs to (who waits on whom).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallChain {
    pub id: String,
    /// The actors whose turns wait on this call, outermost first.
    pub actors: Vec<ActorId>,
    /// Set by the daemon on the chain it issues to a running turn
    /// ([`TurnDone::chain_for_calls`](crate::TurnDone::chain_for_calls));
    /// a call from outside the daemon is honoured only with a valid one.
    pub token: ChainToken,
}

/// Proof that the daemon issued a chain to a turn that still runs: opaque
/// bytes, passed back unchanged, never printed (`Debug` shows the length).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct ChainToken(Bytes);

impl ChainToken {
    pub fn new(bytes: Bytes) -> Self {
        Self(bytes)
    }

    pub fn as_bytes(&self) -> &Bytes {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for ChainToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChainToken(<{} bytes>)", self.0.len())
    }
}

impl CallChain {
    /// The chain that calls made from a turn of `actor` carry: the turn's
    /// own chain (if it was called from one) with `actor` appended, or a new
    /// chain starting at it. Without a token: hosts get theirs, sealed,
    /// from [`TurnDone::chain_for_calls`](crate::TurnDone::chain_for_calls).
    pub fn for_calls_from(turn_chain: Option<&CallChain>, actor: &ActorId) -> CallChain {
        match turn_chain {
            Some(chain) => {
                let mut actors = Vec::with_capacity(chain.actors.len() + 1);
                actors.extend(chain.actors.iter().cloned());
                actors.push(actor.clone());
                CallChain {
                    id: chain.id.clone(),
                    actors,
                    token: ChainToken::default(),
                }
            }
            None => CallChain {
                id: new_chain_id(),
                actors: vec![actor.clone()],
                token: ChainToken::default(),
            },
        }
    }
}

/// Unique per process run: start time and a sequence number.
fn new_chain_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::LazyLock;
    static START: LazyLock<u128> = LazyLock::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    });
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "{:x}-{:x}",
        *START & 0xffff_ffff_ffff,
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Metadata, call chain and trace of a call; boxed because most calls carry
/// none of them.
#[derive(Debug, Clone, Default)]
pub struct CallExtra {
    pub metadata: Vec<(String, String)>,
    pub chain: Option<CallChain>,
    pub trace: Option<CallTrace>,
    /// When the caller stops waiting (wall clock), if it set a deadline.
    pub deadline_unix_ms: Option<u64>,
    /// Times the call was forwarded between daemons to reach its owner.
    pub hops: u32,
    /// The call came from another daemon of the cluster over an
    /// authenticated link: that daemon checked its chain when the call
    /// entered the cluster, and the token is that daemon's, so the chain is
    /// honoured without a check here. Set only by whoever receives
    /// forwarded calls (the binary's link service), never from a request's
    /// fields.
    pub chain_from_peer: bool,
    /// Names one logical call across its retries: its answer is recorded
    /// with the actor and replayed to a retry (the `idempotency` module).
    pub idempotency_key: Option<Box<str>>,
    /// The caller made `idempotency_key` for this call and never sent it
    /// before (an SDK's fresh key on its first attempt): no answer can be
    /// recorded under it, so a key memory does not know is not looked for
    /// in the store.
    pub new_key: bool,
    /// How long its caller may send `idempotency_key` again: the answer is
    /// kept that long (within the runtime's bounds) instead of the whole
    /// retention. `None`: the whole retention.
    pub key_retention: Option<std::time::Duration>,
    /// A timer's firing: when it was due (by the scheduling clock), so its
    /// turn's start measures how late it ran. Set only by the runtime's
    /// timers, and only while metrics are on.
    pub timer_due_unix_ms: Option<u64>,
}

impl CallExtra {
    /// The idempotency key, and whether its caller says it is new.
    pub fn key(&self) -> Option<(&str, bool)> {
        Some((self.idempotency_key.as_deref()?, self.new_key))
    }

    /// What the caller said of its key, for the record of its answer.
    pub(crate) fn key_terms(&self) -> KeyTerms {
        KeyTerms {
            keep: self.key_retention,
            new_key: self.new_key,
        }
    }
}

/// What a caller said of its idempotency key that the record of its answer
/// follows: how long it may send the key again (`CallExtra::key_retention`)
/// and whether it never sent it before (`CallExtra::new_key`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct KeyTerms {
    pub(crate) keep: Option<std::time::Duration>,
    pub(crate) new_key: bool,
}

/// The target of every span the runtime makes for trace export. Nothing else
/// logs under it, so a subscriber can enable exactly these spans; with no
/// subscriber interested they cost a disabled-callsite check.
pub const TRACE_TARGET: &str = "troupe::otel";

/// Where a call sits in a distributed trace.
///
/// The runtime never parses W3C trace context: whoever accepts the call
/// (the binary) opens `span` with the caller's context as parent, and the
/// host turns the span it is handed back into context for the app. When the
/// daemon exports no traces `span` is disabled and the caller's context is
/// passed on as it came.
#[derive(Debug, Clone)]
pub struct CallTrace {
    /// The daemon's span for the call; for a host, the turn's span.
    pub span: tracing::Span,
    /// The caller's W3C `traceparent` / `tracestate` (may be empty).
    pub traceparent: String,
    pub tracestate: String,
}

/// A call as a caller hands it to the runtime.
#[derive(Debug, Clone)]
pub struct Call {
    pub actor: ActorId,
    pub kind: TurnKind,
    pub method: Arc<str>,
    pub payload: Payload,
    pub extra: Option<Box<CallExtra>>,
    /// The caller's deadline; the runtime's default call timeout applies
    /// when it is longer or absent.
    pub timeout: Option<Duration>,
}

impl Call {
    pub fn new(actor: ActorId, method: impl Into<Arc<str>>, payload: Payload) -> Self {
        Self {
            actor,
            kind: TurnKind::Call,
            method: method.into(),
            payload,
            extra: None,
            timeout: None,
        }
    }
}
