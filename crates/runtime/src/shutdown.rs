//! The runtime's stop sequence, written down once.
//!
//! A runtime moves through [`Stage`]s in order and never back. The stage is
//! sticky (a watch channel, not a notification), so a task that looks late
//! still sees it. Every background task is spawned through [`Shutdown`],
//! which tracks it, and says at which stage it ends; each one ends at a
//! point of its own where stopping loses nothing (between flushes, between
//! batches), never in the middle of a store write. [`Runtime::shutdown`]
//! walks the stages and waits for the tasks of each.
//!
//! | task | ends at |
//! |---|---|
//! | reminder scheduler, its reload, the firing loop, idle sweeper | `Draining`: nothing new starts while actors drain |
//! | workers, flusher, firings still waiting for their turn, the dropper of refused (fenced) activations | `Stopping`: after the drain and the final flush |
//! | reminder writer | `Closing`: once every other task is gone, after writing what it was handed |
//!
//! Past the grace period every wait is bounded by the shutdown flush
//! timeout: a task still in a store write then is abandoned (the process is
//! about to end), and the [`ShutdownReport`] says what the store did not
//! confirm.
//!
//! [`Runtime::shutdown`]: crate::Runtime::shutdown

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::watch;
use tokio_util::task::TaskTracker;

pub use crate::flush::UnwrittenState;

/// What a shutdown could not finish, for the operator: empty when every
/// change reached the store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use = "a shutdown that could not write everything must be reported"]
pub struct ShutdownReport {
    /// State changes the store did not confirm, by actor.
    pub unwritten_state: Vec<UnwrittenState>,
    /// Reminder writes the store refused while the runtime closed (their
    /// reminders may fire again after a restart).
    pub failed_reminder_writes: usize,
    /// Background tasks were still in a store write when the shutdown flush
    /// timeout ran out; the writes they held are in `unwritten_state`, or
    /// (reminder writes) fire again after a restart.
    pub abandoned_tasks: bool,
}

impl ShutdownReport {
    /// Whether everything was written.
    pub fn is_complete(&self) -> bool {
        self.unwritten_state.is_empty() && self.failed_reminder_writes == 0 && !self.abandoned_tasks
    }
}

/// Where the runtime is in its life, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Stage {
    Running,
    /// New calls are refused, reminders and alarms stop firing, timers
    /// stop; actors finish their turns and deactivate.
    Draining,
    /// The drain is over (or its grace period): what is left is flushed, and
    /// the tasks that serve turns and flushes end.
    Stopping,
    /// Every other task has ended; the reminder writer empties its queue.
    Closing,
}

#[derive(Debug)]
pub(crate) struct Shutdown {
    /// `stage >= Draining`, read on every call (a plain load).
    refusing: AtomicBool,
    stage: watch::Sender<Stage>,
    /// Tasks that end by `Stopping`.
    tasks: TaskTracker,
    /// Tasks that end at `Closing` (the reminder writer).
    last: TaskTracker,
}

impl Shutdown {
    pub(crate) fn new() -> Self {
        Self {
            refusing: AtomicBool::new(false),
            stage: watch::Sender::new(Stage::Running),
            tasks: TaskTracker::new(),
            last: TaskTracker::new(),
        }
    }

    /// Whether new calls are refused.
    pub(crate) fn refusing(&self) -> bool {
        self.refusing.load(Ordering::Relaxed)
    }

    /// Moves on to `stage` (never back).
    pub(crate) fn enter(&self, stage: Stage) {
        if stage >= Stage::Draining {
            self.refusing.store(true, Ordering::SeqCst);
        }
        self.stage.send_if_modified(|now| {
            let later = stage > *now;
            if later {
                *now = stage;
            }
            later
        });
    }

    /// Returns once the runtime reached `stage`.
    pub(crate) fn reached(&self, stage: Stage) -> impl Future<Output = ()> + Send + 'static {
        let mut stages = self.stage.subscribe();
        async move {
            // The sender lives as long as the runtime; if it is gone, so is
            // everything a task could still do.
            let _ = stages.wait_for(|now| *now >= stage).await;
        }
    }

    /// Spawns a task that ends by `Stopping` (it watches [`Shutdown::reached`]
    /// itself, at a point where stopping loses nothing).
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(task);
    }

    /// Spawns the task that ends last, at `Closing`.
    pub(crate) fn spawn_last(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.last.spawn(task);
    }

    /// Waits until every task spawned with [`Shutdown::spawn`] ended.
    pub(crate) async fn tasks_ended(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Waits until the tasks spawned with [`Shutdown::spawn_last`] ended.
    pub(crate) async fn last_ended(&self) {
        self.last.close();
        self.last.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stage_is_seen_by_whoever_looks_late_and_never_goes_back() {
        let shutdown = Shutdown::new();
        assert!(!shutdown.refusing());
        shutdown.enter(Stage::Stopping);
        shutdown.enter(Stage::Draining);
        assert!(shutdown.refusing());
        // Asked after the fact, and for an earlier stage: both done at once.
        shutdown.reached(Stage::Draining).await;
        shutdown.reached(Stage::Stopping).await;
        assert_eq!(*shutdown.stage.borrow(), Stage::Stopping);
    }

    #[tokio::test]
    async fn tasks_end_in_their_order() {
        let shutdown = std::sync::Arc::new(Shutdown::new());
        let (first, last) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let (s, f) = (shutdown.clone(), first.clone());
        shutdown.spawn(async move {
            s.reached(Stage::Stopping).await;
            f.store(true, Ordering::SeqCst);
        });
        let (s, f, l) = (shutdown.clone(), first.clone(), last.clone());
        shutdown.spawn_last(async move {
            s.reached(Stage::Closing).await;
            // Everything else had ended before.
            l.store(f.load(Ordering::SeqCst), Ordering::SeqCst);
        });
        shutdown.enter(Stage::Stopping);
        shutdown.tasks_ended().await;
        assert!(first.load(Ordering::SeqCst));
        shutdown.enter(Stage::Closing);
        shutdown.last_ended().await;
        assert!(last.load(Ordering::SeqCst));
    }

    use std::sync::Arc;
}
