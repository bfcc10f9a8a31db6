//! Durable reminders and alarms, and in-memory timers.
//!
//! Reminders live in a [`ReminderStore`] indexed by due time. The scheduler
//! keeps in memory only what comes due within a horizon (a heap ordered by
//! due time plus a map of the current version of each), loaded lazily from
//! the index through a cursor: a million registered reminders need a million
//! rows, not a million timers.
//!
//! Every reminder write goes through one writer task that applies whatever
//! has queued up as one atomic, durable batch (group commit), in order. A
//! firing's bookkeeping is dropped when a `set` or `delete` of the same
//! reminder came meanwhile, so it never overwrites the newer call.
//!
//! A firing is a normal turn of kind REMINDER or ALARM. The stored record
//! only moves on once the turn succeeded, so a crash mid-firing fires again
//! (at-least-once). Failures are retried with exponential backoff up to the
//! reminder's policy, then dropped and logged; periodic reminders keep their
//! schedule either way.

pub(crate) mod record;
pub(crate) mod timers;
mod writer;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot, Notify, Semaphore};
use tracing::{debug, warn};
use troupe_storage::{ReminderKey, ReminderRecord, ReminderStore};

use crate::clock::unix_now_ms;
use crate::error::{CallError, Unavailable};
use crate::types::{ActorId, BoxFuture, ContentType, Payload};
pub use record::ALARM_NAME;
use record::{advance, decode, encode, info, Meta};
pub use record::{AlarmSpec, MissedFirings, ReminderInfo, ReminderSpec, RetryPolicy};
pub(crate) use writer::WriteRequest;
use writer::{run_writer, store_error, WriteOp};

/// How far ahead due reminders are kept in memory.
pub(crate) const HORIZON: Duration = Duration::from_secs(30);
/// At most this many reminders are held in memory at once.
const MAX_IN_MEMORY: usize = 200_000;
/// Firings running at once.
const MAX_FIRING: usize = 10_000;

#[derive(Default)]
struct Queue {
    /// Due time, then key; entries whose due no longer matches `live` are stale.
    heap: BinaryHeap<Reverse<(u64, ReminderKey)>>,
    /// The current in-memory version of each loaded reminder.
    live: HashMap<ReminderKey, ReminderRecord>,
    /// Everything at or before this (due, key) is in memory (or firing).
    cursor: (u64, ReminderKey),
    /// The last load stopped at its limit: more is due before the horizon.
    more: bool,
    /// Reminders being fired, and whether a `set` or `delete` touched them
    /// since: the firing's bookkeeping is then dropped (the newer call wins).
    firing: HashMap<ReminderKey, bool>,
}

fn empty_key() -> ReminderKey {
    ReminderKey {
        actor_type: String::new(),
        actor_id: String::new(),
        name: String::new(),
    }
}

/// Fires reminders through `fire`, which runs a turn and reports success.
pub(crate) trait Dispatch: Send + Sync + 'static {
    /// Whether this daemon fires the actor's reminders (it owns the actor).
    fn owns(&self, actor: &ActorId) -> bool;

    fn fire(
        &self,
        actor: ActorId,
        kind_alarm: bool,
        name: String,
        payload: Payload,
    ) -> BoxFuture<Result<(), CallError>>;
}

pub(crate) struct Scheduler {
    store: Arc<dyn ReminderStore>,
    writes: mpsc::UnboundedSender<WriteRequest>,
    queue: Mutex<Queue>,
    /// Something was inserted before the earliest due, or loading is needed.
    wake: Notify,
    firing: Arc<Semaphore>,
    pub(crate) fired: AtomicU64,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler").finish_non_exhaustive()
    }
}

impl Scheduler {
    pub(crate) fn new(
        store: Arc<dyn ReminderStore>,
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
        });
        (scheduler, rx)
    }

    pub(crate) fn start(
        self: &Arc<Self>,
        writes: mpsc::UnboundedReceiver<WriteRequest>,
        dispatch: Arc<dyn Dispatch>,
    ) {
        tokio::spawn(run_writer(self.store.clone(), writes));
        tokio::spawn(self.clone().run(dispatch));
    }

    async fn write(&self, op: WriteOp) -> Result<bool, CallError> {
        let done = self.enqueue(op)?;
        Self::finished(done).await
    }

    /// Queues a write; the writer applies queued writes in order.
    fn enqueue(
        &self,
        op: WriteOp,
    ) -> Result<oneshot::Receiver<Result<bool, CallError>>, CallError> {
        let (done, rx) = oneshot::channel();
        self.writes
            .send(WriteRequest { op, done })
            .map_err(|_| CallError::from(Unavailable::ShuttingDown))?;
        Ok(rx)
    }

    async fn finished(rx: oneshot::Receiver<Result<bool, CallError>>) -> Result<bool, CallError> {
        rx.await
            .map_err(|_| CallError::from(Unavailable::ShuttingDown))?
    }

    pub(crate) async fn set(&self, spec: ReminderSpec) -> Result<ReminderInfo, CallError> {
        let meta = Meta {
            period_ms: spec.period.map_or(0, |p| p.as_millis() as u64),
            remaining: spec.repeat,
            until_unix_ms: spec.until_unix_ms,
            bytes: spec.payload.content_type == ContentType::Bytes,
            max_attempts: spec.retry.max_attempts,
            initial_backoff_ms: spec.retry.initial_backoff.as_millis() as u64,
            max_backoff_ms: spec.retry.max_backoff.as_millis() as u64,
            skip_missed: spec.missed == MissedFirings::Skip,
            attempts: 0,
            fired: 0,
        };
        let record = ReminderRecord {
            key: ReminderKey {
                actor_type: spec.actor.ty.to_string(),
                actor_id: spec.actor.id.to_string(),
                name: spec.name,
            },
            due_unix_ms: spec.due_unix_ms,
            data: encode(&meta, &spec.payload),
        };
        let (done, wake) = {
            let mut q = self.queue.lock();
            if let Some(touched) = q.firing.get_mut(&record.key) {
                *touched = true;
            }
            let done = self.enqueue(WriteOp::Put(record.clone()))?;
            (done, Self::track_locked(&mut q, &record))
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
            if let Some(touched) = q.firing.get_mut(&key) {
                *touched = true;
            }
            q.live.remove(&key);
            self.enqueue(WriteOp::Delete(key.clone()))?
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
        // Compare by due time only: stores order keys of equal due time
        // their own way, so a key in the cursor's millisecond may lie on
        // either side of it. Keeping it in memory is safe either way: a load
        // skips keys already there.
        let covered = record.due_unix_ms <= q.cursor.0;
        if !covered {
            q.live.remove(&record.key);
            return false;
        }
        let earliest = q.heap.peek().map(|Reverse((d, _))| *d);
        q.heap
            .push(Reverse((record.due_unix_ms, record.key.clone())));
        q.live.insert(record.key.clone(), record.clone());
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

    /// Owners changed: forget what is in memory and load again from the
    /// start, keeping only reminders of actors this daemon owns now.
    pub(crate) fn reload(&self) {
        {
            let mut q = self.queue.lock();
            q.heap.clear();
            q.live.clear();
            q.cursor = (0, empty_key());
            q.more = true;
        }
        self.wake.notify_one();
    }

    /// Loads what comes due before the horizon, from the cursor on.
    async fn load(&self) -> Result<(), CallError> {
        let (after, room) = {
            let q = self.queue.lock();
            (q.cursor.clone(), MAX_IN_MEMORY.saturating_sub(q.live.len()))
        };
        if room == 0 {
            return Ok(());
        }
        let until = unix_now_ms() + HORIZON.as_millis() as u64;
        let after_ref = (after.0, &after.1);
        let records = self
            .store
            .due_reminders(Some(after_ref), until, room)
            .await
            .map_err(store_error)?;
        let full = records.len() == room;
        let mut q = self.queue.lock();
        if let Some(last) = records.last() {
            q.cursor = (last.due_unix_ms, last.key.clone());
        }
        if !full {
            // Everything due up to `until` is in memory now.
            q.cursor = q.cursor.clone().max((until + 1, empty_key()));
        }
        q.more = full;
        for record in records {
            // A version written since the load started is newer: keep it;
            // one being fired is the firing's until it writes the next.
            if q.live.contains_key(&record.key) || q.firing.contains_key(&record.key) {
                continue;
            }
            q.heap
                .push(Reverse((record.due_unix_ms, record.key.clone())));
            q.live.insert(record.key.clone(), record);
        }
        Ok(())
    }

    async fn run(self: Arc<Self>, dispatch: Arc<dyn Dispatch>) {
        loop {
            let now = unix_now_ms();
            let (next, needs_load) = {
                let q = self.queue.lock();
                let horizon_edge = q.cursor.0.saturating_sub(HORIZON.as_millis() as u64 / 2);
                let needs_load =
                    (q.more && q.live.len() < MAX_IN_MEMORY / 2) || now >= horizon_edge;
                (q.heap.peek().map(|Reverse((d, _))| *d), needs_load)
            };
            if needs_load {
                if let Err(e) = self.load().await {
                    warn!(error = %e, "loading due reminders failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                // Loading may have found earlier work; look again.
                let q = self.queue.lock();
                let next_now = q.heap.peek().map(|Reverse((d, _))| *d);
                if next_now != next {
                    continue;
                }
            }
            match next {
                Some(due) if due <= now => self.pop_and_fire(now, &dispatch).await,
                _ => {
                    let load_at = {
                        let q = self.queue.lock();
                        q.cursor.0.saturating_sub(HORIZON.as_millis() as u64 / 2)
                    };
                    let until = next.map_or(load_at, |d| d.min(load_at)).max(now + 1);
                    let wait = Duration::from_millis(until - now);
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = self.wake.notified() => {}
                    }
                }
            }
        }
    }

    async fn pop_and_fire(self: &Arc<Self>, now: u64, dispatch: &Arc<dyn Dispatch>) {
        // Fire everything due, each under a permit so at most MAX_FIRING run.
        loop {
            let record = {
                let mut q = self.queue.lock();
                let Some(Reverse((due, _))) = q.heap.peek() else {
                    return;
                };
                if *due > now {
                    return;
                }
                let Some(Reverse((due, key))) = q.heap.pop() else {
                    return;
                };
                match q.live.get(&key) {
                    // The firing owns it until it writes the next version.
                    Some(r) if r.due_unix_ms == due => {
                        q.firing.insert(key.clone(), false);
                        q.live.remove(&key)
                    }
                    _ => continue, // stale entry: moved or deleted
                }
            };
            let Some(record) = record else { continue };
            let Ok(permit) = self.firing.clone().acquire_owned().await else {
                return;
            };
            let (scheduler, dispatch) = (self.clone(), dispatch.clone());
            tokio::spawn(async move {
                scheduler.fire(record, now, &*dispatch).await;
                drop(permit);
            });
        }
    }

    async fn fire(&self, record: ReminderRecord, now: u64, dispatch: &dyn Dispatch) {
        let Some((mut meta, payload)) = decode(&record.data) else {
            warn!(reminder = ?record.key, "undecodable reminder dropped");
            let _ = self.write(WriteOp::Delete(record.key.clone())).await;
            return;
        };
        let actor = ActorId::new(record.key.actor_type.as_str(), record.key.actor_id.as_str());
        if !dispatch.owns(&actor) {
            // Another daemon owns the actor (or it is moving): that daemon's
            // scheduler fires it. Forget it here without touching the store.
            self.queue.lock().firing.remove(&record.key);
            return;
        }
        let period = meta.period_ms;
        // A firing missed by more than a period (or a second) while the
        // daemon was down is "missed".
        let missed = now.saturating_sub(record.due_unix_ms) > period.max(1000);
        let result = if missed && meta.skip_missed {
            debug!(reminder = ?record.key, "missed firing skipped");
            None
        } else {
            let alarm = record.key.name == ALARM_NAME;
            Some(
                dispatch
                    .fire(actor, alarm, record.key.name.clone(), payload.clone())
                    .await,
            )
        };
        let next_due = match result {
            Some(Err(e)) => {
                meta.attempts += 1;
                if meta.attempts < meta.max_attempts.max(1) {
                    let policy = RetryPolicy {
                        max_attempts: meta.max_attempts,
                        initial_backoff: Duration::from_millis(meta.initial_backoff_ms),
                        max_backoff: Duration::from_millis(meta.max_backoff_ms),
                    };
                    let backoff = policy.backoff(meta.attempts);
                    debug!(reminder = ?record.key, attempt = meta.attempts, error = %e, "firing failed; retrying");
                    Some(unix_now_ms() + backoff.as_millis() as u64)
                } else {
                    warn!(reminder = ?record.key, attempts = meta.attempts, error = %e, "firing failed after all retries; dropped");
                    meta.attempts = 0;
                    advance(&mut meta, record.due_unix_ms, now)
                }
            }
            Some(Ok(())) => {
                meta.attempts = 0;
                meta.fired += 1;
                self.fired.fetch_add(1, Ordering::Relaxed);
                advance(&mut meta, record.due_unix_ms, now)
            }
            None => advance(&mut meta, record.due_unix_ms, now),
        };
        let next = next_due.map(|due| ReminderRecord {
            key: record.key.clone(),
            due_unix_ms: due,
            data: encode(&meta, &payload),
        });
        // Decide and enqueue under the lock a concurrent `set`/`delete` takes
        // to mark the firing: either it marked us first (we drop our write),
        // or our write is queued before its, and its write lands last.
        let (queued, wake) = {
            let mut q = self.queue.lock();
            let touched = q.firing.remove(&record.key).unwrap_or(true);
            if touched {
                (None, false)
            } else {
                let op = match &next {
                    Some(next) => WriteOp::Put(next.clone()),
                    None => WriteOp::Delete(record.key.clone()),
                };
                let wake = next.as_ref().is_some_and(|n| Self::track_locked(&mut q, n));
                (Some(self.enqueue(op)), wake)
            }
        };
        if wake {
            self.wake.notify_one();
        }
        let outcome = match queued {
            None => Ok(()), // replaced or deleted meanwhile: the newer call stands
            Some(Err(e)) => Err(e),
            Some(Ok(done)) => Self::finished(done).await.map(|_| ()),
        };
        if let Err(e) = outcome {
            if let Some(next) = &next {
                self.untrack(next);
            }
            // The stored version still says due: it fires again once loaded.
            warn!(reminder = ?record.key, error = %e, "could not record a firing; it will fire again");
            let mut q = self.queue.lock();
            q.cursor = q
                .cursor
                .clone()
                .min((record.due_unix_ms.saturating_sub(1), empty_key()));
            q.more = true;
        }
    }
}
