//! Durable reminders and alarms, and in-memory timers.
//!
//! Reminders live in a [`ReminderStore`] indexed by due time. The scheduler
//! keeps in memory only what comes due within a horizon (a heap ordered by
//! due time plus a map of the current version of each), loaded lazily from
//! the index through a cursor: a million registered reminders need a million
//! rows, not a million timers.
//!
//! Every reminder write goes through one writer task that applies whatever
//! has queued up as one durable batch (group commit), in order. A `set` or
//! `delete` of a reminder supersedes its firing on its way: the firing's
//! turn does not start if it has not (`Reply::Firing`), and its bookkeeping
//! is dropped, so it never overwrites the newer call.
//!
//! A reminder repeats every fixed period or at the matches of a cron
//! pattern in a time zone (`calendar`).
//!
//! A firing is a normal turn of kind REMINDER or ALARM. The stored record
//! only moves on once the turn succeeded, so a crash mid-firing fires again
//! (at-least-once). Failures are retried with exponential backoff up to the
//! reminder's policy, then dropped and logged; periodic reminders keep their
//! schedule either way.

mod calendar;
mod due_loop;
mod firing;
mod jitter;
mod load_window;
mod loaded;
mod next_due;
mod pause;
mod paused_keys;
pub(crate) mod record;
pub(crate) mod timers;
mod writer;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot, Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use troupe_placement::{OwnerEpoch, Placement};
use troupe_storage::{ReminderKey, ReminderOp, ReminderRecord, ReminderStore, ReminderWrite};

use crate::clock::TimeSource;
use crate::error::{CallError, Unavailable};
use crate::input::millis;
use crate::types::{ActorId, ContentType};
use calendar::Calendars;
pub use calendar::CronSchedule;
pub(crate) use firing::{Due, Fired};
pub use jitter::jitter_delay;
use load_window::{Latest, LoadWindow};
use loaded::Loaded;
pub(crate) use pause::PAUSED_DUE;
use paused_keys::PausedKeys;
pub(crate) use record::TellMeta;
pub use record::ALARM_NAME;
use record::{encode, info, Meta};
pub use record::{AlarmSpec, MissedFirings, ReminderInfo, ReminderSpec, RetryPolicy};
pub(crate) use writer::WriteRequest;
use writer::{run_writer, store_error};

/// How far ahead due reminders are kept in memory.
pub(crate) const HORIZON: Duration = Duration::from_secs(30);
/// At most this many reminders are held in memory at once.
const MAX_IN_MEMORY: usize = 200_000;
/// Most reminders one load reads: a short read (a few ms on the blocking
/// pool) hands the reminders it found to the loop soon, instead of after a
/// read of up to `MAX_IN_MEMORY` records.
const LOAD_CHUNK: usize = 2048;
/// Firings running at once.
const MAX_FIRING: usize = 10_000;

#[derive(Default)]
struct Queue {
    /// Due time, then key; entries whose due no longer matches `live` are stale.
    heap: BinaryHeap<Reverse<(u64, ReminderKey)>>,
    /// The current in-memory version of each loaded reminder.
    live: Loaded,
    /// Everything at or before this (due, key) is in memory (or firing).
    cursor: (u64, ReminderKey),
    /// The last load stopped at its limit: more is due before the horizon.
    more: bool,
    /// Reminders being fired, each by its latest firing: a `set` or
    /// `delete` of one supersedes that firing (its turn does not start, its
    /// bookkeeping is dropped: the newer call wins).
    firing: HashMap<ReminderKey, OnItsWay>,
    /// Numbers firings, so an older firing of a reminder popped again
    /// meanwhile tells the newer one's entry from its own.
    firings_popped: u64,
    /// Numbers writes and keeps those a load in flight may not see.
    window: LoadWindow,
    /// Reminders being paused or resumed: how many callers are at it, and
    /// how many writes of the reminder were queued (`pause.rs`).
    holds: HashMap<ReminderKey, (usize, u64)>,
    /// The reminders paused, once read.
    paused: PausedKeys,
    /// Numbers reads of the paused keys.
    paused_generation: u64,
    /// The placement table version the paused keys follow (`pause.rs`).
    paused_table: u64,
}

/// A firing on its way, as the queue knows it.
#[derive(Debug, Clone)]
pub(crate) struct OnItsWay {
    id: u64,
    /// Cancelled by a `set` or `delete` of its reminder; its turn checks it
    /// as it would start (`Reply::Firing`).
    superseded: CancellationToken,
}

impl Queue {
    /// Marks the firing of `key` on its way, if any, superseded.
    fn supersede(&self, key: &ReminderKey) {
        if let Some(firing) = self.firing.get(key) {
            firing.superseded.cancel();
        }
    }

    /// Whether a reminder due at `due_unix_ms` belongs in memory: the
    /// loaded range covers it.
    fn covers(&self, due_unix_ms: u64) -> bool {
        // Compare by due time only: stores order keys of equal due time
        // their own way, so a key in the cursor's millisecond may lie on
        // either side of it. Keeping it in memory is safe either way: a load
        // skips keys already there.
        due_unix_ms <= self.cursor.0
    }

    /// What putting `record` leaves in memory, for a load in flight: asked
    /// for only while one is.
    fn latest_of_put<'a>(&self, record: &'a ReminderRecord) -> impl FnOnce() -> Latest + 'a {
        let covered = self.covers(record.due_unix_ms);
        move || {
            if covered {
                Latest::Settled
            } else {
                Latest::Beyond(record.clone())
            }
        }
    }
}

fn empty_key() -> ReminderKey {
    ReminderKey {
        actor_type: String::new(),
        actor_id: String::new(),
        name: String::new(),
    }
}

pub(crate) struct Scheduler {
    store: Arc<dyn ReminderStore>,
    writes: mpsc::UnboundedSender<WriteRequest>,
    queue: Mutex<Queue>,
    /// Something was inserted before the earliest due, or loading is needed.
    wake: Notify,
    firing: Arc<Semaphore>,
    pub(crate) fired: AtomicU64,
    /// Writes the store refused after the writer was told to stop.
    failed_while_closing: Arc<AtomicUsize>,
    /// The number of the last write the writer settled (stored or failed).
    settled: Arc<tokio::sync::watch::Sender<u64>>,
    /// Gives each write the owner epoch of its actor.
    placement: Arc<dyn Placement>,
    /// Scheduling time: what "due" is measured against.
    pub(crate) time: Arc<dyn TimeSource>,
    /// Bumped whenever a firing's outcome is recorded, so whoever waits
    /// for due work to be done (`advance_clock`) looks again.
    pub(crate) progress: tokio::sync::watch::Sender<u64>,
    /// Successful alarm firings since start (also counted in `fired`).
    pub(crate) alarms_fired: AtomicU64,
    /// Calendar schedules parsed once, for every firing of every reminder
    /// that uses them.
    calendars: Calendars,
    /// Bumped when a read of the paused keys ends (or they are forgotten).
    paused_read: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler").finish_non_exhaustive()
    }
}

impl Scheduler {
    pub(crate) fn new(
        store: Arc<dyn ReminderStore>,
        placement: Arc<dyn Placement>,
        time: Arc<dyn TimeSource>,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<WriteRequest>) {
        let (writes, rx) = mpsc::unbounded_channel();
        let scheduler = Arc::new(Self {
            store,
            writes,
            queue: Mutex::new(Queue {
                cursor: (0, empty_key()),
                more: true,
                ..Queue::default()
            }),
            wake: Notify::new(),
            firing: Arc::new(Semaphore::new(MAX_FIRING)),
            fired: AtomicU64::new(0),
            failed_while_closing: Arc::default(),
            settled: Arc::new(tokio::sync::watch::Sender::new(0)),
            placement,
            time,
            progress: tokio::sync::watch::Sender::new(0),
            alarms_fired: AtomicU64::new(0),
            calendars: Calendars::default(),
            paused_read: tokio::sync::watch::Sender::new(0),
        });
        (scheduler, rx)
    }

    /// The writer task for the queue `new` returned; it ends once `stop`
    /// completes, after writing everything queued before.
    pub(crate) fn writer(
        &self,
        writes: mpsc::UnboundedReceiver<WriteRequest>,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> impl Future<Output = ()> + Send + 'static {
        run_writer(
            self.store.clone(),
            writes,
            stop,
            self.failed_while_closing.clone(),
            self.settled.clone(),
        )
    }

    /// Reminder writes the store refused while the runtime closed.
    pub(crate) fn failed_while_closing(&self) -> usize {
        self.failed_while_closing.load(Ordering::Relaxed)
    }

    /// Deletes `key`, which is in memory nowhere.
    async fn delete_unloaded(&self, key: ReminderKey) -> Result<bool, CallError> {
        let done = {
            let mut q = self.queue.lock();
            q.paused.mark(&key, false);
            self.enqueue(&mut q, ReminderOp::Delete(key), || Latest::Settled)?
        };
        Self::finished(done).await
    }

    /// Queues a write, with the owner epoch this daemon holds its actor
    /// under now; the writer applies queued writes in order. `latest`: what
    /// the write leaves in memory, for a load in flight. Under the queue lock, so
    /// writes are numbered in the order the writer gets them.
    fn enqueue(
        &self,
        q: &mut Queue,
        op: ReminderOp,
        latest: impl FnOnce() -> Latest,
    ) -> Result<oneshot::Receiver<Result<bool, CallError>>, CallError> {
        let key = op.key();
        let epoch = match self.placement.epoch(&key.actor_type, &key.actor_id) {
            OwnerEpoch::Unfenced => None,
            OwnerEpoch::Owned(epoch) => Some(epoch),
            // The table moved on: the new owner's scheduler has it now.
            OwnerEpoch::NotOwned => {
                return Err(Unavailable::Fenced {
                    actor: ActorId::new(key.actor_type.as_str(), key.actor_id.as_str()),
                }
                .into())
            }
        };
        let (done, rx) = oneshot::channel();
        q.note_write(key);
        q.window.note(key, latest);
        let seq = q.window.next_seq();
        let write = ReminderWrite { op, epoch };
        self.writes
            .send(WriteRequest { write, done, seq })
            .map_err(|_| CallError::from(Unavailable::ShuttingDown))?;
        Ok(rx)
    }

    async fn finished(rx: oneshot::Receiver<Result<bool, CallError>>) -> Result<bool, CallError> {
        rx.await
            .map_err(|_| CallError::from(Unavailable::ShuttingDown))?
    }

    pub(crate) async fn set(&self, spec: ReminderSpec) -> Result<ReminderInfo, CallError> {
        self.set_with(spec, None).await
    }

    /// Sets a reminder that, with `tell`, is a delayed tell's.
    pub(crate) async fn set_with(
        &self,
        spec: ReminderSpec,
        tell: Option<TellMeta>,
    ) -> Result<ReminderInfo, CallError> {
        let (scheduled, calendar) = match &spec.cron {
            None => (spec.due_unix_ms, None),
            Some(schedule) => {
                let calendar = self.calendars.get(schedule)?;
                let first =
                    calendar.first_firing(&spec.name, spec.due_unix_ms, spec.until_unix_ms)?;
                (first, Some(calendar))
            }
        };
        let key = ReminderKey {
            actor_type: spec.actor.ty.to_string(),
            actor_id: spec.actor.id.to_string(),
            name: spec.name,
        };
        let jitter_ms = spec.jitter.map_or(0, millis);
        // Jitter spreads firings; it never pushes the first past `until`.
        let delay_ms = jitter::delay_ms(&key, jitter_ms).min(
            spec.until_unix_ms
                .map_or(u64::MAX, |u| u.saturating_sub(scheduled)),
        );
        let mut meta = Meta {
            period_ms: spec.period.map_or(0, millis),
            remaining: spec.repeat,
            until_unix_ms: spec.until_unix_ms,
            bytes: spec.payload.content_type == ContentType::Bytes,
            max_attempts: spec.retry.max_attempts,
            initial_backoff_ms: millis(spec.retry.initial_backoff),
            max_backoff_ms: millis(spec.retry.max_backoff),
            skip_missed: spec.missed == MissedFirings::Skip,
            attempts: 0,
            fired: 0,
            cron: None,
            time_zone: None,
            jitter_ms,
            delay_ms,
            paused_due_ms: None,
            tell,
        };
        meta.set_cron(calendar.as_ref().map(|c| c.normalized()));
        let due_unix_ms = scheduled.saturating_add(delay_ms);
        let mut record = ReminderRecord {
            key,
            due_unix_ms,
            data: encode(&meta, &spec.payload),
        };
        let (done, wake) = loop {
            let queued = {
                let mut q = self.queue.lock();
                self.paused_follow_table(&mut q);
                // A paused reminder set again (as apps do at each
                // activation) takes the new schedule and stays paused.
                match q.paused.contains(&record.key) {
                    None => None,
                    Some(paused) => {
                        if paused && record.due_unix_ms != PAUSED_DUE {
                            meta.paused_due_ms = Some(due_unix_ms);
                            record.due_unix_ms = PAUSED_DUE;
                            record.data = encode(&meta, &spec.payload);
                        }
                        q.supersede(&record.key);
                        let latest = q.latest_of_put(&record);
                        let done = self.enqueue(&mut q, ReminderOp::Put(record.clone()), latest)?;
                        Some((done, Self::track_locked(&mut q, &record)))
                    }
                }
            };
            match queued {
                Some(queued) => break queued,
                None => self.paused_known().await?,
            }
        };
        if wake {
            self.wake.notify_one();
        }
        if let Err(e) = Self::finished(done).await {
            self.untrack(&record);
            return Err(e);
        }
        info(&record).ok_or_else(|| CallError::Internal("reminder encoding".into()))
    }

    pub(crate) async fn get(&self, key: &ReminderKey) -> Result<Option<ReminderInfo>, CallError> {
        let record = self.store.get_reminder(key).await.map_err(store_error)?;
        Ok(record.as_ref().and_then(info))
    }

    pub(crate) async fn delete(&self, key: ReminderKey) -> Result<bool, CallError> {
        let done = {
            let mut q = self.queue.lock();
            q.supersede(&key);
            q.live.remove(&key);
            q.paused.mark(&key, false);
            self.enqueue(&mut q, ReminderOp::Delete(key.clone()), || Latest::Settled)?
        };
        Self::finished(done).await
    }

    pub(crate) async fn list(
        &self,
        actor_type: Option<&str>,
        actor_id: Option<&str>,
        after: Option<&ReminderKey>,
        limit: usize,
    ) -> Result<Vec<ReminderInfo>, CallError> {
        let records = self
            .store
            .list_reminders(actor_type, actor_id, after, limit)
            .await
            .map_err(store_error)?;
        Ok(records.iter().filter_map(info).collect())
    }

    pub(crate) async fn count(&self) -> Result<u64, CallError> {
        self.store.count_reminders().await.map_err(store_error)
    }

    /// Makes `record` the in-memory version if it falls in the loaded window
    /// (dropping any older one). Called under the queue lock together with
    /// queueing its write, so a concurrent `delete` is wholly before or after.
    /// Returns whether the scheduler must wake for an earlier due time.
    fn track_locked(q: &mut Queue, record: &ReminderRecord) -> bool {
        if !q.covers(record.due_unix_ms) {
            q.live.remove(&record.key);
            return false;
        }
        let earliest = q.heap.peek().map(|Reverse((d, _))| *d);
        q.heap
            .push(Reverse((record.due_unix_ms, record.key.clone())));
        q.live.insert(record.clone());
        earliest.is_none_or(|d| record.due_unix_ms < d)
    }

    /// A write that was tracked in memory failed: forget that version.
    fn untrack(&self, record: &ReminderRecord) {
        let mut q = self.queue.lock();
        let same = q
            .live
            .get(&record.key)
            .is_some_and(|r| r.due_unix_ms == record.due_unix_ms && r.data == record.data);
        if same {
            q.live.remove(&record.key);
        }
    }
}

impl Scheduler {
    /// Tells whoever waits for due work to be done to look again: a firing
    /// was recorded, or a timer moved on.
    pub(crate) fn note_progress(&self) {
        self.progress.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The earliest stored due time at or before `until`, if any: what
    /// `advance_clock` steps to next. The store holds every reminder,
    /// including those being fired (their record moves on only when the
    /// firing is recorded), so nothing due is missed.
    pub(crate) async fn earliest_due(&self, until: u64) -> Result<Option<u64>, CallError> {
        let first = self
            .store
            .due_reminders(None, until, 1)
            .await
            .map_err(store_error)?;
        Ok(first.first().map(|r| r.due_unix_ms))
    }
}
