//! Timers: per activation and in memory. Each runs as a task that delivers
//! TIMER turns; all of an actor's timers are aborted when it deactivates, so
//! a timer never outlives (or brings back) its activation.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::task::AbortHandle;

use crate::error::CallError;
use crate::input::{range, UserDuration};
use crate::types::{ActorId, Payload};

/// A timer as a caller sets it: TIMER turns after `due`, then every
/// `period`, until deleted or the actor deactivates.
#[derive(Debug, Clone)]
pub struct TimerSpec {
    pub actor: ActorId,
    pub name: String,
    pub due: Duration,
    pub period: Option<Duration>,
    pub payload: Payload,
    /// Whether its turns count as activity for idle deactivation.
    pub keep_alive: bool,
}

impl TimerSpec {
    /// Checks the times a user gave.
    pub(crate) fn check(&self) -> Result<(), CallError> {
        UserDuration::new("due", self.due, &range::ANY)?;
        if let Some(period) = self.period {
            UserDuration::new("period", period, &range::POSITIVE)?;
        }
        Ok(())
    }
}

/// A running timer of an active actor.
#[derive(Debug)]
pub(crate) struct Timer {
    pub(crate) task: AbortHandle,
    /// Scheduling time of the next firing, kept by the timer's task: it
    /// moves on only once a firing was delivered (`u64::MAX` after the
    /// last), so a due time at or before now means a firing is pending.
    pub(crate) next_due_ms: Arc<AtomicU64>,
    pub(crate) period: Option<Duration>,
    pub(crate) keep_alive: bool,
}

/// A running timer of an active actor, as operators see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerInfo {
    pub name: String,
    pub next_due_unix_ms: u64,
    pub period: Option<Duration>,
    pub keep_alive: bool,
}

/// The timers of every active actor, by name.
#[derive(Debug, Default)]
pub(crate) struct Timers(Mutex<HashMap<ActorId, HashMap<String, Timer>>>);

impl Timers {
    /// Adds (or replaces, aborting the old one) `actor`'s timer `name`.
    pub(crate) fn insert(&self, actor: &ActorId, name: &str, timer: Timer) {
        let previous = self
            .0
            .lock()
            .entry(actor.clone())
            .or_default()
            .insert(name.to_owned(), timer);
        if let Some(previous) = previous {
            previous.task.abort();
        }
    }

    /// Stops and forgets `actor`'s timer `name`; whether it was running.
    pub(crate) fn remove(&self, actor: &ActorId, name: &str) -> bool {
        let mut timers = self.0.lock();
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

    /// Stops every timer of `actor` (it deactivates).
    pub(crate) fn end_actor(&self, actor: &ActorId) {
        if let Some(timers) = self.0.lock().remove(actor) {
            for timer in timers.into_values() {
                timer.task.abort();
            }
        }
    }

    /// Stops every timer of every actor.
    pub(crate) fn end_all(&self) {
        let timers = std::mem::take(&mut *self.0.lock());
        for timer in timers.into_values().flat_map(HashMap::into_values) {
            timer.task.abort();
        }
    }

    /// `actor`'s running timers with their next due time, by name.
    pub(crate) fn describe(&self, actor: &ActorId) -> Vec<TimerInfo> {
        let timers = self.0.lock();
        let Some(of_actor) = timers.get(actor) else {
            return Vec::new();
        };
        let mut out: Vec<TimerInfo> = of_actor
            .iter()
            .filter(|(_, t)| !t.task.is_finished())
            .map(|(name, t)| TimerInfo {
                name: name.clone(),
                next_due_unix_ms: t.next_due_ms.load(Ordering::Relaxed),
                period: t.period,
                keep_alive: t.keep_alive,
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// The earliest next due time of any running timer.
    pub(crate) fn earliest_due(&self) -> Option<u64> {
        self.0
            .lock()
            .values()
            .flat_map(HashMap::values)
            .filter(|t| !t.task.is_finished())
            .map(|t| t.next_due_ms.load(Ordering::Relaxed))
            .min()
    }
}
