//! Loads: reading what comes due into memory, and the reminder writes
//! queued while a load reads the store. The read may
//! predate them, so for those reminders the records it returns are stale:
//! a deleted reminder would fire, a moved one fire at its old time (and
//! its firing overwrite the move). The in-memory decision each write made
//! when it was queued, kept here, wins over the read instead.
//!
//! Writes queued before a load starts are waited for (they are in the store
//! by the time it reads); writes are numbered in the order they are queued
//! so a load knows which ones those are.

use std::cmp::Reverse;
use std::collections::HashMap;

use troupe_storage::{ReminderKey, ReminderRecord};

use super::{empty_key, store_error, Queue, Scheduler, HORIZON, LOAD_CHUNK, MAX_IN_MEMORY};
use crate::error::{CallError, Unavailable};
use crate::input::millis;

/// What the last write queued during a load left of a reminder in memory.
#[derive(Debug)]
pub(super) enum Latest {
    /// Deleted, or its new version tracked in memory with the write (or a
    /// firing owns it): nothing for the load to add.
    Settled,
    /// A new version due past the loaded range of the time, so not in
    /// memory: it belongs there once a load's range covers it.
    Beyond(ReminderRecord),
}

#[derive(Debug, Default)]
pub(super) struct LoadWindow {
    /// The reminders written since the load in flight started; `None`
    /// while no load runs.
    open: Option<HashMap<ReminderKey, Latest>>,
    /// The number of the last write queued.
    last_seq: u64,
    /// Bumped when the scheduler forgets what it loaded: a load that started
    /// before read a range that no longer follows on from the cursor.
    generation: u64,
}

/// What a load needs to know when it starts.
#[derive(Debug, Clone, Copy)]
pub(super) struct LoadStart {
    /// The writes queued before it: it reads once they are all settled.
    pub(super) queued: u64,
    generation: u64,
}

impl LoadWindow {
    /// The number of a write being queued now.
    pub(super) fn next_seq(&mut self) -> u64 {
        self.last_seq = self.last_seq.wrapping_add(1);
        self.last_seq
    }

    /// The number of the last write queued.
    pub(super) fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Notes a write of `key` queued while a load is in flight.
    pub(super) fn note(&mut self, key: &ReminderKey, latest: impl FnOnce() -> Latest) {
        if let Some(written) = &mut self.open {
            written.insert(key.clone(), latest());
        }
    }

    /// A load starts: writes are noted from now until it ends.
    pub(super) fn open(&mut self) -> LoadStart {
        self.open = Some(HashMap::new());
        LoadStart {
            queued: self.last_seq,
            generation: self.generation,
        }
    }

    /// The load that started at `start` ended: what was written meanwhile,
    /// or `None` when the scheduler forgot what it loaded since (its read is
    /// of no use then).
    pub(super) fn close(&mut self, start: LoadStart) -> Option<HashMap<ReminderKey, Latest>> {
        let written = self.open.take().unwrap_or_default();
        (start.generation == self.generation).then_some(written)
    }

    /// The scheduler forgot what it loaded (owners changed).
    pub(super) fn forget(&mut self) {
        self.generation = self.generation.wrapping_add(1);
    }
}

impl Scheduler {
    /// Loads what comes due before the horizon, from the cursor on.
    pub(super) async fn load(&self) -> Result<(), CallError> {
        let (after, room, start) = {
            let mut q = self.queue.lock();
            let room = MAX_IN_MEMORY.saturating_sub(q.live.len()).min(LOAD_CHUNK);
            if room == 0 {
                return Ok(());
            }
            (q.cursor.clone(), room, q.window.open())
        };
        let until = self.time.now_ms().saturating_add(millis(HORIZON));
        let read = self.read_due(&after, until, room, start).await;
        let mut q = self.queue.lock();
        let written = q.window.close(start);
        let records = read?;
        // Forgotten meanwhile (owners changed): the next load starts over.
        let Some(written) = written else {
            return Ok(());
        };
        let full = records.len() == room;
        if let Some(last) = records.last() {
            q.cursor = (last.due_unix_ms, last.key.clone());
        }
        if !full {
            // Everything due up to `until` is in memory now.
            q.cursor = q.cursor.clone().max((until + 1, empty_key()));
        }
        q.more = full;
        for record in records {
            // Written since the load started: the write's version stands.
            // A version in memory is newer; one being fired is the firing's
            // until it writes the next.
            if written.contains_key(&record.key)
                || q.live.contains_key(&record.key)
                || q.firing.contains_key(&record.key)
            {
                continue;
            }
            q.heap
                .push(Reverse((record.due_unix_ms, record.key.clone())));
            q.live.insert(record);
        }
        for latest in written.into_values() {
            if let Latest::Beyond(record) = latest {
                Self::track_loaded(&mut q, record);
            }
        }
        Ok(())
    }

    /// Reads up to `limit` reminders due after `after` and by `until`, once
    /// every write queued before the load started is settled: the read
    /// sees those, and the window holds the ones queued since.
    async fn read_due(
        &self,
        after: &(u64, ReminderKey),
        until: u64,
        limit: usize,
        start: LoadStart,
    ) -> Result<Vec<ReminderRecord>, CallError> {
        let mut settled = self.settled.subscribe();
        settled
            .wait_for(|seq| *seq >= start.queued)
            .await
            .map_err(|_| CallError::from(Unavailable::ShuttingDown))?;
        self.store
            .due_reminders(Some((after.0, &after.1)), until, limit)
            .await
            .map_err(store_error)
    }

    /// Puts `record`, written during a load past the range of the time, in
    /// memory if the load's range covers it now.
    fn track_loaded(q: &mut Queue, record: ReminderRecord) {
        let taken = q.live.contains_key(&record.key) || q.firing.contains_key(&record.key);
        if taken || !q.covers(record.due_unix_ms) {
            return;
        }
        q.heap
            .push(Reverse((record.due_unix_ms, record.key.clone())));
        q.live.insert(record);
    }
}
