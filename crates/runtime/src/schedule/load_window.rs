//! The reminder writes queued while a load reads the store. The read may
//! predate them, so for those reminders the records it returns are stale:
//! a deleted reminder would fire, a moved one fire at its old time (and
//! its firing overwrite the move). The in-memory decision each write made
//! when it was queued, kept here, wins over the read instead.
//!
//! Writes queued before a load starts are waited for (they are in the store
//! by the time it reads); writes are numbered in the order they are queued
//! so a load knows which ones those are.

use std::collections::HashMap;

use troupe_storage::{ReminderKey, ReminderRecord};

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
