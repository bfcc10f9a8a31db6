//! Pausing and resuming reminders: an operator holds a reminder's firings
//! (during an incident, a migration, a bad deploy) without losing its
//! schedule, its payload or its count, and lets it go on later.
//!
//! A paused record is stored due at [`PAUSED_DUE`], the end of the due
//! index, so no load ever reads it; its meta keeps the time it was due
//! (`paused_due_ms`). Resuming stores it due at that time again: if that
//! is past, the reminder's own missed-firings rule decides, as after a
//! daemon was down that long (fire once then keep the schedule, or skip).
//!
//! Pause and resume read the record, then write it changed. The write is
//! made only if no other write of that reminder (a `set`, a `delete`, a
//! firing's bookkeeping) was queued since the read began; otherwise the
//! read is done again. A `set` of a paused reminder (apps set theirs at
//! each activation) replaces its schedule and keeps it paused: the keys
//! paused are known in memory (`paused_keys.rs`), read from the index's end
//! as the scheduler starts, and again after the owners change.

use std::collections::HashSet;
use std::sync::Arc;

use tracing::warn;

use troupe_storage::{ReminderKey, ReminderOp, ReminderRecord};

use super::paused_keys::PausedKeys;
use super::record::{decode, encode, info, ReminderInfo};
use super::{empty_key, store_error, Queue, Scheduler};
use crate::error::{CallError, Unavailable};

/// Where a paused reminder sits in the due index: past any due time a
/// caller can give, and within what every store keeps (PostgreSQL's
/// `bigint`).
pub(crate) const PAUSED_DUE: u64 = i64::MAX as u64;

/// How often a pause or resume reads again when other writes of its
/// reminder keep coming between its read and its write.
const TRIES: usize = 8;

/// Paused reminders read from the index's end per page.
const PAGE: usize = 1024;

/// A pause or resume between its read and its write: any write of the
/// same reminder queued meanwhile marks it (`Queue::holds`).
struct Hold<'a> {
    scheduler: &'a Scheduler,
    key: &'a ReminderKey,
    /// The reminder's write count when the hold began.
    seen: u64,
}

impl<'a> Hold<'a> {
    fn new(scheduler: &'a Scheduler, q: &mut Queue, key: &'a ReminderKey) -> Self {
        let holders = q.holds.entry(key.clone()).or_insert((0, 0));
        holders.0 += 1;
        Self {
            scheduler,
            key,
            seen: holders.1,
        }
    }

    /// Whether a write of the reminder was queued since the hold began.
    fn written(&self, q: &Queue) -> bool {
        q.holds.get(self.key).map(|holders| holders.1) != Some(self.seen)
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        let mut q = self.scheduler.queue.lock();
        if let Some(holders) = q.holds.get_mut(self.key) {
            holders.0 = holders.0.saturating_sub(1);
            if holders.0 == 0 {
                q.holds.remove(self.key);
            }
        }
    }
}

impl Queue {
    /// Tells pauses and resumes of `key` in progress that a write of it
    /// was queued.
    pub(super) fn note_write(&mut self, key: &ReminderKey) {
        // Every write comes here, nearly always with no pause in progress.
        if self.holds.is_empty() {
            return;
        }
        if let Some(holders) = self.holds.get_mut(key) {
            holders.1 = holders.1.wrapping_add(1);
        }
    }
}

impl Scheduler {
    /// Pauses (`paused`) or resumes the reminder at `key`: `None` if there
    /// is none. Pausing a paused reminder, or resuming a running one,
    /// changes nothing.
    pub(crate) async fn set_paused(
        &self,
        key: ReminderKey,
        paused: bool,
    ) -> Result<Option<ReminderInfo>, CallError> {
        self.paused_known().await?;
        for _ in 0..TRIES {
            let (hold, queued) = {
                let mut q = self.queue.lock();
                let hold = Hold::new(self, &mut q, &key);
                (hold, q.window.last_seq())
            };
            self.settled_up_to(queued).await?;
            let Some(record) = self.store.get_reminder(&key).await.map_err(store_error)? else {
                return Ok(None);
            };
            let Some((mut meta, payload)) = decode(&record.data) else {
                return Err(CallError::Internal(format!(
                    "reminder {:?} of {}/{} is stored in a form this daemon cannot read \
                     (written by another version?); delete it and set it again",
                    key.name, key.actor_type, key.actor_id
                )));
            };
            if meta.paused_due_ms.is_some() == paused {
                return Ok(info(&record));
            }
            let due_unix_ms = if paused {
                meta.paused_due_ms = Some(record.due_unix_ms);
                PAUSED_DUE
            } else {
                meta.paused_due_ms.take().unwrap_or(record.due_unix_ms)
            };
            let changed = ReminderRecord {
                key: key.clone(),
                due_unix_ms,
                data: encode(&meta, &payload),
            };
            let (done, wake) = {
                let mut q = self.queue.lock();
                if hold.written(&q) {
                    continue; // written meanwhile: read it again
                }
                q.supersede(&key);
                q.live.remove(&key);
                q.paused.mark(&key, paused);
                let latest = q.latest_of_put(&changed);
                let done = self.enqueue(&mut q, ReminderOp::Put(changed.clone()), latest)?;
                let wake = !paused && Self::track_locked(&mut q, &changed);
                (done, wake)
            };
            drop(hold);
            if wake {
                self.wake.notify_one();
            }
            if let Err(e) = Self::finished(done).await {
                self.untrack(&changed);
                // Not knowing what the store holds now, read it again.
                self.forget_paused();
                return Err(e);
            }
            return Ok(info(&changed));
        }
        Err(CallError::Overloaded(format!(
            "reminder {:?} of {}/{} changed {TRIES} times while it was being {}; try again",
            key.name,
            key.actor_type,
            key.actor_id,
            if paused { "paused" } else { "resumed" }
        )))
    }

    /// Reads which reminders are paused again, in the background: at start
    /// (writes that need to know wait for it), and when the owners change
    /// (what was known answers meanwhile, so no write waits).
    pub(crate) fn refresh_paused(self: &Arc<Self>) {
        let (generation, queued) = {
            let mut q = self.queue.lock();
            Self::begin_paused_read(&mut q)
        };
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(error) = this.read_paused_into(generation, queued).await {
                warn!(%error, "reading which reminders are paused failed; the next reminder write that needs to know reads again");
            }
        });
    }

    /// How many reminders are paused, once known.
    pub(crate) fn paused_count(&self) -> Option<usize> {
        self.queue.lock().paused.count()
    }

    /// Forgets the paused keys once the placement table moved past the
    /// version they follow. `reload` forgets them on a table change too,
    /// but a moment after routing already follows the new table: a `set`
    /// of an actor this daemon just took over, in between, would answer
    /// from keys read before its old owner paused the reminder, and set
    /// it running again.
    pub(super) fn paused_follow_table(&self, q: &mut Queue) {
        let version = self.placement.table_version();
        if version != q.paused_table {
            q.paused_table = version;
            q.paused = PausedKeys::Unknown;
            self.paused_read.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Forgets which reminders are paused: they are read again before the
    /// next write that needs to know.
    pub(super) fn forget_paused(&self) {
        self.queue.lock().paused = PausedKeys::Unknown;
        self.paused_read.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Waits until every write queued up to `seq` is settled.
    async fn settled_up_to(&self, seq: u64) -> Result<(), CallError> {
        let mut settled = self.settled.subscribe();
        settled
            .wait_for(|done| *done >= seq)
            .await
            .map(|_| ())
            .map_err(|_| CallError::from(Unavailable::ShuttingDown))
    }

    /// Makes the paused keys known: reads them from the index's end, or
    /// waits for the first read another caller started.
    pub(super) async fn paused_known(&self) -> Result<(), CallError> {
        loop {
            let mut read_ended = self.paused_read.subscribe();
            let start = {
                let mut q = self.queue.lock();
                if q.paused.count().is_some() {
                    return Ok(());
                }
                match q.paused {
                    PausedKeys::Unknown => Some(Self::begin_paused_read(&mut q)),
                    _ => None,
                }
            };
            match start {
                Some((generation, queued)) => {
                    return self.read_paused_into(generation, queued).await;
                }
                None => read_ended
                    .changed()
                    .await
                    .map_err(|_| CallError::from(Unavailable::ShuttingDown))?,
            }
        }
    }

    /// Starts a read of the paused keys: its generation, and the writes it
    /// must see (queued before it).
    fn begin_paused_read(q: &mut Queue) -> (u64, u64) {
        q.paused_generation = q.paused_generation.wrapping_add(1);
        let generation = q.paused_generation;
        q.paused.begin_read(generation);
        (generation, q.window.last_seq())
    }

    /// Reads the paused keys once the writes queued before `queued` are
    /// stored, and makes them known (unless a newer read began meanwhile).
    async fn read_paused_into(&self, generation: u64, queued: u64) -> Result<(), CallError> {
        let read = match self.settled_up_to(queued).await {
            Ok(()) => self.read_paused().await,
            Err(e) => Err(e),
        };
        self.queue
            .lock()
            .paused
            .end_read(generation, read.as_ref().ok());
        self.paused_read.send_modify(|n| *n = n.wrapping_add(1));
        read.map(|_| ())
    }

    /// The keys of the records at the index's end: the paused ones.
    async fn read_paused(&self) -> Result<HashSet<ReminderKey>, CallError> {
        let mut keys = HashSet::new();
        let mut after = (PAUSED_DUE.saturating_sub(1), empty_key());
        loop {
            let page = self
                .store
                .due_reminders(Some((after.0, &after.1)), PAUSED_DUE, PAGE)
                .await
                .map_err(store_error)?;
            let full = page.len() == PAGE;
            for record in page {
                after = (record.due_unix_ms, record.key.clone());
                if record.due_unix_ms == PAUSED_DUE {
                    keys.insert(record.key);
                }
            }
            if !full {
                return Ok(keys);
            }
        }
    }
}
