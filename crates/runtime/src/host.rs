//! The seam between the runtime and whatever runs actor code.
//!
//! A host is told to activate an actor, run a turn, or deactivate it, and
//! answers through the completion handle it was given ([`ActivateDone`],
//! [`TurnDone`], [`DeactivateDone`]). Handles instead of futures let an
//! in-process host answer synchronously with no allocation, and let the app
//! stream answer whenever the app's reply arrives. A handle dropped without an
//! answer counts as the host having gone away.

use std::num::NonZeroU64;
use std::sync::Arc;

use crate::activation::Activation;
use crate::dispatch::pending::PendingSlot;
use crate::error::{CallError, HostGone, Unavailable};
use crate::lifecycle::events::Ended;
use crate::reply::Reply;
use crate::shared::Shared;
use crate::types::{
    ActorFailure, ActorId, CallChain, CallExtra, DeactivateReason, Payload, StateChange,
    StateSnapshot, TurnKind,
};
use crate::watch::EventTrace;

/// Runs actor code for the types it registered.
pub trait ActorHost: Send + Sync + 'static {
    /// Who this host is, for logs and status (e.g. the app's name).
    fn name(&self) -> &str;

    fn activate(&self, request: ActivateRequest, done: ActivateDone);

    fn turn(&self, request: TurnRequest, done: TurnDone);

    fn deactivate(&self, request: DeactivateRequest, done: DeactivateDone);
}

#[derive(Debug)]
pub struct ActivateRequest {
    pub actor: ActorId,
    pub state: StateSnapshot,
    /// As [`TurnRequest::lease_deadline_unix_ms`].
    pub lease_deadline_unix_ms: u64,
}

/// One turn to run. The actor is [`TurnDone::actor`]: the handle holds it
/// already, and not copying the id saves atomic operations on every turn.
#[derive(Debug)]
pub struct TurnRequest {
    pub kind: TurnKind,
    pub name: Arc<str>,
    pub payload: Payload,
    pub extra: Option<Box<CallExtra>>,
    /// The actor's state before this turn. Hosts that keep their own copy
    /// (apps) ignore it; in-process hosts read it instead of keeping one,
    /// skipping the daemon's expiry keys ([`crate::is_expiry_key`]).
    pub state: StateSnapshot,
    /// The type's turn timeout: a host that can lose track of a turn (an
    /// app) fails it with [`CallError::TurnTimedOut`] once it runs longer.
    pub timeout: std::time::Duration,
    /// When this daemon's placement lease ends (unix ms; 0: no lease). A
    /// host must not start the turn after it: another daemon may own the
    /// actor by then (an app answers `lease_expired`).
    pub lease_deadline_unix_ms: u64,
    /// State keys that expired since the host last saw the actor's state
    /// (`StateChange::ttl_ms`): a host keeping its own copy drops them
    /// before the turn runs. `state` no longer holds them.
    pub expired_keys: Vec<String>,
    /// No caller waits for the turn's answer (a best-effort tell): a host
    /// reports its failure itself, or nobody hears of it.
    pub unanswered: bool,
}

#[derive(Debug)]
pub struct DeactivateRequest {
    pub actor: ActorId,
    pub reason: DeactivateReason,
}

/// The result of one turn.
#[derive(Debug)]
pub struct TurnOutcome {
    pub result: Result<Payload, ActorFailure>,
    /// Applied atomically when the turn succeeded; ignored when it failed.
    pub changes: Vec<StateChange>,
}

// === impl ActivateDone ===

/// Answer to [`ActorHost::activate`].
#[must_use = "dropping the handle fails the activation"]
pub struct ActivateDone {
    pub(crate) rt: Arc<Shared>,
    pub(crate) act: Option<Arc<Activation>>,
    pub(crate) _span: tracing::Span,
}

impl ActivateDone {
    /// `Err` when the actor's activation hook raised: the waiting calls fail with it.
    pub fn finish(mut self, outcome: Result<Vec<StateChange>, ActorFailure>) {
        if let Some(act) = self.act.take() {
            self.rt
                .activation_finished(act, outcome.map_err(CallError::Actor));
        }
    }

    /// The host cannot run this actor (e.g. its connection closed).
    pub fn fail(mut self, error: CallError) {
        if let Some(act) = self.act.take() {
            self.rt.activation_finished(act, Err(error));
        }
    }
}

impl Drop for ActivateDone {
    fn drop(&mut self) {
        if let Some(act) = self.act.take() {
            let error = if std::thread::panicking() {
                CallError::Internal(format!(
                    "the host activating {} panicked; the calls waiting for it failed (see the \
                     daemon's log)",
                    act.id
                ))
            } else {
                Unavailable::HostGone(HostGone::DuringActivation).into()
            };
            self.rt.activation_finished(act, Err(error));
        }
    }
}

impl std::fmt::Debug for ActivateDone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActivateDone").finish_non_exhaustive()
    }
}

// === impl TurnDone ===

static EMPTY_ID: std::sync::LazyLock<ActorId> = std::sync::LazyLock::new(|| ActorId::new("", ""));

/// Answer to [`ActorHost::turn`].
#[must_use = "dropping the handle fails the turn"]
pub struct TurnDone {
    pub(crate) rt: Arc<Shared>,
    pub(crate) act: Option<Arc<Activation>>,
    pub(crate) reply: Reply,
    /// Holds the call's place in the daemon-wide pending bound until it ends.
    pub(crate) _slot: PendingSlot,
    pub(crate) meta: TurnMeta,
    /// The turn's span, open until the turn ends; only for traced calls.
    pub(crate) span: Option<Box<tracing::Span>>,
    /// The turn's number among the running turns, once it was issued a
    /// chain: its tokens are valid until the turn ends.
    pub(crate) chain_turn: Option<NonZeroU64>,
    /// What the turn publishes to the actor's watchers if it succeeds.
    pub(crate) events: TurnEvents,
}

/// A turn's events and what they carry to the watchers besides.
#[derive(Debug, Default)]
pub(crate) struct TurnEvents {
    pub(crate) events: Vec<Payload>,
    pub(crate) trace: Option<Arc<EventTrace>>,
}

/// What the runtime needs back when a turn ends, besides the outcome.
#[derive(Debug, Clone)]
pub(crate) struct TurnMeta {
    pub(crate) kind: TurnKind,
    /// Whether the turn counts as activity for idle deactivation.
    pub(crate) touch: bool,
    /// When the host got the turn; only taken when metrics are on.
    pub(crate) started: Option<std::time::Instant>,
    /// The method, when it is read-only: its changes are refused.
    pub(crate) readonly: Option<Arc<str>>,
    /// The inbox entry a durable tell's turn delivers.
    pub(crate) inbox: Option<Box<crate::inbox::tag::InboxDelivery>>,
    /// The idempotency key the turn's answer is recorded under.
    pub(crate) key: Option<Box<str>>,
    /// What the caller said of that key (`CallExtra::key_terms`).
    pub(crate) key_terms: crate::types::KeyTerms,
    /// Answered from a call record: the method did not run.
    pub(crate) replayed: bool,
    /// The host was asked to stop the turn, its caller gone
    /// ([`TurnDone::cancelling`]).
    pub(crate) cancelled: bool,
}

impl TurnDone {
    /// The actor this turn runs on.
    pub fn actor(&self) -> &ActorId {
        match &self.act {
            Some(act) => &act.id,
            // Only empty after finishing, which consumes the handle.
            None => &EMPTY_ID,
        }
    }

    /// The chain calls made from this turn must carry: the turn's own
    /// chain (`turn_chain`, from [`TurnRequest::extra`]) with this actor
    /// appended, or a new one, sealed with a token that proves the daemon
    /// issued it to this turn. The daemon honours it on calls from outside
    /// (an app's) only until the turn ends. Hosts whose turns make calls
    /// through the daemon's API ask for it; others need not.
    pub fn chain_for_calls(&mut self, turn_chain: Option<&CallChain>) -> CallChain {
        let mut chain = CallChain::for_calls_from(turn_chain, self.actor());
        if self.act.is_some() {
            let tokens = &self.rt.chain_tokens;
            let turn = *self.chain_turn.get_or_insert_with(|| tokens.begin());
            tokens.seal(turn, &mut chain);
        }
        chain
    }

    /// Whether the caller stopped waiting for this turn's reply (it
    /// cancelled the call, or its deadline passed). Only calls have one:
    /// tells and scheduled turns never count as left.
    pub fn caller_left(&self) -> bool {
        matches!(&self.reply, Reply::To(tx) if tx.is_closed())
    }

    /// The host is telling the code running this turn to stop, its caller
    /// gone: a failure it then answers is not recorded as the call's answer
    /// (a retry of the call must run it again), and counts as cancelled.
    /// False when it was told so before.
    pub fn cancelling(&mut self) -> bool {
        if self.meta.cancelled {
            return false;
        }
        self.meta.cancelled = true;
        if let (Some(metrics), Some(act)) = (&self.rt.metrics, &self.act) {
            metrics.turn_cancelled(&act.id.ty);
        }
        true
    }

    /// Events for the actor's watchers (`ActorClient.Watch`), published in
    /// order once the turn succeeds; dropped with its changes if it fails.
    pub fn publish(&mut self, events: Vec<Payload>) {
        if self.events.events.is_empty() {
            self.events.events = events;
        } else {
            self.events.events.extend(events);
        }
    }

    /// The trace context the host handed the turn's code, for the events it
    /// publishes to carry (`WatchedEvent::trace`). Hosts of traced turns
    /// give it when the turn starts; an untraced turn's events carry none.
    pub fn trace_events(&mut self, trace: EventTrace) {
        self.events.trace = Some(Arc::new(trace));
    }

    pub fn finish(mut self, outcome: TurnOutcome) {
        self.end(Ok(outcome));
    }

    /// The turn could not run to an answer (host gone, timeout).
    pub fn fail(mut self, error: CallError) {
        self.end(Err(error));
    }

    fn end(&mut self, outcome: Result<TurnOutcome, CallError>) {
        // Before the actor can start another turn: from here on a chain
        // issued to this one is stale.
        if let Some(turn) = self.chain_turn.take() {
            self.rt.chain_tokens.end(turn);
        }
        if let Some(act) = self.act.take() {
            let reply = std::mem::take(&mut self.reply);
            let events = std::mem::take(&mut self.events);
            self.rt.turn_finished(
                act,
                reply,
                &self.meta,
                self.span.as_deref(),
                outcome,
                events,
            );
        }
    }
}

impl Drop for TurnDone {
    fn drop(&mut self) {
        // Finished turns come here too, with nothing left to do.
        if self.act.is_none() {
            return;
        }
        // Dropped while the host's code unwinds: it panicked on this turn.
        let error = if std::thread::panicking() {
            CallError::Internal(format!(
                "the host running {} panicked during this turn; the turn's changes were \
                 discarded (see the daemon's log)",
                self.actor()
            ))
        } else {
            Unavailable::HostGone(HostGone::DuringTurn).into()
        };
        self.end(Err(error));
    }
}

impl std::fmt::Debug for TurnDone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnDone").finish_non_exhaustive()
    }
}

// === impl DeactivateDone ===

/// Answer to [`ActorHost::deactivate`].
#[must_use = "dropping the handle ends the activation without the host's last changes"]
pub struct DeactivateDone {
    pub(crate) rt: Arc<Shared>,
    pub(crate) act: Option<Arc<Activation>>,
    pub(crate) reason: DeactivateReason,
    pub(crate) _span: tracing::Span,
}

impl DeactivateDone {
    /// The changes the deactivation hook made.
    pub fn finish(mut self, changes: Vec<StateChange>) {
        if let Some(act) = self.act.take() {
            self.rt
                .deactivation_finished(act, changes, Ended::Deactivated(self.reason));
        }
    }
}

impl Drop for DeactivateDone {
    fn drop(&mut self) {
        if let Some(act) = self.act.take() {
            // The host went away without answering.
            self.rt
                .deactivation_finished(act, Vec::new(), Ended::AppDetached);
        }
    }
}

impl std::fmt::Debug for DeactivateDone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeactivateDone").finish_non_exhaustive()
    }
}
