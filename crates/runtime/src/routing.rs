//! Local or remote: where a call for an actor goes, decided in one place.
//!
//! Placement decides owners ([`Placement::owner`]); this module acts on the
//! answer. A call for a local actor takes the normal path (`dispatch`); one
//! for another daemon goes through the [`Forwarder`] (the binary's
//! transport); one for a moving actor waits for the next table. The protocol
//! and why it keeps one activation per actor: docs/architecture.md,
//! "Cluster".
//!
//! [`Placement::owner`]: troupe_placement::Placement::owner

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{debug, warn};
use troupe_placement::Owner;

use crate::activation::{Activation, Envelope};
use crate::error::{CallError, Unavailable};
use crate::forwarding::Forwarder;
use crate::reply::{wait_reply, Reply};
use crate::runtime::Runtime;
use crate::shared::Shared;
use crate::types::{ActorId, Call, Payload};
use crate::validate;

/// How many times a call may be forwarded: daemons may briefly disagree on
/// the table, but a call bouncing further means something is wrong.
pub const MAX_FORWARD_HOPS: u32 = 2;

/// Where a call for an actor goes now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Local,
    Remote {
        node: String,
        address: String,
    },
    /// A table change is moving the actor, or no daemon hosts its type yet:
    /// wait for the next table.
    Wait,
}

pub(crate) fn lease_lapsed() -> CallError {
    Unavailable::LeaseLapsed.into()
}

impl Runtime {
    /// Lets the runtime forward calls for actors other daemons own. Without
    /// one, such calls fail with UNAVAILABLE naming the owner.
    pub fn set_forwarder(&self, forwarder: Arc<dyn Forwarder>) {
        let _ = self.shared.forwarder.set(forwarder);
    }

    /// Where a call for `actor` goes now (for the binary's other RPCs, which
    /// it forwards itself).
    pub fn route(&self, actor: &ActorId) -> Result<Route, CallError> {
        self.shared.route(actor)
    }

    /// Where a request about `actor` must go, waiting out a table change
    /// that is moving it (until `deadline`); `hops` is how often the request
    /// was forwarded already. Never [`Route::Wait`]: a remote owner is only
    /// answered while another forward stays within [`MAX_FORWARD_HOPS`].
    pub async fn resolve(
        &self,
        actor: &ActorId,
        deadline: Instant,
        hops: u32,
    ) -> Result<Route, CallError> {
        self.shared.resolve(actor, deadline, hops).await
    }

    /// Calls a method and waits for its result.
    pub async fn invoke(&self, call: Call) -> Result<Payload, CallError> {
        let limit = self.shared.config.call_timeout;
        let timeout = call.timeout.map_or(limit, |t| t.min(limit));
        let (actor, kind) = (call.actor.clone(), call.kind);
        let (tx, rx) = oneshot::channel();
        let deadline = Instant::now() + timeout;
        let mut reply = Some(Reply::To(tx));
        let call = match self.shared.route_call(call, deadline, &mut reply).await {
            Ok(Some(call)) => call,
            // Forwarded: the owner's answer is in `rx`.
            Ok(None) => return wait_reply(&actor, timeout, rx).await,
            Err(e) => {
                self.shared.count_failed(&actor.ty, kind, &e);
                return Err(e);
            }
        };
        let reply = reply.take().unwrap_or_default();
        if let Err(e) = self.shared.enqueue_routed(call, reply) {
            self.shared.count_failed(&actor.ty, kind, &e);
            return Err(e);
        }
        let result = wait_reply(&actor, timeout, rx).await;
        // Turn results were counted with the turn; a caller giving up is not one.
        if let Err(e @ CallError::DeadlineExceeded(_)) = &result {
            self.shared.count_failed(&actor.ty, kind, e);
        }
        result
    }

    /// Queues a call whose result nobody waits for.
    pub fn tell(&self, call: Call) -> Result<(), CallError> {
        let (ty, kind) = (call.actor.ty.clone(), call.kind);
        if self.shared.route(&call.actor)? != Route::Local {
            // Forwarded or waiting for a table change: the caller does not
            // wait for either.
            let shared = self.shared.clone();
            let deadline = route_deadline(&shared, call.timeout);
            tokio::spawn(async move {
                let actor = call.actor.clone();
                match shared.route_call(call, deadline, &mut None).await {
                    Ok(Some(call)) => {
                        if let Err(e) = shared.enqueue_routed(call, Reply::None) {
                            shared.count_failed(&actor.ty, kind, &e);
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        shared.count_failed(&actor.ty, kind, &e);
                        debug!(actor = %actor, error = %e, "one-way call not delivered");
                    }
                }
            });
            return Ok(());
        }
        let result = self.shared.enqueue_routed(call, Reply::None);
        if let Err(e) = &result {
            self.shared.count_failed(&ty, kind, e);
        }
        result
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
            Owner::Remote { node, address } => Route::Remote { node, address },
            Owner::Moving => Route::Wait,
            // Nobody hosts the type in the table. Our own apps' types reach
            // the table a moment after they register; otherwise the usual
            // unknown-type rule (with its start-up grace) answers.
            Owner::Unplaced if self.hosts.options(&actor.ty).is_some() => Route::Wait,
            Owner::Unplaced => Route::Local,
        })
    }

    async fn placement_changed(&self, deadline: Instant) {
        let Some(mut changes) = self.placement.changes() else {
            tokio::time::sleep_until(deadline).await;
            return;
        };
        let _ = tokio::time::timeout_at(deadline, changes.changed()).await;
    }

    /// See [`Runtime::resolve`].
    async fn resolve(
        &self,
        actor: &ActorId,
        deadline: Instant,
        hops: u32,
    ) -> Result<Route, CallError> {
        loop {
            match self.route(actor)? {
                Route::Wait => {
                    if Instant::now() >= deadline {
                        return Err(Unavailable::Moving {
                            actor: actor.clone(),
                        }
                        .into());
                    }
                    self.placement_changed(deadline).await;
                }
                Route::Remote { .. } if hops + 1 > MAX_FORWARD_HOPS => {
                    return Err(Unavailable::TooManyHops {
                        actor: actor.clone(),
                        hops,
                    }
                    .into());
                }
                route => return Ok(route),
            }
        }
    }

    /// Routes `call` until it can be delivered here, forwarding it or
    /// waiting out a table change. `Ok(Some(call))`: deliver locally.
    async fn route_call(
        self: &Arc<Self>,
        call: Call,
        deadline: Instant,
        reply: &mut Option<Reply>,
    ) -> Result<Option<Call>, CallError> {
        let hops = call.extra.as_ref().map_or(0, |e| e.hops);
        let (node, address) = match self.resolve(&call.actor, deadline, hops).await? {
            Route::Remote { node, address } => (node, address),
            _ => return Ok(Some(call)),
        };
        let Some(forwarder) = self.forwarder.get() else {
            return Err(Unavailable::NotOwner {
                actor: call.actor,
                node,
                address,
            }
            .into());
        };
        let mut call = call;
        let remaining = deadline.saturating_duration_since(Instant::now());
        call.timeout = Some(call.timeout.map_or(remaining, |t| t.min(remaining)));
        match reply.take() {
            Some(Reply::To(tx)) => {
                let result = forwarder.invoke(&address, call, hops + 1).await;
                let _ = tx.send(result);
            }
            _ => forwarder.tell(&address, call, hops + 1).await?,
        }
        Ok(None)
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

    async fn reroute(self: Arc<Self>, actor: ActorId, env: Envelope) {
        let Envelope {
            kind,
            name,
            payload,
            extra,
            reply,
            ..
        } = env;
        let deadline = Instant::now() + self.config.call_timeout;
        let call = Call {
            kind,
            extra,
            ..Call::new(actor, name, payload)
        };
        let mut reply = Some(reply);
        match self.route_call(call, deadline, &mut reply).await {
            Ok(None) => {}
            Ok(Some(call)) => {
                let reply = reply.take().unwrap_or_default();
                if let Err(e) = self.enqueue_routed(call, reply) {
                    warn!(error = %e, "a rerouted call could not be queued");
                }
            }
            Err(e) => {
                if let Some(reply) = reply.take() {
                    reply.send(Err(e));
                }
            }
        }
    }
}

/// The longest a call waits for a table change before giving up.
fn route_deadline(shared: &Shared, timeout: Option<Duration>) -> Instant {
    let limit = shared.config.call_timeout;
    Instant::now() + timeout.map_or(limit, |t| t.min(limit))
}
