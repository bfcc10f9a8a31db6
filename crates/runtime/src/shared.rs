//! The state every part of the runtime reaches: one `Shared` behind the
//! [`Runtime`](crate::Runtime) handle and every completion handle.
//!
//! Each part of the runtime adds its behaviour to `Shared` in its own module
//! (`dispatch`, `turn`, `lifecycle`, `routing`, `inspect`, `scheduling`);
//! this module holds only the fields, what each is for, and the few helpers
//! every part uses.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{mpsc, Notify};
use troupe_placement::Placement;

use crate::activation::{Activation, Inner, Status};
use crate::chain_token::ChainTokens;
use crate::clock::{Clock, TestClock, TimeSource};
use crate::config::RuntimeConfig;
use crate::directory::Directory;
use crate::dispatch::pending::PendingCalls;
use crate::dispatch::run_queue::{RunQueue, Runnable};
use crate::error::CallError;
use crate::flush::Flusher;
use crate::forwarding::Forwarder;
use crate::host_registry::HostRegistry;
use crate::metrics::Metrics;
use crate::schedule::timers::Timers;
use crate::schedule::{Scheduler, WriteRequest};
use crate::shutdown::Shutdown;
use crate::types::{ActorId, StateChange, TurnKind};

pub(crate) struct Shared {
    pub(crate) config: RuntimeConfig,
    /// The activations of this daemon.
    pub(crate) directory: Directory,
    /// Which host serves which type, with the type's options.
    pub(crate) hosts: HostRegistry,
    pub(crate) flusher: Arc<Flusher>,
    /// Consulted before activating: only the owner may.
    pub(crate) placement: Arc<dyn Placement>,
    /// The daemon-wide bound on calls queued or running.
    pub(crate) pending: &'static PendingCalls,
    /// One run queue per worker; an activation with work sits on one.
    pub(crate) workers: Vec<Arc<RunQueue<Runnable>>>,
    /// Set by the first `start`.
    pub(crate) started: AtomicBool,
    pub(crate) clock: Clock,
    /// Scheduling time: due times of reminders, alarms and timers.
    pub(crate) time: Arc<dyn TimeSource>,
    /// The same source when it is a test clock (`config.test_clock`).
    pub(crate) test_clock: Option<Arc<TestClock>>,
    /// One `advance_clock` at a time.
    pub(crate) advancing: tokio::sync::Mutex<()>,
    /// Timer firings whose turn was delivered, since start.
    pub(crate) timers_fired: std::sync::atomic::AtomicU64,
    /// The test clock's time an advance last jumped to when it ran out of
    /// steps (0: never): timers behind it fire once and go on from the
    /// first time on their grid after it, as reminders do after downtime.
    pub(crate) timers_jumped_to_ms: std::sync::atomic::AtomicU64,
    /// The stop sequence, and every background task to wait for.
    pub(crate) shutdown: Shutdown,
    /// While a drain waits: an activation became idle or went away.
    pub(crate) changed: Notify,
    /// Drains waiting on `changed` (shutdown, hand-off, admin).
    pub(crate) drains: AtomicUsize,
    /// Durable reminders and alarms.
    pub(crate) scheduler: Arc<Scheduler>,
    /// Taken by `start`, which gives it to the scheduler's writer task.
    pub(crate) scheduler_writes: Mutex<Option<mpsc::UnboundedReceiver<WriteRequest>>>,
    /// Timers of active actors; aborted when the actor deactivates.
    pub(crate) timers: Timers,
    /// Deactivations under way and waiting (`lifecycle::waves`).
    pub(crate) waves: crate::lifecycle::waves::Waves,
    /// Told when an activation passes `config.max_activations`
    /// (`lifecycle::capacity`).
    pub(crate) over_capacity: Notify,
    /// Since start: actors deactivated for room (`lifecycle::capacity`).
    pub(crate) capacity_deactivations: std::sync::atomic::AtomicU64,
    /// Refuses new work while memory is near the limit (`memory_gate`).
    pub(crate) memory_gate: crate::memory_gate::MemoryGate,
    /// Counters and histograms, when `config.metrics` is on.
    pub(crate) metrics: Option<Arc<Metrics>>,
    /// Carries calls to other daemons, in a cluster.
    pub(crate) forwarder: OnceLock<Arc<dyn Forwarder>>,
    /// The last inbox sequence number given (the `inbox` module).
    pub(crate) inbox_clock: std::sync::atomic::AtomicU64,
    /// The answers of keyed calls to live actors (the `idempotency` module).
    pub(crate) records: Arc<crate::idempotency::table::CallRecords>,
    /// Durable tells counted per type, always on (`inbox::stats`); the
    /// host registry shares it to hand each binding its type's counters.
    pub(crate) inbox_stats: Arc<crate::inbox::stats::InboxStats>,
    /// Durable tells waiting for another attempt (`inbox::retries`).
    pub(crate) inbox_retries: crate::inbox::retries::RetryBoard,
    /// The key of the chains this daemon issues to turns, and the turns
    /// running with one (`chain_token`).
    pub(crate) chain_tokens: ChainTokens,
    /// Actors being purged or edited, whose activations wait
    /// (`lifecycle::held_actor`).
    pub(crate) holds: crate::lifecycle::hold::Holds,
    /// The `$retain` marks of types with a retention, on their way to the
    /// scheduler (`retention`).
    pub(crate) retention: crate::retention::marks::Marks,
    /// Watched actors' recent events (`watch`).
    pub(crate) events: Arc<crate::watch::EventHub>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("config", &self.config)
            .field("placement", &self.placement)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// Counts a call that failed without a turn result (refused, timed out).
    pub(crate) fn count_failed(&self, ty: &str, kind: TurnKind, error: &CallError) {
        if let Some(metrics) = &self.metrics {
            metrics.call_failed(ty, kind, error);
        }
    }

    /// Applies changes to the state cache (under the activation's lock,
    /// `inner`) and hands the actor to the flusher.
    pub(crate) fn record_changes(
        &self,
        act: &Arc<Activation>,
        inner: &mut Inner,
        changes: &[StateChange],
    ) {
        if changes.is_empty() {
            return;
        }
        let changes = crate::expiry::with_times(&inner.state, changes, || self.time.now_ms());
        let timed = matches!(changes, std::borrow::Cow::Owned(_));
        let first_before = timed
            .then(|| crate::expiry::earliest(&inner.state))
            .flatten();
        let bytes = inner.apply(&changes);
        if timed {
            self.expiry_changed(&act.id, first_before, &inner.state);
        }
        self.flusher.mark_dirty(act, inner, bytes);
    }

    /// Whether `id` has a live activation (one that runs turns).
    pub(crate) fn is_active(&self, id: &ActorId) -> bool {
        self.directory
            .get(id)
            .is_some_and(|act| matches!(act.inner.lock().status, Status::Idle | Status::Running))
    }

    /// Whether `id` is active or its activation is under way: its app's
    /// activation hook may set timers (as Orleans' and Dapr's users do in
    /// OnActivate), whose turns queue until the activation is done.
    pub(crate) fn is_active_or_activating(&self, id: &ActorId) -> bool {
        self.directory.get(id).is_some_and(|act| {
            matches!(
                act.inner.lock().status,
                Status::Activating | Status::Idle | Status::Running
            )
        })
    }

    /// Whether the daemon started less than `--host-wait` ago, while apps
    /// (re)connect after a restart: a call or a new watch of a type nobody
    /// hosts waits for it then, and is refused with [`Self::unknown_type`]
    /// after.
    pub(crate) fn awaiting_apps(&self) -> bool {
        self.clock.uptime() < self.config.host_wait
    }

    /// How long an activation of `ty` waits for an app to host it: the
    /// whole `--host-wait` for a type an app registered before (its app may
    /// be coming back), and for one never registered only what is left of
    /// the start-up window, after which a call of it is refused at once.
    pub(crate) fn host_wait_for(&self, ty: &str) -> Duration {
        if self.hosts.options(ty).is_some() {
            self.config.host_wait
        } else {
            self.config.host_wait.saturating_sub(self.clock.uptime())
        }
    }

    /// NOT_FOUND for a type no app registered, naming the ones that are.
    pub(crate) fn unknown_type(&self, ty: &str) -> CallError {
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

    /// Wakes the drains waiting for activations to change (shutdown,
    /// hand-off, an admin's forced deactivation); costs a load otherwise.
    pub(crate) fn notify_drains(&self) {
        if self.drains.load(Ordering::Relaxed) > 0 {
            self.changed.notify_waiters();
        }
    }
}
