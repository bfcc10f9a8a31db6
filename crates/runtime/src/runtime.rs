//! The runtime handle and the life of an activation.
//!
//! ```text
//!  invoke/tell ─▶ enqueue ─▶ mailbox ─▶ run queue ─▶ worker ─▶ host.turn(done)
//!                   │                                              │
//!                   └─ activation created on first call            ▼
//!                      (waits for a host, loads state)     turn_finished: apply
//!                                                         changes, reply, next
//! ```
//!
//! Status moves Unloaded → Activating → Idle ⇄ Running → Deactivating → Gone
//! (or back to Unloaded when calls arrived during deactivation). Only the
//! thread that moves an activation out of Idle starts its turn, which is what
//! makes turns one at a time per actor.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::time::Instant;
use tracing::{debug, info, warn};
use troupe_placement::Placement;
use troupe_storage::{ReminderKey, ReminderStore, StateStore};

use crate::activation::{Activation, Envelope, Inner, Status};
use crate::config::RuntimeConfig;
use crate::directory::Directory;
use crate::error::{CallError, ConfigError};
use crate::flush::Flusher;
use crate::host::{
    ActivateDone, ActivateRequest, ActorHost, DeactivateDone, DeactivateRequest, TurnDone,
    TurnMeta, TurnOutcome, TurnRequest,
};
use crate::hosts::{Binding, HostRegistration, HostRegistry};
use crate::metrics::Metrics;
use crate::run_queue::RunQueue;
use crate::scheduler::{
    Dispatch, ReminderInfo, ReminderSpec, RetryPolicy, Scheduler, WriteRequest, ALARM_NAME,
};
use crate::slots::PendingCalls;
use crate::types::{
    ActorId, Call, CallChain, CallExtra, CallTrace, DeactivateReason, Payload, StateChange,
    StateMode, StateSnapshot, TurnKind, TypeSpec, TRACE_TARGET,
};
use crate::validate;

mod cluster;
mod inspect;

pub use cluster::{Forwarder, Route, MAX_FORWARD_HOPS};

pub use inspect::{ActivationState, ActorDetails, ActorInfo, RuntimeStatus, TimerInfo, TypeStatus};

/// Where a call's result goes.
#[derive(Debug, Default)]
pub(crate) enum Reply {
    /// One-way (tell): the result is dropped.
    #[default]
    None,
    To(oneshot::Sender<Result<Payload, CallError>>),
}

impl Reply {
    pub(crate) fn abandoned(&self) -> bool {
        match self {
            Reply::None => false,
            Reply::To(tx) => tx.is_closed(),
        }
    }

    pub(crate) fn send(self, result: Result<Payload, CallError>) {
        if let Reply::To(tx) = self {
            // The caller may have given up; nothing to do then.
            let _ = tx.send(result);
        }
    }
}

/// The handle to a running actor runtime. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Runtime {
    shared: Arc<Shared>,
}

pub(crate) struct Shared {
    pub(crate) config: RuntimeConfig,
    directory: Directory,
    hosts: HostRegistry,
    flusher: Arc<Flusher>,
    /// Consulted before activating: only the owner may.
    placement: Arc<dyn Placement>,
    pending: &'static PendingCalls,
    /// One run queue per worker; an activation with work sits on one.
    workers: Vec<Arc<RunQueue<Runnable>>>,
    /// Set by the first `start`.
    started: AtomicBool,
    started_at: Instant,
    /// Milliseconds since start, refreshed by the sweeper: idle tracking
    /// needs no more precision than the sweep period, and reading it costs
    /// nothing on the turn path.
    coarse_now_ms: AtomicU64,
    shutting_down: AtomicBool,
    /// Signals the background tasks (flusher, sweeper) to end.
    stop: Arc<Notify>,
    /// During shutdown or while an admin waits: an activation became idle
    /// or went away.
    changed: Notify,
    /// Admin calls waiting on `changed`.
    admin_waiters: std::sync::atomic::AtomicUsize,
    /// Durable reminders and alarms.
    scheduler: Arc<Scheduler>,
    /// Taken by `start`, which gives it to the scheduler's writer task.
    scheduler_writes: Mutex<Option<mpsc::UnboundedReceiver<WriteRequest>>>,
    /// Timers of active actors, by name; aborted when the actor deactivates.
    timers: Mutex<HashMap<ActorId, HashMap<String, Timer>>>,
    /// Counters and histograms, when `config.metrics` is on.
    metrics: Option<Arc<Metrics>>,
    /// Wall-clock time of `started_at`, for timestamps shown to people.
    started_unix_ms: u64,
    /// Carries calls to other daemons, in a cluster.
    forwarder: OnceLock<Arc<dyn Forwarder>>,
}

/// A running timer of an active actor.
#[derive(Debug)]
struct Timer {
    task: tokio::task::AbortHandle,
    first_due: Instant,
    period: Option<Duration>,
    keep_alive: bool,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("config", &self.config)
            .field("placement", &self.placement)
            .finish_non_exhaustive()
    }
}

/// An entry of a worker's run queue.
struct Runnable {
    act: Arc<Activation>,
    /// Direct dispatch: a call for an idle actor with an empty mailbox rides
    /// here instead of in the mailbox. It is always the actor's oldest call,
    /// so order holds; it saves the mailbox buffer and keeps the call in the
    /// queue's sequential memory, which stays warm in cache.
    first: Option<Envelope>,
}

// === impl Runtime ===

impl Runtime {
    /// Checks the configuration and wires the runtime; starts nothing.
    pub fn create(
        config: RuntimeConfig,
        store: Arc<dyn StateStore>,
        reminders: Arc<dyn ReminderStore>,
        placement: Arc<dyn Placement>,
    ) -> Result<Self, ConfigError> {
        config.check()?;
        let (scheduler, scheduler_writes) = Scheduler::new(reminders);
        let metrics = config.metrics.then(|| Arc::new(Metrics::new()));
        let workers = (0..config.workers)
            .map(|_| Arc::new(RunQueue::new()))
            .collect();
        let shared = Shared {
            directory: Directory::new(),
            hosts: HostRegistry::new(),
            flusher: Arc::new(Flusher::new(
                store,
                config.flush_max_dirty_bytes,
                metrics.clone(),
                placement.clone(),
            )),
            placement,
            pending: PendingCalls::new(config.max_pending_calls),
            workers,
            started: AtomicBool::new(false),
            started_at: Instant::now(),
            coarse_now_ms: AtomicU64::new(0),
            shutting_down: AtomicBool::new(false),
            stop: Arc::new(Notify::new()),
            changed: Notify::new(),
            admin_waiters: std::sync::atomic::AtomicUsize::new(0),
            scheduler,
            scheduler_writes: Mutex::new(Some(scheduler_writes)),
            timers: Mutex::new(HashMap::new()),
            metrics,
            started_unix_ms: crate::scheduler::unix_now_ms(),
            forwarder: OnceLock::new(),
            config,
        };
        Ok(Self {
            shared: Arc::new(shared),
        })
    }

    /// Spawns the workers, the flusher and the idle sweeper on the current
    /// tokio runtime. Calling it twice does nothing the second time.
    pub fn start(&self) {
        if self.shared.started.swap(true, Ordering::SeqCst) {
            return;
        }
        for queue in &self.shared.workers {
            tokio::spawn(self.shared.clone().work(queue.clone()));
        }
        let flusher = self.shared.flusher.clone();
        tokio::spawn(flusher.run(self.shared.config.flush_interval, self.shared.stop.clone()));
        tokio::spawn(self.shared.clone().sweep_idle());
        if let Some(writes) = self.shared.scheduler_writes.lock().take() {
            let dispatch: Arc<dyn Dispatch> = Arc::new(Firing(self.shared.clone()));
            self.shared.scheduler.start(writes, dispatch);
        }
        if let Some(mut changes) = self.shared.placement.changes() {
            // Reminders of actors this daemon gained are in the store, not in
            // its memory: look again whenever owners change.
            let scheduler = self.shared.scheduler.clone();
            tokio::spawn(async move {
                // Also now and then: a daemon routing by an older table may
                // have stored a reminder for an actor it did not own, which
                // the owner's scheduler, already past its due time, would
                // otherwise only see at the next change.
                let mut every = tokio::time::interval(crate::scheduler::HORIZON / 2);
                every.tick().await;
                loop {
                    tokio::select! {
                        changed = changes.changed() => {
                            if changed.is_err() {
                                return;
                            }
                        }
                        _ = every.tick() => {}
                    }
                    scheduler.reload();
                }
            });
        }
    }

    pub fn config(&self) -> &RuntimeConfig {
        &self.shared.config
    }

    /// Registers a host for actor types; calls for them start reaching it.
    pub fn register_host(
        &self,
        host: Arc<dyn ActorHost>,
        types: Vec<TypeSpec>,
    ) -> Result<HostRegistration, CallError> {
        let name = host.name().to_owned();
        let registration = self.shared.hosts.register(
            host,
            types,
            &self.shared.config,
            self.shared.metrics.as_deref(),
        )?;
        info!(
            host = %name,
            host_id = registration.host_id,
            types = ?registration.types.iter().map(|t| t.name.to_string()).collect::<Vec<_>>(),
            "host registered"
        );
        Ok(registration)
    }

    /// The host went away: its activations end (state flushed), turns it was
    /// running fail with UNAVAILABLE, queued calls wait for another host.
    pub fn unregister_host(&self, host_id: u64) {
        self.shared.hosts.unregister(host_id);
        let mut idle = Vec::new();
        self.shared.directory.for_each(|act| {
            let mut inner = act.inner.lock();
            if inner.binding.as_ref().is_none_or(|b| b.host_id != host_id) {
                return;
            }
            match inner.status {
                Status::Idle => {
                    inner.status = Status::Deactivating;
                    idle.push(act.clone());
                }
                Status::Running | Status::Activating | Status::Deactivating => {
                    inner.set_host_lost(true);
                }
                Status::Unloaded | Status::Gone => {}
            }
        });
        info!(host_id, activations = idle.len(), "host unregistered");
        for act in idle {
            tokio::spawn(self.shared.clone().finish_deactivation(act, Vec::new()));
        }
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
            let deadline = cluster::route_deadline(&shared, call.timeout);
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

    /// Reads state without a turn: from the activation when it has loaded
    /// state, otherwise from the store. Also says whether it is active.
    pub async fn get_state(
        &self,
        actor: &ActorId,
        keys: &[String],
    ) -> Result<(Vec<(String, Bytes)>, bool), CallError> {
        validate::name("actor type", &actor.ty)?;
        validate::name("actor id", &actor.id)?;
        let wanted = |k: &str| keys.is_empty() || keys.iter().any(|w| w == k);
        if let Some(act) = self.shared.directory.get(actor) {
            let inner = act.inner.lock();
            if inner.state_loaded() {
                let mut out: Vec<_> = inner
                    .state
                    .iter()
                    .filter(|(k, _)| wanted(k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                out.sort_by(|a, b| a.0.cmp(&b.0));
                return Ok((out, inner.status != Status::Unloaded));
            }
        }
        let stored = self
            .shared
            .flusher
            .store()
            .load(&actor.ty, &actor.id)
            .await
            .map_err(|e| {
                CallError::Unavailable(format!("cannot read the state of {actor}: {e}"))
            })?;
        Ok((
            stored.into_iter().filter(|(k, _)| wanted(k)).collect(),
            false,
        ))
    }

    /// Graceful stop: refuse new calls, let turns finish, deactivate every
    /// actor through its host, flush, stop background tasks.
    pub async fn shutdown(&self) {
        let shared = &self.shared;
        shared.shutting_down.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + shared.config.shutdown_grace;
        info!(
            active = shared.directory.len(),
            "shutting down: draining actors"
        );
        loop {
            let changed = shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let mut remaining = 0usize;
            let mut to_deactivate = Vec::new();
            shared.directory.for_each(|act| {
                remaining += 1;
                let mut inner = act.inner.lock();
                let free = inner.mailbox.is_empty() && !inner.scheduled;
                match inner.status {
                    Status::Idle if free => {
                        inner.status = Status::Deactivating;
                        to_deactivate.push(act.clone());
                    }
                    Status::Unloaded if !inner.scheduled => {
                        // Never got a host: nothing can run its calls now.
                        for env in inner.mailbox.take_all() {
                            env.reply.send(Err(shutting_down_error()));
                        }
                        inner.status = Status::Deactivating;
                        to_deactivate.push(act.clone());
                    }
                    _ => {}
                }
            });
            if remaining == 0 {
                break;
            }
            for act in to_deactivate {
                shared.deactivate(act, DeactivateReason::Shutdown);
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                warn!(
                    remaining = shared.directory.len(),
                    "shutdown grace period over; flushing what is left"
                );
                break;
            }
        }
        if let Err(e) = shared.flusher.flush_dirty().await {
            warn!(error = %e, "final flush failed");
        }
        shared.stop.notify_waiters();
        info!("runtime stopped");
    }

    /// Writes all dirty state now (tests, benchmarks, admin).
    pub async fn flush(&self) -> Result<(), CallError> {
        self.shared.flusher.flush_dirty().await
    }
}

// === impl ActorRef ===

/// A handle to one actor for in-process callers (hosts, tests, benchmarks).
///
/// It remembers the actor's activation, so repeated calls skip the directory
/// lookup; when the actor was deactivated meanwhile, the next call looks it
/// up again. Everything after the lookup (mailbox, turn order, host, state)
/// is the same path as [`Runtime::invoke`] and [`Runtime::tell`].
#[derive(Debug)]
pub struct ActorRef {
    shared: Arc<Shared>,
    id: ActorId,
    /// Read with a plain load on every call, so no lock: set on first use
    /// and kept; once that activation ends, calls resolve by id.
    activation: OnceLock<Arc<Activation>>,
}

impl Runtime {
    /// A handle to `id`; checks the names once, here.
    pub fn actor_ref(&self, id: ActorId) -> Result<ActorRef, CallError> {
        self.shared.check_target(&id)?;
        Ok(ActorRef {
            shared: self.shared.clone(),
            id,
            activation: OnceLock::new(),
        })
    }
}

impl ActorRef {
    pub fn id(&self) -> &ActorId {
        &self.id
    }

    /// Queues a call whose result nobody waits for.
    pub fn tell(&self, method: Arc<str>, payload: Payload) -> Result<(), CallError> {
        let envelope = self
            .shared
            .envelope(TurnKind::Call, method, payload, None, Reply::None)?;
        self.shared
            .deliver(&self.id, Some(&self.activation), envelope)
    }

    /// Calls a method and waits for its result (at most the call timeout).
    pub async fn invoke(&self, method: Arc<str>, payload: Payload) -> Result<Payload, CallError> {
        let (tx, rx) = oneshot::channel();
        let envelope =
            self.shared
                .envelope(TurnKind::Call, method, payload, None, Reply::To(tx))?;
        self.shared
            .deliver(&self.id, Some(&self.activation), envelope)?;
        wait_reply(&self.id, self.shared.config.call_timeout, rx).await
    }
}

/// The method's name when `env` calls a read-only method of its type.
fn readonly_method(binding: &Binding, env: &Envelope) -> Option<Arc<str>> {
    let readonly = &binding.options.readonly_methods;
    (env.kind == TurnKind::Call && readonly.iter().any(|m| **m == *env.name))
        .then(|| env.name.clone())
}

/// Pops the read-only calls at the head of the mailbox so they run beside
/// the read-only turn(s) already running; stops at the first writer, which
/// keeps its place and waits for the group to end.
fn admit_readers(inner: &mut Inner, binding: &Binding) -> Vec<(Envelope, Arc<str>)> {
    let mut joining = Vec::new();
    while inner.extra_turns < u8::MAX {
        let Some(method) = inner
            .mailbox
            .front()
            .and_then(|e| readonly_method(binding, e))
        else {
            break;
        };
        let Some(env) = inner.mailbox.pop_front() else {
            break;
        };
        if env.abandoned() {
            continue;
        }
        inner.extra_turns += 1;
        joining.push((env, method));
    }
    joining
}

/// `a → b → c`, for error messages.
fn chain_path(actors: &[ActorId]) -> String {
    actors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" → ")
}

/// A read-only turn returned state changes: refused, state unchanged.
fn readonly_wrote(actor: &ActorId, method: Option<&str>, changes: &[StateChange]) -> CallError {
    let mut keys: Vec<&str> = changes.iter().map(|c| c.key.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    CallError::FailedPrecondition(format!(
        "method '{}' of {actor} is read-only but changed state (keys: {}); the changes were \
         refused and the state is unchanged. Write state from a method that is not read-only",
        method.unwrap_or("?"),
        keys.join(", ")
    ))
}

/// The span of one turn, a child of its call's span.
fn turn_span(call: &tracing::Span, actor: &ActorId, method: &str, kind: TurnKind) -> tracing::Span {
    tracing::info_span!(
        target: TRACE_TARGET,
        parent: call,
        "troupe.turn",
        troupe.actor.r#type = %actor.ty,
        troupe.actor.id = %actor.id,
        troupe.method = %method,
        troupe.turn.kind = kind.as_str(),
        otel.status_code = tracing::field::Empty,
        error = tracing::field::Empty,
    )
}

async fn wait_reply(
    actor: &ActorId,
    timeout: Duration,
    rx: oneshot::Receiver<Result<Payload, CallError>>,
) -> Result<Payload, CallError> {
    match tokio::time::timeout(timeout, rx).await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err(CallError::Unavailable(format!(
            "the call to {actor} was dropped before it finished; retry it"
        ))),
        Err(_) => Err(CallError::DeadlineExceeded(format!(
            "the call to {actor} did not finish within {timeout:?}"
        ))),
    }
}

fn shutting_down_error() -> CallError {
    CallError::Unavailable(
        "the daemon is shutting down; retry after it restarts or against another daemon".into(),
    )
}

// === impl Shared ===

impl Shared {
    fn now_ms(&self) -> u64 {
        self.started_at.elapsed().as_millis() as u64
    }

    /// Counts a call that failed without a turn result (refused, timed out).
    fn count_failed(&self, ty: &str, kind: TurnKind, error: &CallError) {
        if let Some(metrics) = &self.metrics {
            metrics.call_failed(ty, kind, error);
        }
    }

    /// Wall-clock milliseconds of a coarse runtime timestamp (activation
    /// clocks are truncated to u32; `now` recovers the high bits).
    fn unix_ms_of(&self, coarse: u32) -> u64 {
        let now = self.now_ms();
        let ago = u64::from((now as u32).wrapping_sub(coarse));
        self.started_unix_ms + now.saturating_sub(ago)
    }

    /// Applies changes to the state cache (under the activation's lock,
    /// `inner`) and hands the actor to the flusher.
    fn record_changes(&self, act: &Arc<Activation>, inner: &mut Inner, changes: &[StateChange]) {
        if changes.is_empty() {
            return;
        }
        let bytes = inner.apply(changes);
        self.flusher.mark_dirty(act, inner, bytes);
    }

    /// Whether `id` has a live activation (one that runs turns).
    fn is_active(&self, id: &ActorId) -> bool {
        self.directory
            .get(id)
            .is_some_and(|act| matches!(act.inner.lock().status, Status::Idle | Status::Running))
    }

    /// Truncated to u32 for activations (see `Inner::last_active_ms`).
    fn coarse_now_ms(&self) -> u32 {
        self.coarse_now_ms.load(Ordering::Relaxed) as u32
    }

    fn schedule(&self, act: Arc<Activation>) {
        self.push_runnable(Runnable { act, first: None });
    }

    fn push_runnable(&self, runnable: Runnable) {
        // Spread by address: stable per activation, even across workers.
        let worker = (Arc::as_ptr(&runnable.act) as usize >> 6) % self.workers.len();
        self.workers[worker].push(runnable);
    }

    fn enqueue(self: &Arc<Self>, call: Call, reply: Reply) -> Result<(), CallError> {
        self.check_target(&call.actor)?;
        self.enqueue_routed(call, reply)
    }

    /// [`Shared::enqueue`] for a call whose route was just found local (it
    /// checked the names and the owner already).
    fn enqueue_routed(self: &Arc<Self>, call: Call, reply: Reply) -> Result<(), CallError> {
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
                Some(crate::scheduler::unix_now_ms() + timeout.as_millis() as u64);
        }
        let mut envelope = self.envelope(call.kind, call.method, call.payload, extra, reply)?;
        envelope.reentering = reentering;
        self.deliver(&call.actor, None, envelope)
    }

    /// Checks a call made from inside a turn against its chain: refuses
    /// runaway depth, and a cycle into a type that is not re-entrant (the
    /// actor already waits on this very chain, so the call could only ever
    /// time out). Returns whether the call re-enters a re-entrant actor.
    fn check_chain(&self, target: &ActorId, chain: &CallChain) -> Result<bool, CallError> {
        let limit = self.config.max_chain_depth;
        if chain.actors.len() >= limit {
            return Err(CallError::FailedPrecondition(format!(
                "call chain {} is {} calls deep, the limit ({limit}); calling {target} from it \
                 looks like runaway recursion: {} → {target}. Stop the recursion earlier",
                chain.id,
                chain.actors.len(),
                chain_path(&chain.actors[chain.actors.len().saturating_sub(4)..]),
            )));
        }
        let Some(first) = chain.actors.iter().position(|a| a == target) else {
            return Ok(false);
        };
        if self
            .hosts
            .options(&target.ty)
            .is_some_and(|options| options.reentrant)
        {
            return Ok(true);
        }
        Err(CallError::FailedPrecondition(format!(
            "deadlock: {} → {target} — {target} is waiting on this call chain already, so the call \
             would wait forever. Register actor type '{}' as reentrant to let a chain call back \
             into it, or break the cycle",
            chain_path(&chain.actors[first..]),
            target.ty,
        )))
    }

    /// Checks that `actor` may be called here.
    fn check_target(&self, actor: &ActorId) -> Result<(), CallError> {
        if self.shutting_down.load(Ordering::Relaxed) {
            return Err(shutting_down_error());
        }
        match self.route(actor)? {
            Route::Local => Ok(()),
            Route::Remote { node, address } => Err(CallError::Unavailable(format!(
                "actor {actor} is owned by daemon {node} ({address}); call that daemon"
            ))),
            Route::Wait => Err(CallError::Unavailable(format!(
                "actor {actor} is moving between daemons; retry in a moment"
            ))),
        }
    }

    /// Checks a call's method and payload and takes its place under the
    /// daemon-wide bound.
    fn envelope(
        &self,
        kind: TurnKind,
        method: Arc<str>,
        payload: Payload,
        extra: Option<Box<CallExtra>>,
        reply: Reply,
    ) -> Result<Envelope, CallError> {
        if self.shutting_down.load(Ordering::Relaxed) {
            return Err(shutting_down_error());
        }
        validate::name("method name", &method)?;
        validate::payload(payload.len(), self.config.max_payload_bytes)?;
        Ok(Envelope {
            kind,
            name: method,
            payload,
            extra,
            reply,
            slot: self.pending.acquire()?,
            touch: true,
            reentering: false,
        })
    }

    /// Puts a call in the actor's mailbox (or straight on a run queue).
    /// `bound` is an [`ActorRef`]'s activation: used while it lives, set on first use.
    fn deliver(
        self: &Arc<Self>,
        actor: &ActorId,
        mut bound: Option<&OnceLock<Arc<Activation>>>,
        envelope: Envelope,
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
            let max_mailbox = match &inner.binding {
                Some(b) => b.options.max_mailbox,
                None => self
                    .hosts
                    .options(&act.id.ty)
                    .map_or(self.config.default_max_mailbox, |o| o.max_mailbox),
            };
            if inner.mailbox.len() >= max_mailbox {
                return Err(CallError::Overloaded(format!(
                    "the mailbox of actor {} is full ({max_mailbox} calls queued, the type's \
                     max_mailbox); retry with backoff",
                    act.id
                )));
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

    /// NOT_FOUND for a type no app registered, naming the ones that are.
    fn unknown_type(&self, ty: &str) -> CallError {
        CallError::UnknownType {
            actor_type: ty.to_owned(),
            registered: self
                .hosts
                .hosted_types()
                .into_iter()
                .map(|(t, _)| t)
                .collect(),
        }
    }

    fn new_activation(&self, id: &ActorId) -> Result<Activation, CallError> {
        // Unknown types wait for an app only while the daemon has just
        // started (apps reconnecting after a restart); later they are errors.
        if self.hosts.options(&id.ty).is_none()
            && self.started_at.elapsed() >= self.config.host_wait
        {
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
        Ok(Activation::new(id, self.coarse_now_ms()))
    }

    /// A worker: runs activations off its queue in batches.
    async fn work(self: Arc<Self>, queue: Arc<RunQueue<Runnable>>) {
        const BATCH: usize = 64;
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            queue.pop_batch(&mut batch, BATCH).await;
            // With many actors busy, the activations on a run queue have gone
            // cold in cache. Touching each one first, with loads that do not
            // depend on each other, lets the CPU fetch them all at once
            // instead of stalling on them one by one.
            let mut touched = 0usize;
            for r in &batch {
                touched += usize::from(r.act.inner.is_locked());
                if let Some(env) = &r.first {
                    touched += usize::from(env.payload.data.first().copied().unwrap_or(0));
                }
            }
            std::hint::black_box(touched);
            for runnable in batch.drain(..) {
                self.run(runnable);
            }
            // A queue that never empties must still let timers, activations
            // and I/O on this thread run.
            tokio::task::consume_budget().await;
        }
    }

    /// A worker picked an activation off its run queue.
    fn run(self: &Arc<Self>, runnable: Runnable) {
        let Runnable { act, first } = runnable;
        let mut inner = act.inner.lock();
        inner.scheduled = false;
        // A directly dispatched call runs now if the actor is still idle;
        // otherwise it goes back to the front of the mailbox, where it belongs.
        let mut first = first.filter(|env| !env.abandoned());
        if inner.status != Status::Idle || inner.binding.is_none() {
            if let Some(env) = first.take() {
                inner.mailbox.push_front(env);
            }
        }
        match inner.status {
            Status::Unloaded if !inner.mailbox.is_empty() => {
                inner.status = Status::Activating;
                drop(inner);
                tokio::spawn(self.clone().activate(act));
            }
            Status::Idle => {
                let Some(binding) = inner.binding.clone() else {
                    // Idle always has a host; be safe and re-activate.
                    inner.status = Status::Unloaded;
                    inner.scheduled = true;
                    drop(inner);
                    self.schedule(act);
                    return;
                };
                let Some(env) = first.or_else(|| inner.next_envelope()) else {
                    return;
                };
                inner.status = Status::Running;
                let readonly = readonly_method(&binding, &env);
                if readonly.is_none() {
                    let state = inner.state.clone();
                    drop(inner);
                    self.start_turn(act, &binding, env, state, None);
                    return;
                }
                inner.set_reading(true);
                let state = inner.state.clone();
                self.start_readers(&act, &binding, inner);
                self.start_turn(act, &binding, env, state, readonly);
            }
            Status::Running if inner.reading() => {
                // A read-only group is running: read-only calls at the head
                // of the mailbox join it (a writer waits for all of them).
                if let Some(binding) = inner.binding.clone() {
                    self.start_readers(&act, &binding, inner);
                }
            }
            _ => {}
        }
    }

    /// Starts the read-only calls at the head of the mailbox beside the
    /// running read-only group; takes the activation's lock guard and
    /// releases it before handing turns to the host.
    fn start_readers(
        self: &Arc<Self>,
        act: &Arc<Activation>,
        binding: &Binding,
        mut inner: parking_lot::MutexGuard<'_, Inner>,
    ) {
        let joining = admit_readers(&mut inner, binding);
        let state = inner.state.clone();
        drop(inner);
        for (env, method) in joining {
            self.start_turn(act.clone(), binding, env, state.clone(), Some(method));
        }
    }

    /// Hands one turn to the host. The activation is already `Running` (and
    /// counted in `extra_turns` when it runs beside others).
    fn start_turn(
        self: &Arc<Self>,
        act: Arc<Activation>,
        binding: &Binding,
        env: Envelope,
        state: StateSnapshot,
        readonly: Option<Arc<str>>,
    ) {
        let mut extra = env.extra;
        let span = extra.as_mut().and_then(|e| e.trace.as_mut()).map(|trace| {
            // The host sees the turn's span; the caller's W3C
            // context stays for hosts when nothing is exported.
            let span = turn_span(&trace.span, &act.id, &env.name, env.kind);
            trace.span = span.clone();
            Box::new(span)
        });
        let meta = TurnMeta {
            kind: env.kind,
            touch: env.touch,
            started: binding.stats.as_ref().map(|_| std::time::Instant::now()),
            readonly,
        };
        let request = TurnRequest {
            kind: env.kind,
            name: env.name,
            payload: env.payload,
            extra,
            state,
        };
        let done = TurnDone {
            rt: self.clone(),
            act: Some(act),
            reply: env.reply,
            _slot: env.slot,
            meta,
            span,
        };
        binding.host.turn(request, done);
    }

    /// Finds a host (waiting a bounded time), loads state, asks the host to
    /// create the instance.
    async fn activate(self: Arc<Self>, act: Arc<Activation>) {
        // Part of the trace of the call that caused it, when it has one.
        let parent = {
            let inner = act.inner.lock();
            inner.mailbox.first_trace_span()
        };
        let span = tracing::info_span!(
            target: TRACE_TARGET,
            parent: parent.as_ref().and_then(|s| s.id()),
            "troupe.activate",
            troupe.actor.r#type = %act.id.ty,
            troupe.actor.id = %act.id.id,
            otel.status_code = tracing::field::Empty,
            error = tracing::field::Empty,
        );
        let error_span = span.clone();
        if let Err(error) =
            tracing::Instrument::instrument(self.clone().activate_in_span(act, span.clone()), span)
                .await
        {
            error_span.record("otel.status_code", "ERROR");
            error_span.record("error", tracing::field::display(&error));
        }
    }

    /// Errors are the ones the queued calls failed with.
    async fn activate_in_span(
        self: Arc<Self>,
        act: Arc<Activation>,
        span: tracing::Span,
    ) -> Result<(), CallError> {
        // The table may have changed since the calls were routed here.
        if self.route(&act.id).ok() != Some(Route::Local) {
            self.reroute_mailbox(&act);
            return Ok(());
        }
        let binding = match self.hosts.pick(&act.id.ty) {
            Some(b) => Some(b),
            None => {
                debug!(actor = %act.id, "waiting for an app that hosts the type");
                let deadline = Instant::now() + self.config.host_wait;
                self.hosts.wait_for(&act.id.ty, deadline).await
            }
        };
        let Some(binding) = binding else {
            // Never registered at all is the same answer as after the start-up
            // window: the type is unknown. Registered before means its app is away.
            let error = if self.hosts.options(&act.id.ty).is_none() {
                self.unknown_type(&act.id.ty)
            } else {
                CallError::Unavailable(format!(
                    "no connected app hosts actor type '{}' (waited {:?}); start or restart the \
                     app that registers it",
                    act.id.ty, self.config.host_wait
                ))
            };
            self.abandon(act, error.clone());
            return Err(error);
        };
        if !act.inner.lock().state_loaded() {
            match self.flusher.store().load(&act.id.ty, &act.id.id).await {
                Ok(entries) => {
                    let mut inner = act.inner.lock();
                    inner.state = entries.into_iter().collect();
                    inner.set_state_loaded();
                }
                Err(e) => {
                    let error = CallError::Unavailable(format!(
                        "cannot load the state of {}: {e}; retry later",
                        act.id
                    ));
                    self.abandon(act, error.clone());
                    return Err(error);
                }
            }
        }
        let state = {
            let mut inner = act.inner.lock();
            inner.binding = Some(binding.clone());
            inner.set_host_lost(false);
            inner.activated_ms = self.coarse_now_ms();
            inner.state.clone()
        };
        if let Some(stats) = &binding.stats {
            stats.activated();
        }

        debug!(actor = %act.id, host = binding.host.name(), "activating");
        let request = ActivateRequest {
            actor: act.id.clone(),
            state,
        };
        binding.host.activate(
            request,
            ActivateDone {
                rt: self.clone(),
                act: Some(act),
                // Open until the host answers.
                _span: span,
            },
        );
        Ok(())
    }

    pub(crate) fn activation_finished(
        self: &Arc<Self>,
        act: Arc<Activation>,
        outcome: Result<Vec<StateChange>, CallError>,
    ) {
        let outcome = outcome.and_then(|changes| {
            validate::state_changes(&changes, self.config.max_payload_bytes).map(|()| changes)
        });
        match outcome {
            Ok(changes) => {
                let mut inner = act.inner.lock();
                self.record_changes(&act, &mut inner, &changes);
                inner.last_active_ms = self.coarse_now_ms();
                if inner.host_lost() {
                    inner.status = Status::Deactivating;
                    drop(inner);
                    tokio::spawn(self.clone().finish_deactivation(act, Vec::new()));
                    return;
                }
                inner.status = Status::Idle;
                let wake = !inner.mailbox.is_empty() && !inner.scheduled;
                inner.scheduled |= wake;
                drop(inner);
                if wake {
                    self.schedule(act);
                }
                self.notify_if_shutting_down();
            }
            // The host left before the instance existed: start over with
            // another host; the calls keep their own deadlines.
            Err(CallError::Unavailable(reason)) => {
                debug!(actor = %act.id, %reason, "activation lost its host; retrying");
                let mut inner = act.inner.lock();
                inner.binding = None;
                inner.set_host_lost(false);
                inner.status = Status::Unloaded;
                let wake = !inner.mailbox.is_empty() && !inner.scheduled;
                inner.scheduled |= wake;
                drop(inner);
                if wake {
                    self.schedule(act);
                } else {
                    self.abandon(act, CallError::Unavailable(reason));
                }
            }
            Err(error) => self.abandon(act, error),
        }
    }

    /// Takes an activation that never got going out of service: returns its
    /// queued calls and forgets it, unless it still holds unflushed state
    /// (then it stays, unloaded, until that is written).
    fn unload(&self, act: &Arc<Activation>) -> VecDeque<Envelope> {
        let mut queued = VecDeque::new();
        self.directory.remove_if(act, |inner| {
            queued = inner.mailbox.take_all();
            inner.binding = None;
            if inner.is_dirty() {
                inner.status = Status::Unloaded;
                false
            } else {
                true
            }
        });
        queued
    }

    /// Activation failed: fail the queued calls with `error` and forget the
    /// activation (unless it still holds unflushed state).
    fn abandon(self: &Arc<Self>, act: Arc<Activation>, error: CallError) {
        for env in self.unload(&act) {
            self.count_failed(&act.id.ty, env.kind, &error);
            env.reply.send(Err(error.clone()));
        }
        self.notify_if_shutting_down();
    }

    pub(crate) fn turn_finished(
        self: &Arc<Self>,
        act: Arc<Activation>,
        reply: Reply,
        meta: &TurnMeta,
        span: Option<&tracing::Span>,
        outcome: Result<TurnOutcome, CallError>,
    ) {
        let touch = meta.touch;
        let mut inner = act.inner.lock();
        if inner.status == Status::Gone {
            // Fenced while the turn ran: its changes must not reach the store.
            drop(inner);
            reply.send(Err(cluster::lease_lapsed()));
            return;
        }
        // The lease ended and the fence is on its way: the actor may be
        // another daemon's already, so the turn's changes and answer must
        // not count.
        let outcome = if self.placement.may_serve() {
            outcome
        } else {
            Err(cluster::lease_lapsed())
        };
        let mut hold_until_flushed = false;
        let result = match outcome {
            Ok(TurnOutcome {
                result: Ok(_),
                changes,
            }) if meta.readonly.is_some() && !changes.is_empty() => {
                Err(readonly_wrote(&act.id, meta.readonly.as_deref(), &changes))
            }
            Ok(TurnOutcome {
                result: Ok(payload),
                changes,
            }) => match validate::state_changes(&changes, self.config.max_payload_bytes) {
                Ok(()) => {
                    if !changes.is_empty() {
                        self.record_changes(&act, &mut inner, &changes);
                        hold_until_flushed = self.config.write_through
                            || inner
                                .binding
                                .as_ref()
                                .is_some_and(|b| b.options.state_mode == StateMode::Durable);
                    }
                    Ok(payload)
                }
                Err(e) => Err(e),
            },
            Ok(TurnOutcome {
                result: Err(failure),
                ..
            }) => Err(CallError::Actor(failure)),
            Err(e) => Err(e),
        };
        if let Err(e) = &result {
            if let Some(span) = span {
                span.record("otel.status_code", "ERROR");
                span.record("error", tracing::field::display(e));
            }
        }
        if let (Some(started), Some(stats)) = (
            meta.started,
            inner.binding.as_ref().and_then(|b| b.stats.as_ref()),
        ) {
            match &result {
                Ok(_) | Err(CallError::Actor(_)) => {
                    stats.turn(meta.kind, started.elapsed(), result.is_ok());
                }
                Err(e) => {
                    if let Some(metrics) = &self.metrics {
                        metrics.call_failed(&act.id.ty, meta.kind, e);
                    }
                }
            }
        }
        inner.turns = inner.turns.wrapping_add(1);
        if touch {
            inner.last_active_ms = self.coarse_now_ms();
        }
        let mut deactivate = false;
        let mut wake = false;
        if inner.extra_turns > 0 {
            // Others of a read-only group, or the turn this one nested in,
            // are still running: the actor stays busy until the last ends.
            inner.extra_turns -= 1;
        } else if inner.host_lost() {
            inner.set_reading(false);
            inner.status = Status::Deactivating;
            deactivate = true;
        } else {
            inner.set_reading(false);
            inner.status = Status::Idle;
            wake = !inner.mailbox.is_empty() && !inner.scheduled;
            inner.scheduled |= wake;
        }
        drop(inner);
        if hold_until_flushed && self.config.write_through {
            let (flusher, act) = (self.flusher.clone(), act.clone());
            tokio::spawn(async move {
                let result = match flusher.flush_actor(&act).await {
                    Ok(()) => result,
                    Err(e) => Err(e),
                };
                reply.send(result);
            });
        } else if hold_until_flushed {
            self.flusher.hold_reply(reply, result);
        } else {
            reply.send(result);
        }
        if deactivate {
            tokio::spawn(self.clone().finish_deactivation(act, Vec::new()));
        } else if wake {
            self.schedule(act);
        }
        self.notify_if_shutting_down();
    }

    fn deactivate(self: &Arc<Self>, act: Arc<Activation>, reason: DeactivateReason) {
        let (binding, host_lost) = {
            let inner = act.inner.lock();
            (inner.binding.clone(), inner.host_lost())
        };
        if let Some(metrics) = &self.metrics {
            metrics.deactivated(&act.id.ty, reason);
        }
        match binding {
            Some(binding) if !host_lost => {
                debug!(actor = %act.id, ?reason, "deactivating");
                let span = tracing::info_span!(
                    target: TRACE_TARGET,
                    parent: None,
                    "troupe.deactivate",
                    troupe.actor.r#type = %act.id.ty,
                    troupe.actor.id = %act.id.id,
                    troupe.deactivate.reason = ?reason,
                );
                let request = DeactivateRequest {
                    actor: act.id.clone(),
                    reason,
                };
                binding.host.deactivate(
                    request,
                    DeactivateDone {
                        rt: self.clone(),
                        act: Some(act),
                        _span: span,
                    },
                );
            }
            _ => {
                tokio::spawn(self.clone().finish_deactivation(act, Vec::new()));
            }
        }
    }

    pub(crate) fn deactivation_finished(
        self: &Arc<Self>,
        act: Arc<Activation>,
        changes: Vec<StateChange>,
    ) {
        tokio::spawn(self.clone().finish_deactivation(act, changes));
    }

    /// Applies the host's last changes, flushes the actor, then removes it —
    /// or re-activates it if calls arrived meanwhile. The flush comes first
    /// so a new activation can only ever load the latest state.
    async fn finish_deactivation(self: Arc<Self>, act: Arc<Activation>, changes: Vec<StateChange>) {
        // Timers belong to the activation.
        if let Some(timers) = self.timers.lock().remove(&act.id) {
            for timer in timers.into_values() {
                timer.task.abort();
            }
        }
        if let Err(e) = validate::state_changes(&changes, self.config.max_payload_bytes) {
            warn!(actor = %act.id, error = %e, "deactivation changes refused");
        } else {
            self.record_changes(&act, &mut act.inner.lock(), &changes);
        }
        if let Err(e) = self.flusher.flush_actor(&act).await {
            warn!(actor = %act.id, error = %e, "flush on deactivation failed; state kept in memory");
        }
        let mut wake = false;
        let removed = self.directory.remove_if(&act, |inner| {
            if inner.mailbox.is_empty() && !inner.is_dirty() {
                return true;
            }
            inner.status = Status::Unloaded;
            inner.binding = None;
            inner.set_host_lost(false);
            wake = !inner.mailbox.is_empty() && !inner.scheduled;
            inner.scheduled |= wake;
            false
        });
        debug!(actor = %act.id, removed, "deactivated");
        if wake {
            self.schedule(act);
        }
        self.notify_if_shutting_down();
    }

    /// Wakes whoever waits for activations to change: a shutdown draining
    /// them, an admin waiting for a forced deactivation.
    fn notify_if_shutting_down(&self) {
        if self.shutting_down.load(Ordering::Relaxed)
            || self.admin_waiters.load(Ordering::Relaxed) > 0
        {
            self.changed.notify_waiters();
        }
    }

    /// Deactivates actors idle past their type's idle timeout.
    async fn sweep_idle(self: Arc<Self>) {
        // A new type may have a shorter idle timeout: recompute the period.
        let mut registrations = self.hosts.registrations();
        loop {
            // Refresh the clock before sleeping too: a registration wakes
            // this loop early, and new activations must not be stamped with
            // a time older than one period.
            self.coarse_now_ms.store(self.now_ms(), Ordering::Relaxed);
            let period = (self.min_idle_timeout() / 4)
                // Each sweep touches every activation; with long timeouts a
                // rare sweep is plenty (deactivation stays within 25 % + one
                // period of the timeout).
                .clamp(Duration::from_millis(10), Duration::from_secs(30));
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                changed = registrations.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    continue;
                }
                _ = self.stop.notified() => return,
            }
            if self.shutting_down.load(Ordering::Relaxed) {
                return;
            }
            let now = self.now_ms();
            self.coarse_now_ms.store(now, Ordering::Relaxed);
            let default_idle = self.config.default_idle_timeout;
            let mut expired = Vec::new();
            self.directory.for_each(|act| {
                // A busy actor is not idle; skip it rather than wait for its lock.
                let Some(mut inner) = act.inner.try_lock() else {
                    return;
                };
                let idle = inner
                    .binding
                    .as_ref()
                    .map_or(default_idle, |b| b.options.idle_timeout);
                // last_active_ms lags real time by up to one period (coarse
                // clock); adding it means no actor goes before its timeout.
                let needed = (idle + period).as_millis() as u64;
                if u64::from((now as u32).wrapping_sub(inner.last_active_ms)) < needed
                    || !inner.mailbox.is_empty()
                    || inner.scheduled
                {
                    return;
                }
                if matches!(inner.status, Status::Idle | Status::Unloaded) {
                    inner.status = Status::Deactivating;
                    expired.push(act.clone());
                }
            });
            for act in expired {
                self.deactivate(act, DeactivateReason::Idle);
            }
        }
    }

    fn min_idle_timeout(&self) -> Duration {
        let mut min = self.config.default_idle_timeout;
        self.hosts
            .for_each_options(|o| min = min.min(o.idle_timeout));
        min
    }
}

// === impl scheduling ===

/// Fires reminders and alarms as turns through the normal call path.
struct Firing(Arc<Shared>);

impl Dispatch for Firing {
    fn owns(&self, actor: &ActorId) -> bool {
        self.0.route(actor).ok() == Some(Route::Local)
    }

    fn fire(
        &self,
        actor: ActorId,
        alarm: bool,
        name: String,
        payload: Payload,
    ) -> crate::scheduler::BoxFuture<Result<(), CallError>> {
        let shared = self.0.clone();
        Box::pin(async move {
            let (kind, method) = if alarm {
                (TurnKind::Alarm, "alarm".to_owned())
            } else {
                (TurnKind::Reminder, name)
            };
            // A firing starts its own trace; its turn is the child.
            let span = tracing::info_span!(
                target: TRACE_TARGET,
                parent: None,
                "troupe.reminder",
                troupe.actor.r#type = %actor.ty,
                troupe.actor.id = %actor.id,
                troupe.reminder.name = %method,
                troupe.turn.kind = kind.as_str(),
                otel.status_code = tracing::field::Empty,
                error = tracing::field::Empty,
            );
            let extra = (!span.is_disabled()).then(|| {
                Box::new(CallExtra {
                    trace: Some(CallTrace {
                        span: span.clone(),
                        traceparent: String::new(),
                        tracestate: String::new(),
                    }),
                    ..CallExtra::default()
                })
            });
            let call = Call {
                kind,
                extra,
                ..Call::new(actor.clone(), method, payload)
            };
            let (tx, rx) = oneshot::channel();
            let result = match shared.enqueue(call, Reply::To(tx)) {
                Ok(()) => wait_reply(&actor, shared.config.call_timeout, rx).await,
                Err(e) => {
                    shared.count_failed(&actor.ty, kind, &e);
                    Err(e)
                }
            };
            match &result {
                Ok(_) => {
                    if let Some(metrics) = &shared.metrics {
                        metrics.fired(&actor.ty, alarm);
                    }
                }
                Err(e) => {
                    span.record("otel.status_code", "ERROR");
                    span.record("error", tracing::field::display(e));
                }
            }
            result.map(|_| ())
        })
    }
}

fn reminder_key(actor: &ActorId, name: &str) -> ReminderKey {
    ReminderKey {
        actor_type: actor.ty.to_string(),
        actor_id: actor.id.to_string(),
        name: name.to_owned(),
    }
}

fn check_reminder_name(name: &str) -> Result<(), CallError> {
    validate::name("reminder name", name)?;
    if name.starts_with('$') {
        return Err(CallError::InvalidArgument(format!(
            "reminder name {name:?} starts with '$', which is reserved; pick another name"
        )));
    }
    Ok(())
}

impl Runtime {
    /// Stores (or replaces) a reminder; it fires even if the actor is inactive.
    pub async fn set_reminder(&self, spec: ReminderSpec) -> Result<ReminderInfo, CallError> {
        self.check_schedule(&spec.actor, spec.payload.len())?;
        check_reminder_name(&spec.name)?;
        if let Some(until) = spec.until_unix_ms {
            if until < spec.due_unix_ms {
                return Err(CallError::InvalidArgument(format!(
                    "reminder {:?} ends (until) before it is first due; move `until` after `due`",
                    spec.name
                )));
            }
        }
        self.shared.scheduler.set(spec).await
    }

    pub async fn get_reminder(
        &self,
        actor: &ActorId,
        name: &str,
    ) -> Result<Option<ReminderInfo>, CallError> {
        self.shared.check_target(actor)?;
        self.shared.scheduler.get(&reminder_key(actor, name)).await
    }

    pub async fn delete_reminder(&self, actor: &ActorId, name: &str) -> Result<bool, CallError> {
        self.shared.check_target(actor)?;
        check_reminder_name(name)?;
        self.shared
            .scheduler
            .delete(reminder_key(actor, name))
            .await
    }

    /// Reminders (and alarms) of a type, or of one actor, in key order.
    pub async fn list_reminders(
        &self,
        actor_type: Option<&str>,
        actor_id: Option<&str>,
        after: Option<(&ActorId, &str)>,
        limit: usize,
    ) -> Result<Vec<ReminderInfo>, CallError> {
        if actor_id.is_some() && actor_type.is_none() {
            return Err(CallError::InvalidArgument(
                "listing the reminders of one actor needs its type too".into(),
            ));
        }
        let after = after.map(|(a, n)| reminder_key(a, n));
        self.shared
            .scheduler
            .list(actor_type, actor_id, after.as_ref(), limit)
            .await
    }

    /// Registered reminders and alarms in the store.
    pub async fn reminder_count(&self) -> Result<u64, CallError> {
        self.shared.scheduler.count().await
    }

    /// Successful reminder and alarm firings since start.
    pub fn reminders_fired(&self) -> u64 {
        self.shared.scheduler.fired.load(Ordering::Relaxed)
    }

    /// Sets the actor's alarm (replacing any) to fire at `at_unix_ms`.
    pub async fn set_alarm(
        &self,
        actor: ActorId,
        at_unix_ms: u64,
        payload: Payload,
        retry: RetryPolicy,
    ) -> Result<ReminderInfo, CallError> {
        self.check_schedule(&actor, payload.len())?;
        self.shared
            .scheduler
            .set(ReminderSpec {
                actor,
                name: ALARM_NAME.into(),
                due_unix_ms: at_unix_ms,
                period: None,
                repeat: None,
                until_unix_ms: None,
                payload,
                retry,
                missed: crate::scheduler::MissedFirings::FireOnce,
            })
            .await
    }

    pub async fn get_alarm(&self, actor: &ActorId) -> Result<Option<ReminderInfo>, CallError> {
        self.shared.check_target(actor)?;
        self.shared
            .scheduler
            .get(&reminder_key(actor, ALARM_NAME))
            .await
    }

    pub async fn delete_alarm(&self, actor: &ActorId) -> Result<bool, CallError> {
        self.shared.check_target(actor)?;
        self.shared
            .scheduler
            .delete(reminder_key(actor, ALARM_NAME))
            .await
    }

    fn check_schedule(&self, actor: &ActorId, payload_len: usize) -> Result<(), CallError> {
        self.shared.check_target(actor)?;
        validate::payload(payload_len, self.shared.config.max_payload_bytes)?;
        // Same rule as calls: an unknown type is a mistake, except while apps
        // are still reconnecting after a start.
        self.shared.new_activation(actor).map(|_| ())
    }

    /// Starts a timer on an active actor: fired as TIMER turns after `due`,
    /// then every `period`, until deleted or the actor deactivates.
    pub fn set_timer(
        &self,
        actor: &ActorId,
        name: &str,
        due: Duration,
        period: Option<Duration>,
        payload: Payload,
        keep_alive: bool,
    ) -> Result<(), CallError> {
        self.check_schedule(actor, payload.len())?;
        validate::name("timer name", name)?;
        if period.is_some_and(|p| p < Duration::from_millis(1)) {
            return Err(CallError::InvalidArgument(
                "a timer period must be at least 1 ms".into(),
            ));
        }
        if !self.shared.is_active(actor) {
            return Err(CallError::FailedPrecondition(format!(
                "actor {actor} is not active; timers live in an activation, so set them from \
                 inside one of its turns (or use a reminder, which outlives activations)"
            )));
        }
        let shared = self.shared.clone();
        let (target, method) = (actor.clone(), Arc::<str>::from(name));
        let task = tokio::spawn(async move {
            tokio::time::sleep(due).await;
            loop {
                // A timer never brings an actor back: only fire while active.
                if !shared.is_active(&target) {
                    break;
                }
                let envelope = shared.envelope(
                    TurnKind::Timer,
                    method.clone(),
                    payload.clone(),
                    None,
                    Reply::None,
                );
                match envelope {
                    Ok(mut envelope) => {
                        envelope.touch = keep_alive;
                        if let Err(e) = shared.deliver(&target, None, envelope) {
                            debug!(actor = %target, timer = %method, error = %e, "timer firing refused");
                        }
                    }
                    Err(e) => {
                        debug!(actor = %target, timer = %method, error = %e, "timer firing refused")
                    }
                }
                match period {
                    Some(p) => tokio::time::sleep(p).await,
                    None => break,
                }
            }
        });
        let previous = self
            .shared
            .timers
            .lock()
            .entry(actor.clone())
            .or_default()
            .insert(
                name.to_owned(),
                Timer {
                    task: task.abort_handle(),
                    first_due: Instant::now() + due,
                    period,
                    keep_alive,
                },
            );
        if let Some(previous) = previous {
            previous.task.abort();
        }
        Ok(())
    }

    pub fn delete_timer(&self, actor: &ActorId, name: &str) -> bool {
        let mut timers = self.shared.timers.lock();
        let Some(of_actor) = timers.get_mut(actor) else {
            return false;
        };
        let removed = of_actor.remove(name);
        if of_actor.is_empty() {
            timers.remove(actor);
        }
        removed.is_some_and(|t| {
            let running = !t.task.is_finished();
            t.task.abort();
            running
        })
    }
}
