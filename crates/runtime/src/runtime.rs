//! The runtime handle: checks the configuration and wires the parts
//! (`create`), spawns the background tasks (`start`), and stops them in
//! order (`shutdown`).
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

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::{info, warn};
use troupe_placement::Placement;
use troupe_storage::{ReminderStore, StateStore};

use crate::activation::Status;
use crate::clock::Clock;
use crate::config::RuntimeConfig;
use crate::directory::Directory;
use crate::dispatch::pending::PendingCalls;
use crate::dispatch::run_queue::RunQueue;
use crate::error::{CallError, ConfigError, Unavailable};
use crate::flush::Flusher;
use crate::host_registry::HostRegistry;
use crate::metrics::Metrics;
use crate::schedule::timers::Timers;
use crate::schedule::{Dispatch, Scheduler, HORIZON};
use crate::scheduling::Firing;
use crate::shared::Shared;
use crate::types::DeactivateReason;

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
            clock: Clock::new(),
            shutting_down: AtomicBool::new(false),
            stop: Arc::new(Notify::new()),
            changed: Notify::new(),
            admin_waiters: AtomicUsize::new(0),
            scheduler,
            scheduler_writes: Mutex::new(Some(scheduler_writes)),
            timers: Timers::default(),
            metrics,
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
                let mut every = tokio::time::interval(HORIZON / 2);
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
                            env.reply.send(Err(Unavailable::ShuttingDown.into()));
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
