//! Local or remote, decided in one place for every per-actor request.
//!
//! Placement decides owners ([`Placement::owner`]); this module acts on the
//! answer. Every [`ActorRequest`] (calls, state reads, reminders, alarms,
//! timers) takes the same path: a request for a local actor is answered here
//! (`answer_here`), one for an actor another daemon owns goes to it through
//! the [`Forwarder`] (the binary's transport), one for a moving actor waits
//! for the next table. The protocol and why it keeps one activation per
//! actor: docs/architecture.md, "Cluster".
//!
//! [`Placement::owner`]: troupe_placement::Placement::owner

use std::sync::Arc;

use tokio::time::Instant;
use tracing::{debug, warn};
use troupe_placement::Owner;

use crate::activation::{Activation, Envelope};
use crate::error::{CallError, Unavailable};
use crate::forwarding::{ActorRequest, ActorResponse, Forwarder, Peer, RequestContext};
use crate::reply::Reply;
use crate::runtime::Runtime;
use crate::shared::Shared;
use crate::types::{ActorId, Call, Payload, TurnKind};
use crate::validate;

/// How many times a request may be forwarded: daemons may briefly disagree
/// on the table, but a request bouncing further means something is wrong.
pub const MAX_FORWARD_HOPS: u32 = 2;

/// Where a request for an actor goes now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    Local,
    Remote(Peer),
    /// A table change is moving the actor, or no daemon hosts its type yet:
    /// wait for the next table.
    Wait,
}

pub(crate) fn lease_lapsed() -> CallError {
    Unavailable::LeaseLapsed.into()
}

impl Runtime {
    /// Lets the runtime forward requests for actors other daemons own.
    /// Without one, such requests fail with UNAVAILABLE naming the owner.
    pub fn set_forwarder(&self, forwarder: Arc<dyn Forwarder>) {
        let _ = self.shared.forwarder.set(forwarder);
    }

    /// Admits a call entering the daemon: its chain (`dispatch::chain`),
    /// then, while load is shed, only work already under way
    /// (`load_shedding`).
    pub(crate) fn admit(&self, call: &Call) -> Result<(), CallError> {
        self.shared.admit_chain(call)?;
        self.admit_while_shedding(call)
    }

    /// Answers `request` here, or has the actor's owner answer it: the path
    /// every per-actor request takes.
    ///
    /// A call that carries a chain is refused unless this daemon issued the
    /// chain to a turn that still runs (or a peer forwarded it): see
    /// [`Runtime::invoke`].
    pub async fn request(
        &self,
        request: ActorRequest,
        context: RequestContext,
    ) -> Result<ActorResponse, CallError> {
        match request.call() {
            Some(call) => self.admit(call)?,
            None => self.admit_setting(&request)?,
        }
        self.shared.request(request, context).await
    }

    /// Calls a method and waits for its result.
    ///
    /// A call with a chain is refused ([`CallError::ChainRefused`]) unless
    /// the chain is one this daemon issued to a turn that still runs
    /// ([`TurnDone::chain_for_calls`](crate::TurnDone::chain_for_calls)),
    /// or came from a peer ([`CallExtra::chain_from_peer`]): a chain lets a
    /// call run nested in a running turn, so it must not be made up.
    ///
    /// [`CallExtra::chain_from_peer`]: crate::CallExtra::chain_from_peer
    pub async fn invoke(&self, call: Call) -> Result<Payload, CallError> {
        self.admit(&call)?;
        // The common case, an actor of this daemon, takes the short way: no
        // request to build, no table change to wait out.
        match self.shared.route(&call.actor) {
            Ok(Route::Local) => return self.shared.invoke_here(call).await,
            Ok(_) => {}
            Err(e) => {
                self.shared.count_failed(&call.actor.ty, call.kind, &e);
                return Err(e);
            }
        }
        let context = RequestContext::of_call(&call);
        match self
            .shared
            .request(ActorRequest::Invoke(call), context)
            .await?
        {
            ActorResponse::Payload(payload) => Ok(payload),
            other => Err(other.unexpected("a payload")),
        }
    }

    /// Queues a call whose result nobody waits for. Its chain, if any, is
    /// checked as [`Runtime::invoke`]'s.
    pub fn tell(&self, call: Call) -> Result<(), CallError> {
        self.admit(&call)?;
        if self.shared.route(&call.actor)? == Route::Local {
            return self.shared.tell_here(call);
        }
        // Forwarded or waiting for a table change: the caller waits for
        // neither.
        let shared = self.shared.clone();
        let context = RequestContext::of_call(&call);
        tokio::spawn(async move {
            let actor = call.actor.clone();
            if let Err(e) = shared.request(ActorRequest::Tell(call), context).await {
                debug!(actor = %actor, error = %e, "one-way call not delivered");
            }
        });
        Ok(())
    }
}

impl Shared {
    pub(crate) fn route(&self, actor: &ActorId) -> Result<Route, CallError> {
        validate::name("actor type", &actor.ty)?;
        validate::name("actor id", &actor.id)?;
        if !self.placement.may_serve() {
            return Err(lease_lapsed());
        }
        Ok(match self.placement.owner(&actor.ty, &actor.id) {
            Owner::Local => Route::Local,
            Owner::Remote { node, address } => Route::Remote(Peer { node, address }),
            Owner::Moving => Route::Wait,
            // Nobody hosts the type in the table. Our own apps' types reach
            // the table a moment after they register; otherwise the usual
            // unknown-type rule (with its start-up grace) answers.
            Owner::Unplaced if self.hosts.options(&actor.ty).is_some() => Route::Wait,
            Owner::Unplaced => Route::Local,
        })
    }

    /// Whether requests for `actor` are answered here now.
    pub(crate) fn owns(&self, actor: &ActorId) -> bool {
        self.route(actor).ok() == Some(Route::Local)
    }

    async fn placement_changed(&self, deadline: Instant) {
        let Some(mut changes) = self.placement.changes() else {
            tokio::time::sleep_until(deadline).await;
            return;
        };
        let _ = tokio::time::timeout_at(deadline, changes.changed()).await;
    }

    /// Where a request about `actor` goes, waiting out a table change that
    /// is moving it (until `deadline`): `None` here, else the owner. `hops`
    /// is how often the request was forwarded already; a remote owner is
    /// only answered while another forward stays within
    /// [`MAX_FORWARD_HOPS`].
    async fn resolve(
        &self,
        actor: &ActorId,
        deadline: Instant,
        hops: u32,
    ) -> Result<Option<Peer>, CallError> {
        loop {
            match self.route(actor)? {
                Route::Local => return Ok(None),
                Route::Wait => {
                    if Instant::now() >= deadline {
                        return Err(Unavailable::Moving {
                            actor: actor.clone(),
                        }
                        .into());
                    }
                    self.placement_changed(deadline).await;
                }
                Route::Remote(_) if hops + 1 > MAX_FORWARD_HOPS => {
                    return Err(Unavailable::TooManyHops {
                        actor: actor.clone(),
                        hops,
                    }
                    .into());
                }
                Route::Remote(peer) => return Ok(Some(peer)),
            }
        }
    }

    /// See [`Runtime::request`].
    pub(crate) async fn request(
        self: &Arc<Self>,
        request: ActorRequest,
        context: RequestContext,
    ) -> Result<ActorResponse, CallError> {
        let limit = self.config.call_timeout;
        let deadline = Instant::now() + context.timeout.map_or(limit, |t| t.min(limit));
        let peer = match self.resolve(request.actor(), deadline, context.hops).await {
            Ok(peer) => peer,
            Err(e) => {
                if let Some(call) = request.call() {
                    self.count_failed(&call.actor.ty, call.kind, &e);
                }
                return Err(e);
            }
        };
        match peer {
            None => self.answer_here(request, deadline).await,
            Some(peer) => self.forward(peer, request, context, deadline).await,
        }
    }

    /// Answers a request for an actor this daemon owns.
    async fn answer_here(
        self: &Arc<Self>,
        request: ActorRequest,
        deadline: Instant,
    ) -> Result<ActorResponse, CallError> {
        Ok(match request {
            ActorRequest::Invoke(call) => ActorResponse::Payload(self.invoke_here(call).await?),
            ActorRequest::Tell(call) => {
                self.tell_here(call)?;
                ActorResponse::Accepted
            }
            ActorRequest::TellDurable(call) => {
                self.tell_durable_here(call).await?;
                ActorResponse::Accepted
            }
            ActorRequest::TellLater { call, delay } => ActorResponse::TellScheduled {
                due_unix_ms: self.tell_later_here(call, delay).await?.next_due_unix_ms,
            },
            ActorRequest::GetState { actor, keys } => {
                let (entries, active, expires) = self.get_state_here(&actor, &keys).await?;
                ActorResponse::State {
                    entries,
                    active,
                    expires,
                }
            }
            ActorRequest::SetReminder(spec) => {
                ActorResponse::Reminder(Some(Box::new(self.set_reminder_here(spec).await?)))
            }
            ActorRequest::GetReminder { actor, name } => {
                ActorResponse::Reminder(self.get_reminder_here(&actor, &name).await?.map(Box::new))
            }
            ActorRequest::DeleteReminder { actor, name } => {
                ActorResponse::Deleted(self.delete_reminder_here(&actor, &name).await?)
            }
            ActorRequest::PauseReminder { actor, name } => ActorResponse::Reminder(
                self.pause_reminder_here(&actor, &name, true)
                    .await?
                    .map(Box::new),
            ),
            ActorRequest::ResumeReminder { actor, name } => ActorResponse::Reminder(
                self.pause_reminder_here(&actor, &name, false)
                    .await?
                    .map(Box::new),
            ),
            ActorRequest::SetAlarm(spec) => {
                ActorResponse::Reminder(Some(Box::new(self.set_alarm_here(spec).await?)))
            }
            ActorRequest::GetAlarm { actor } => {
                ActorResponse::Reminder(self.get_alarm_here(&actor).await?.map(Box::new))
            }
            ActorRequest::DeleteAlarm { actor } => {
                ActorResponse::Deleted(self.delete_alarm_here(&actor).await?)
            }
            ActorRequest::SetTimer(spec) => {
                self.set_timer_here(spec)?;
                ActorResponse::Accepted
            }
            ActorRequest::DeleteTimer { actor, name } => {
                ActorResponse::Deleted(self.delete_timer_here(&actor, &name)?)
            }
            ActorRequest::PollEvents { actor, after, wait } => ActorResponse::Events(Box::new(
                self.poll_events_here(&actor, after, wait, deadline).await?,
            )),
        })
    }

    /// Has `owner` answer `request`, within what is left until `deadline`.
    async fn forward(
        &self,
        owner: Peer,
        request: ActorRequest,
        mut context: RequestContext,
        deadline: Instant,
    ) -> Result<ActorResponse, CallError> {
        let actor = request.actor().clone();
        let not_owner = |owner: Peer| Unavailable::NotOwner {
            actor: actor.clone(),
            node: owner.node,
            address: owner.address,
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        context.timeout = Some(context.timeout.map_or(remaining, |t| t.min(remaining)));
        context.hops += 1;
        if let Some(call) = request.call() {
            // Reminder, alarm and timer firings are never forwarded: the new
            // owner fires them from the shared store (timers die with their
            // activation).
            if call.kind != TurnKind::Call {
                return Err(not_owner(owner).into());
            }
        }
        let Some(forwarder) = self.forwarder.get() else {
            return Err(not_owner(owner).into());
        };
        debug!(actor = %actor, owner = %owner.node, "forwarding to the owner");
        forwarder.forward(&owner, request, context).await
    }

    /// Activation found the actor is no longer this daemon's: its queued
    /// calls go where placement says now.
    pub(crate) fn reroute_mailbox(self: &Arc<Self>, act: &Arc<Activation>) {
        for env in self.unload(act) {
            let shared = self.clone();
            let actor = act.id.clone();
            tokio::spawn(async move { shared.reroute(actor, env).await });
        }
    }

    pub(crate) async fn reroute(self: Arc<Self>, actor: ActorId, env: Envelope) {
        let Envelope {
            kind,
            name,
            payload,
            extra,
            reply,
            inbox,
            ..
        } = env;
        let call = Call {
            kind,
            extra,
            ..Call::new(actor, name, payload)
        };
        let context = RequestContext::of_call(&call);
        if let Some(tag) = inbox {
            // A durable tell not stored yet still has its caller waiting:
            // the new owner stores it and the caller hears when. A stored
            // one (no caller left) stays in the store, where its actor's
            // next activation reads it, wherever that is.
            if let Some(ack) = tag.ack {
                let result = self.request(ActorRequest::TellDurable(call), context).await;
                ack.send(result.map(|_| Payload::default()));
            }
            return;
        }
        match reply {
            Reply::None => {
                if let Err(e) = self.request(ActorRequest::Tell(call), context).await {
                    warn!(error = %e, "a rerouted one-way call could not be delivered");
                }
            }
            reply => {
                let result = self.request(ActorRequest::Invoke(call), context).await;
                reply.send(result.and_then(|answer| match answer {
                    ActorResponse::Payload(payload) => Ok(payload),
                    other => Err(other.unexpected("a payload")),
                }));
            }
        }
    }
}
