//! The runtime in a cluster: routing calls to their owner, waiting out table
//! changes, handing actors off, and fencing when the placement lease lapses.
//!
//! Placement decides owners ([`Placement::owner`]); this module acts on the
//! answer. A call for a local actor takes the normal path; one for another
//! daemon goes through the [`Forwarder`] (the binary's transport); one for a
//! moving actor waits for the next table. The protocol and why it keeps one
//! activation per actor: docs/architecture.md, "Cluster".
//!
//! [`Placement::owner`]: troupe_placement::Placement::owner

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};
use troupe_placement::Owner;

use super::{Reply, Runtime, Shared};
use crate::activation::{Activation, Envelope, Status};
use crate::error::CallError;
use crate::scheduler::BoxFuture;
use crate::types::{ActorId, Call, DeactivateReason, Payload};
use crate::validate;

/// How many times a call may be forwarded: daemons may briefly disagree on
/// the table, but a call bouncing further means something is wrong.
pub const MAX_FORWARD_HOPS: u32 = 2;

/// Carries calls to the daemon that owns their actor. The binary implements
/// it over `crates/transport`; the runtime only knows the owner's address.
pub trait Forwarder: Send + Sync + std::fmt::Debug + 'static {
    /// Runs `call` on the daemon at `address` and returns its answer. `hops`
    /// counts this forward (1 for the first).
    fn invoke(&self, address: &str, call: Call, hops: u32)
        -> BoxFuture<Result<Payload, CallError>>;

    /// Delivers a one-way call to the daemon at `address`.
    fn tell(&self, address: &str, call: Call, hops: u32) -> BoxFuture<Result<(), CallError>>;
}

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

    /// Hands off every active actor for which `keep` is false: its running
    /// turn finishes, it deactivates (reason Migration) and its state is
    /// flushed. Returns once all of them are gone, or the shutdown grace
    /// period passed (the error names how many remain).
    pub async fn hand_off(&self, keep: impl Fn(&ActorId) -> bool) -> Result<usize, CallError> {
        let shared = &self.shared;
        let mut leaving = Vec::new();
        shared.directory.for_each(|act| {
            if !keep(&act.id) {
                leaving.push(act.clone());
            }
        });
        let count = leaving.len();
        shared
            .deactivate_all(leaving, DeactivateReason::Migration)
            .await?;
        if count > 0 {
            info!(actors = count, "handed off actors");
        }
        Ok(count)
    }

    /// The placement lease lapsed: another daemon may own these actors now.
    /// Drops every activation at once, without writing its state (a write
    /// now could land after the new owner read the store) and without
    /// waiting for the app; queued calls fail with UNAVAILABLE.
    pub fn fence(&self) {
        let shared = &self.shared;
        let mut dropped = Vec::new();
        shared.directory.for_each(|act| dropped.push(act.clone()));
        let mut unflushed = 0usize;
        for act in &dropped {
            let mut failed = Vec::new();
            shared.directory.remove_if(act, |inner| {
                failed.extend(inner.mailbox.take_all());
                unflushed += usize::from(inner.is_dirty());
                inner.dirty = None;
                inner.binding = None;
                true
            });
            for env in failed {
                env.reply.send(Err(lease_lapsed()));
            }
        }
        let timers = std::mem::take(&mut *shared.timers.lock());
        for timer in timers.into_values().flat_map(|t| t.into_values()) {
            timer.task.abort();
        }
        warn!(
            activations = dropped.len(),
            unflushed, "placement lease lapsed: dropped every activation without writing"
        );
        shared.notify_if_shutting_down();
    }
}

pub(super) fn lease_lapsed() -> CallError {
    CallError::Unavailable(
        "this daemon lost its placement lease (it cannot reach the placement service), so it \
         serves no actors until it rejoins; retry, or call another daemon"
            .into(),
    )
}

impl Shared {
    pub(super) fn route(&self, actor: &ActorId) -> Result<Route, CallError> {
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
                        return Err(CallError::Unavailable(format!(
                            "actor {actor} is moving between daemons and the placement change did \
                             not finish in time; retry"
                        )));
                    }
                    self.placement_changed(deadline).await;
                }
                Route::Remote { .. } if hops + 1 > MAX_FORWARD_HOPS => {
                    return Err(CallError::Unavailable(format!(
                        "actor {actor} was forwarded {hops} times without reaching its owner \
                         (daemons disagree on the placement table); retry"
                    )));
                }
                route => return Ok(route),
            }
        }
    }

    /// Routes `call` until it can be delivered here, forwarding it or
    /// waiting out a table change. `Ok(Some(call))`: deliver locally.
    pub(super) async fn route_call(
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
            return Err(CallError::Unavailable(format!(
                "actor {} is owned by daemon {node} ({address}); call that daemon",
                call.actor
            )));
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
    pub(super) fn reroute_mailbox(self: &Arc<Self>, act: &Arc<Activation>) {
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

    /// Deactivates `acts` (running turns finish first) and waits until each
    /// is gone or re-activated, at most the shutdown grace period. Returns
    /// how many had a live activation to end.
    pub(super) async fn deactivate_all(
        self: &Arc<Self>,
        acts: Vec<Arc<Activation>>,
        reason: DeactivateReason,
    ) -> Result<usize, CallError> {
        if acts.is_empty() {
            return Ok(0);
        }
        self.admin_waiters.fetch_add(1, Ordering::SeqCst);
        let _waiting = AdminWaiting(self);
        let deadline = Instant::now() + self.config.shutdown_grace;
        let mut requested = vec![false; acts.len()];
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (mut pending, mut ended) = (0usize, 0usize);
            for (act, requested) in acts.iter().zip(requested.iter_mut()) {
                match self.try_deactivate(act, *requested) {
                    Step::Started => {
                        *requested = true;
                        pending += 1;
                        self.deactivate(act.clone(), reason);
                    }
                    Step::Wait => pending += 1,
                    Step::Done(live) => ended += usize::from(live),
                }
            }
            if pending == 0 {
                return Ok(ended);
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Err(CallError::DeadlineExceeded(format!(
                    "{pending} actors did not finish deactivating within {:?} (long turns, or \
                     their app is slow to answer)",
                    self.config.shutdown_grace
                )));
            }
        }
    }

    fn try_deactivate(&self, act: &Arc<Activation>, requested: bool) -> Step {
        let mut inner = act.inner.lock();
        match inner.status {
            Status::Deactivating => Step::Wait,
            // Ours finished: gone, or back to Unloaded because calls came in.
            _ if requested => Step::Done(true),
            Status::Idle => {
                inner.status = Status::Deactivating;
                Step::Started
            }
            Status::Running | Status::Activating => Step::Wait,
            Status::Unloaded | Status::Gone => Step::Done(false),
        }
    }
}

/// One step of deactivating an activation on request.
enum Step {
    /// The activation is now Deactivating on our behalf.
    Started,
    /// A turn or an activation is under way; wait for it.
    Wait,
    /// Nothing (more) to do; whether there was an activation.
    Done(bool),
}

/// Stops counting a caller as waiting on `changed`, however it ends.
struct AdminWaiting<'a>(&'a Arc<Shared>);

impl Drop for AdminWaiting<'_> {
    fn drop(&mut self) {
        self.0.admin_waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The longest a call waits for a table change before giving up.
pub(super) fn route_deadline(shared: &Shared, timeout: Option<Duration>) -> Instant {
    let limit = shared.config.call_timeout;
    Instant::now() + timeout.map_or(limit, |t| t.min(limit))
}
