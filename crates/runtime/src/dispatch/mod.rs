//! Getting a call to its actor's turn: checks, the daemon-wide bound, the
//! mailbox, and the workers that start turns.
//!
//! ```text
//!  enqueue ─▶ envelope (checks, pending slot) ─▶ deliver ─▶ mailbox ─▶ run queue
//!                                                  │                      │
//!                        direct dispatch: an idle actor's call ───────────┤
//!                                                                         ▼
//!                                  worker: activate (lifecycle) or start a turn (turn)
//! ```
//!
//! - [`run_queue`]: a worker's queue of activations with work.
//! - [`pending`]: the daemon-wide bound on calls queued or running.
//! - `worker`: the worker loop; which call runs next, read-only groups.
//! - `chain`: call chains, cycles and re-entrancy.
//! - `actor_ref`: [`ActorRef`], a handle that skips the directory lookup.

mod actor_ref;
mod chain;
pub(crate) mod pending;
pub(crate) mod run_queue;
mod worker;

use std::sync::{Arc, OnceLock};

use tokio::sync::oneshot;

pub use actor_ref::ActorRef;
pub(crate) use worker::readonly_method;

use crate::activation::{Activation, Envelope, Status};
use crate::error::{CallError, Unavailable};
use crate::reply::{wait_reply, Reply};
use crate::routing::Route;
use crate::shared::Shared;
use crate::types::{Call, CallExtra, Payload, TurnKind};
use crate::validate;
use crate::{clock, ActorId};
use run_queue::Runnable;

impl Shared {
    pub(crate) fn schedule(&self, act: Arc<Activation>) {
        self.push_runnable(Runnable { act, first: None });
    }

    fn push_runnable(&self, runnable: Runnable) {
        // Spread by address: stable per activation, even across workers.
        let worker = (Arc::as_ptr(&runnable.act) as usize >> 6) % self.workers.len();
        self.workers[worker].push(runnable);
    }

    pub(crate) fn enqueue(self: &Arc<Self>, call: Call, reply: Reply) -> Result<(), CallError> {
        self.check_target(&call.actor)?;
        self.enqueue_routed(call, reply)
    }

    /// [`Shared::enqueue`] for a call whose route was just found local (it
    /// checked the names and the owner already).
    pub(crate) fn enqueue_routed(
        self: &Arc<Self>,
        call: Call,
        reply: Reply,
    ) -> Result<(), CallError> {
        let mut extra = call.extra;
        // Only a caller that waits can close a cycle: a one-way call's
        // sender goes on, so its chain is no wait-for edge, and the turn it
        // starts begins a chain of its own (else a call back to the sender
        // would look like a cycle, or re-enter it beside another turn).
        let reentering = match (&reply, extra.as_deref().and_then(|e| e.chain.as_ref())) {
            (Reply::To(_), Some(chain)) => self.check_chain(&call.actor, chain)?,
            (Reply::None, Some(_)) => {
                if let Some(e) = extra.as_mut() {
                    e.chain = None;
                }
                false
            }
            _ => false,
        };
        if let Some(timeout) = call.timeout {
            // The host learns the caller's deadline, so calls its turn makes
            // wait no longer than the caller will.
            let timeout = timeout.min(self.config.call_timeout);
            extra.get_or_insert_with(Default::default).deadline_unix_ms =
                Some(clock::unix_now_ms().saturating_add(crate::input::millis(timeout)));
        }
        let mut envelope = self.envelope(call.kind, call.method, call.payload, extra, reply)?;
        envelope.reentering = reentering;
        self.deliver(&call.actor, None, envelope)
    }

    /// Runs a call on an actor this daemon owns and waits for its result.
    pub(crate) async fn invoke_here(self: &Arc<Self>, call: Call) -> Result<Payload, CallError> {
        let limit = self.config.call_timeout;
        let timeout = call.timeout.map_or(limit, |t| t.min(limit));
        let (actor, kind) = (call.actor.clone(), call.kind);
        let (tx, rx) = oneshot::channel();
        if let Err(e) = self.enqueue_routed(call, Reply::To(tx)) {
            self.count_failed(&actor.ty, kind, &e);
            return Err(e);
        }
        let result = wait_reply(&actor, timeout, rx).await;
        // Turn results were counted with the turn; a caller giving up is not one.
        if let Err(e @ CallError::DeadlineExceeded(_)) = &result {
            self.count_failed(&actor.ty, kind, e);
        }
        result
    }

    /// Queues a one-way call for an actor this daemon owns.
    pub(crate) fn tell_here(self: &Arc<Self>, call: Call) -> Result<(), CallError> {
        let (ty, kind) = (call.actor.ty.clone(), call.kind);
        let result = self.enqueue_routed(call, Reply::None);
        if let Err(e) = &result {
            self.count_failed(&ty, kind, e);
        }
        result
    }

    /// Checks that `actor` may be called here.
    pub(crate) fn check_target(&self, actor: &ActorId) -> Result<(), CallError> {
        if self.shutdown.refusing() {
            return Err(Unavailable::ShuttingDown.into());
        }
        match self.route(actor)? {
            Route::Local => Ok(()),
            Route::Remote(peer) => Err(Unavailable::NotOwner {
                actor: actor.clone(),
                node: peer.node,
                address: peer.address,
            }
            .into()),
            Route::Wait => Err(Unavailable::Moving {
                actor: actor.clone(),
            }
            .into()),
        }
    }

    /// Checks a call's method and payload and takes its place under the
    /// daemon-wide bound.
    pub(crate) fn envelope(
        &self,
        kind: TurnKind,
        method: Arc<str>,
        payload: Payload,
        extra: Option<Box<CallExtra>>,
        reply: Reply,
    ) -> Result<Envelope, CallError> {
        if self.shutdown.refusing() {
            return Err(Unavailable::ShuttingDown.into());
        }
        validate::name("method name", &method)?;
        validate::payload(payload.len(), self.config.max_payload_bytes)?;
        if let Some(extra) = &extra {
            validate::extra(extra, self.config.max_payload_bytes)?;
        }
        Ok(Envelope {
            kind,
            name: method,
            payload,
            extra,
            reply,
            slot: self.pending.acquire()?,
            touch: true,
            reentering: false,
            inbox: None,
        })
    }

    /// Puts a call in the actor's mailbox (or straight on a run queue).
    /// `bound` is an [`ActorRef`]'s activation: used while it lives, set on first use.
    pub(crate) fn deliver(
        self: &Arc<Self>,
        actor: &ActorId,
        mut bound: Option<&OnceLock<Arc<Activation>>>,
        mut envelope: Envelope,
    ) -> Result<(), CallError> {
        loop {
            let act = match bound.and_then(OnceLock::get) {
                Some(act) => act.clone(),
                None => {
                    let act = self
                        .directory
                        .get_or_create(actor, || self.new_activation(actor))?;
                    if let Some(b) = bound {
                        // A handle binds once; losing a race to another
                        // caller binds it to the same activation anyway.
                        let _ = b.set(act.clone());
                    }
                    act
                }
            };
            let mut inner = act.inner.lock();
            if inner.status == Status::Gone {
                // The bound activation ended: from now on resolve by id.
                bound = None;
                continue;
            }
            let (max_mailbox, type_pending) = match &inner.binding {
                Some(b) => (b.options.max_mailbox, Some(b.pending)),
                None => (
                    self.hosts
                        .options(&act.id.ty)
                        .map_or(self.config.default_max_mailbox, |o| o.max_mailbox),
                    self.hosts.pending_of(&act.id.ty),
                ),
            };
            if inner.mailbox.len() >= max_mailbox {
                return Err(CallError::Overloaded(format!(
                    "the mailbox of actor {} is full ({max_mailbox} calls queued, the type's \
                     max_mailbox); retry with backoff",
                    act.id
                )));
            }
            if let Some(type_pending) = type_pending {
                envelope.slot.add_type(type_pending, &act.id.ty)?;
            }
            if !self.sequence_tell(&act, &mut inner, &mut envelope) {
                // A retry of a durable tell stored before: acknowledged.
                return Ok(());
            }
            if !inner.scheduled && inner.status == Status::Idle && inner.mailbox.is_empty() {
                inner.scheduled = true;
                drop(inner);
                self.push_runnable(Runnable {
                    act,
                    first: Some(envelope),
                });
                return Ok(());
            }
            // Only a re-entering call or a running read-only group can let a
            // call start beside the running turn; others queue as usual.
            let may_join = envelope.reentering || inner.reading();
            if may_join && inner.status == Status::Running && inner.extra_turns < u8::MAX {
                if let Some(binding) = inner.binding.clone() {
                    let readonly = readonly_method(&binding, &envelope);
                    // Beside a running read-only group, unless a writer
                    // already waits (it would starve behind new readers).
                    let joins_readers =
                        readonly.is_some() && inner.reading() && inner.mailbox.is_empty();
                    // Nested in the chain's own turn, which waits on this
                    // call; never beside readers of other chains.
                    let nests = envelope.reentering
                        && (readonly.is_some() || !inner.reading() || inner.extra_turns == 0);
                    if joins_readers || nests {
                        inner.extra_turns += 1;
                        if readonly.is_none() {
                            inner.set_reading(false);
                        }
                        let state = inner.state.clone();
                        drop(inner);
                        self.start_turn(act, &binding, envelope, state, readonly);
                        return Ok(());
                    }
                }
            }
            inner.mailbox.push_back(envelope);
            let wake = !inner.scheduled && matches!(inner.status, Status::Idle | Status::Unloaded);
            if wake {
                inner.scheduled = true;
            }
            drop(inner);
            if wake {
                self.schedule(act);
            }
            return Ok(());
        }
    }

    pub(crate) fn new_activation(&self, id: &ActorId) -> Result<Activation, CallError> {
        if self.hosts.options(&id.ty).is_none() && !self.awaiting_apps() {
            return Err(self.unknown_type(&id.ty));
        }
        // Keep the registry's copy of the type name: every activation of the
        // type then shares one string that stays in cache for comparisons.
        let id = match self.hosts.options(&id.ty) {
            Some(options) => ActorId {
                ty: options.name.clone(),
                id: id.id.clone(),
            },
            None => id.clone(),
        };
        if self
            .config
            .max_activations
            .is_some_and(|max| self.staying_activations() >= max)
        {
            // This one makes one too many: the sweeper makes room.
            self.over_capacity.notify_one();
        }
        Ok(Activation::new(id, self.clock.coarse_ms()))
    }
}
