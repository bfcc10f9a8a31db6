//! The runtime handle: checks the configuration and wires the parts
//! (`create`), spawns the background tasks (`start`), and stops them in
//! the order `shutdown.rs` writes down (`shutdown`).
//!
//! ```text
//!  invoke/tell ─▶ routing ─▶ dispatch ─▶ mailbox ─▶ run queue ─▶ worker ─▶ host.turn(done)
//!                   │           │                                            │
//!                   │           └─ activation created on first call          ▼
//!                   │              (lifecycle: waits for a host, loads state) turn: apply
//!                   └─▶ forwarder (another daemon owns the actor)   changes, reply, next
//! ```
//!
//! Where each part lives: `routing` (local or remote), `dispatch` (checks,
//! mailboxes, workers), `turn` (a turn's start and end), `lifecycle`
//! (activation, deactivation, drains, idle sweep, fencing), `flush`
//! (write-behind), `scheduling` + `schedule` (reminders, alarms, timers),
//! `inspect` (reads for operators).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;
use tracing::{info, warn};
use troupe_placement::Placement;
use troupe_storage::{ReminderStore, StateStore};

use crate::chain_token::ChainTokens;
use crate::clock::{Clock, SystemTimeSource, TestClock, TimeSource};
use crate::config::RuntimeConfig;
use crate::directory::Directory;
use crate::dispatch::pending::PendingCalls;
use crate::dispatch::run_queue::RunQueue;
use crate::error::{CallError, ConfigError};
use crate::flush::Flusher;
use crate::host_registry::HostRegistry;
use crate::inbox::stats::InboxStats;
use crate::metrics::Metrics;
use crate::schedule::timers::Timers;
use crate::schedule::{Scheduler, HORIZON};
use crate::shared::Shared;
use crate::shutdown::{Shutdown, ShutdownReport, Stage};

/// The handle to a running actor runtime. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Runtime {
    pub(crate) shared: Arc<Shared>,
}

impl Runtime {
    /// Checks the configuration and wires the runtime; starts nothing.
    pub fn create(
        config: RuntimeConfig,
        store: Arc<dyn StateStore>,
        reminders: Arc<dyn ReminderStore>,
        placement: Arc<dyn Placement>,
    ) -> Result<Self, ConfigError> {
        config.check()?;
        let chain_tokens = ChainTokens::new().map_err(|e| {
            ConfigError(format!(
                "the operating system gave no random bytes for the key of call-chain tokens \
                 ({e}); the daemon cannot start without it"
            ))
        })?;
        let test_clock = config.test_clock.then(|| Arc::new(TestClock::new()));
        let time: Arc<dyn TimeSource> = match &test_clock {
            Some(clock) => clock.clone(),
            None => Arc::new(SystemTimeSource),
        };
        let (scheduler, scheduler_writes) =
            Scheduler::new(reminders, placement.clone(), time.clone());
        let metrics = config.metrics.then(|| Arc::new(Metrics::new()));
        let inbox_stats = Arc::new(InboxStats::default());
        let records = Arc::new(crate::idempotency::table::CallRecords::new(
            config.idempotency_retention,
            config.min_key_retention,
            config.idempotency_memory_bytes,
        ));
        let workers = (0..config.workers)
            .map(|_| Arc::new(RunQueue::new()))
            .collect();
        let shared = Shared {
            directory: Directory::new(),
            hosts: HostRegistry::new(inbox_stats.clone()),
            flusher: Arc::new(Flusher::new(
                store,
                config.flush_max_dirty_bytes,
                metrics.clone(),
                placement.clone(),
                records.clone(),
            )),
            placement,
            pending: PendingCalls::new(config.max_pending_calls),
            workers,
            started: AtomicBool::new(false),
            clock: Clock::new(),
            time,
            test_clock,
            advancing: tokio::sync::Mutex::new(()),
            timers_fired: Default::default(),
            timers_jumped_to_ms: Default::default(),
            shutdown: Shutdown::new(),
            changed: Notify::new(),
            drains: AtomicUsize::new(0),
            scheduler,
            scheduler_writes: Mutex::new(Some(scheduler_writes)),
            timers: Timers::default(),
            waves: Default::default(),
            over_capacity: Notify::new(),
            capacity_deactivations: std::sync::atomic::AtomicU64::new(0),
            memory_gate: crate::memory_gate::MemoryGate::new(config.memory_shedding),
            metrics,
            forwarder: OnceLock::new(),
            inbox_clock: Default::default(),
            records,
            inbox_stats,
            inbox_retries: Default::default(),
            holds: Default::default(),
            retention: crate::retention::marks::Marks::new(),
            events: Arc::new(crate::watch::EventHub::new(config.max_watched_actors)),
            chain_tokens,
            config,
        };
        let shared = Arc::new(shared);
        let dropper: std::sync::Weak<Shared> = Arc::downgrade(&shared);
        shared.flusher.set_dropper(dropper);
        Ok(Self { shared })
    }

    /// Spawns the background tasks on the current tokio runtime: workers,
    /// flusher, idle sweeper, reminder scheduler, firings and writer (see
    /// `shutdown` for when each ends). Calling it twice does nothing the
    /// second time.
    pub fn start(&self) {
        let shared = &self.shared;
        if shared.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let shutdown = &shared.shutdown;
        for queue in &shared.workers {
            shutdown.spawn(shared.clone().work(queue.clone()));
        }
        let flusher = shared.flusher.clone();
        shutdown.spawn(flusher.run(
            shared.config.flush_interval,
            shutdown.reached(Stage::Stopping),
        ));
        shutdown.spawn(shared.clone().sweep_idle());
        shutdown.spawn(shared.clone().scan_inboxes());
        // A tenth of the window, within a second to a minute: records live
        // at most about 10% past their retention. A quarter of the shortest
        // retention a caller may ask for (the SDKs' keys): their records
        // live at most that much past it, instead of a minute.
        let every = (shared.config.idempotency_retention / 10)
            .min(shared.config.min_key_retention / 4)
            .clamp(Duration::from_secs(1), Duration::from_secs(60));
        shutdown.spawn(shared.clone().sweep_records(every));
        if let Some(writes) = shared.scheduler_writes.lock().take() {
            shutdown.spawn_last(
                shared
                    .scheduler
                    .writer(writes, shutdown.reached(Stage::Closing)),
            );
            let (due, firings) = mpsc::unbounded_channel();
            shutdown.spawn(
                shared
                    .scheduler
                    .clone()
                    .run(due, shutdown.reached(Stage::Draining)),
            );
            shutdown.spawn(shared.clone().fire_due(firings));
        }
        if let Some(marks) = shared.retention.take_receiver() {
            shutdown.spawn(shared.clone().write_retention_marks(marks));
        }
        if let Some(mut changes) = shared.placement.changes() {
            // Reminders of actors this daemon gained are in the store, not in
            // its memory: look again whenever owners change.
            let scheduler = shared.scheduler.clone();
            let draining = shutdown.reached(Stage::Draining);
            shutdown.spawn(async move {
                tokio::pin!(draining);
                // Also now and then: a daemon routing by an older table may
                // have stored a reminder for an actor it did not own, which
                // the owner's scheduler, already past its due time, would
                // otherwise only see at the next change.
                let mut every = tokio::time::interval(HORIZON / 2);
                every.tick().await;
                loop {
                    let owners_changed = tokio::select! {
                        changed = changes.changed() => {
                            if changed.is_err() {
                                return;
                            }
                            true
                        }
                        _ = every.tick() => false,
                        () = &mut draining => return,
                    };
                    scheduler.reload(owners_changed);
                }
            });
        }
    }

    pub fn config(&self) -> &RuntimeConfig {
        &self.shared.config
    }

    /// Graceful stop, in the order `shutdown` writes down: refuse new calls
    /// and stop firing reminders and timers; let turns (and calls already
    /// queued) finish and deactivate every actor through its host, at most
    /// the shutdown grace period; flush what is left; stop every background
    /// task and wait for it; last, the reminder writer writes what it was
    /// handed. Nothing due during the drain is lost: it was not attempted,
    /// so it fires after the restart.
    ///
    /// Everything after the grace period is bounded by the shutdown flush
    /// timeout, so a store that fails or hangs cannot hold the stop: the
    /// report then says what the store did not confirm.
    pub async fn shutdown(&self) -> ShutdownReport {
        let shared = &self.shared;
        info!(
            active = shared.directory.len(),
            "shutting down: refusing new calls, stopping reminders, draining actors"
        );
        shared.shutdown.enter(Stage::Draining);
        shared.timers.end_all();
        shared
            .drain_for_shutdown(Instant::now() + shared.config.shutdown_grace)
            .await;
        shared.shutdown.enter(Stage::Stopping);
        let limit = shared.config.shutdown_flush_timeout;
        let give_up = Instant::now() + limit;
        match tokio::time::timeout_at(give_up, shared.flusher.flush_dirty()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, "final flush failed"),
            Err(_) => warn!(
                limit_ms = limit.as_millis() as u64,
                "final flush did not finish within the shutdown flush timeout"
            ),
        }
        let mut abandoned_tasks = tokio::time::timeout_at(give_up, shared.shutdown.tasks_ended())
            .await
            .is_err();
        shared.shutdown.enter(Stage::Closing);
        abandoned_tasks |= tokio::time::timeout_at(give_up, shared.shutdown.last_ended())
            .await
            .is_err();
        let report = ShutdownReport {
            unwritten_state: shared.flusher.unwritten(),
            failed_reminder_writes: shared.scheduler.failed_while_closing(),
            abandoned_tasks,
        };
        if report.is_complete() {
            info!("runtime stopped");
        } else {
            warn!(
                unwritten_actors = report.unwritten_state.len(),
                failed_reminder_writes = report.failed_reminder_writes,
                abandoned_tasks,
                "runtime stopped without writing everything"
            );
        }
        report
    }

    /// Writes all dirty state now (tests, benchmarks, admin).
    pub async fn flush(&self) -> Result<(), CallError> {
        self.shared.flusher.flush_dirty().await
    }
}
