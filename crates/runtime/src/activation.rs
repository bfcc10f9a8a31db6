//! One live actor: its mailbox, status and cached state.
//!
//! Activations are not tasks. An activation with work is put on a worker's
//! run queue; the worker starts one turn and the host's completion handle
//! finishes it. That keeps an idle actor down to a few hundred bytes.

use std::sync::Arc;

use bytes::Bytes;
use hashbrown::HashSet;
use parking_lot::Mutex;

use crate::host_registry::Binding;
use crate::types::{ActorId, StateChange, StateSnapshot};

pub(crate) use crate::mailbox::{Envelope, Mailbox};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// No host instance: the next scheduling activates it.
    Unloaded,
    /// Waiting for a host, the store, or the host's activation hook.
    Activating,
    Idle,
    Running,
    Deactivating,
    /// Removed from the directory; a sender holding a stale reference retries.
    Gone,
}

/// Field order is fixed (`repr(C)`) so the lock and the fields every call
/// touches sit at the start, right after the `Arc` counts: with a million
/// busy actors each cache line of an activation is a miss.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Activation {
    pub(crate) inner: Mutex<Inner>,
    pub(crate) id: ActorId,
}

#[derive(Debug)]
#[repr(C)]
pub(crate) struct Inner {
    pub(crate) turns: u32,
    /// Coarse milliseconds since runtime start at the end of the last turn,
    /// truncated: compared with wrapping arithmetic, which holds because
    /// idle timeouts are capped far below the 49 days a u32 spans.
    pub(crate) last_active_ms: u32,
    /// Milliseconds since runtime start when the host was asked to activate
    /// the actor: exact, read once per activation (same wrapping rule as
    /// `last_active_ms`; only shown, never compared with the coarse clock).
    pub(crate) activated_ms: u32,
    pub(crate) status: Status,
    /// On a worker's run queue already; keeps an activation queued once.
    pub(crate) scheduled: bool,
    /// Turns running besides the first while `Running`: read-only turns
    /// beside each other, or re-entrant turns nested in their chain's turn.
    pub(crate) extra_turns: u8,
    /// Rarely touched flags packed in one byte (`STATE_LOADED`,
    /// `IN_DIRTY_LIST`, `HOST_LOST`, `READING`, `ANNOUNCED`, `RETIRING`, `IN_WAVE`) so the three u32 clocks and
    /// the bytes above still fit in the 16 before the first pointer: no
    /// growth per actor.
    flags: u8,
    pub(crate) mailbox: Mailbox,
    /// The host and type options this activation runs with.
    pub(crate) binding: Option<Arc<Binding>>,
    pub(crate) state: StateSnapshot,
    /// Keys changed since the last flush, and inbox changes and call
    /// records to write with them (in the same batch: see the `inbox` and
    /// `idempotency` modules).
    pub(crate) dirty: Option<Box<Dirty>>,
}

/// What the next flush owes the store for one actor.
#[derive(Debug, Default)]
pub(crate) struct Dirty {
    pub(crate) keys: HashSet<String>,
    pub(crate) inbox: Vec<troupe_storage::InboxOp>,
    /// Answers of keyed calls (the `idempotency` module).
    pub(crate) records: Vec<troupe_storage::CallRecord>,
}

impl Dirty {
    pub(crate) fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.inbox.is_empty() && self.records.is_empty()
    }
}

impl Activation {
    pub(crate) fn new(id: ActorId, now_ms: u32) -> Self {
        Self {
            id,
            inner: Mutex::new(Inner {
                turns: 0,
                last_active_ms: now_ms,
                status: Status::Unloaded,
                scheduled: false,
                extra_turns: 0,
                activated_ms: now_ms,
                flags: 0,
                mailbox: Mailbox::default(),
                binding: None,
                state: StateSnapshot::default(),
                dirty: None,
            }),
        }
    }
}

/// `state` holds what the store has (plus changes); unset until loaded.
const STATE_LOADED: u8 = 1;
/// On the flusher's dirty list.
const IN_DIRTY_LIST: u8 = 2;
/// Its host disconnected; finish the current work and deactivate without it.
const HOST_LOST: u8 = 4;
/// The running turns are all read-only: more read-only calls may join them.
const READING: u8 = 8;
/// Its start is in the activation log and its end is not yet.
const ANNOUNCED: u8 = 16;
/// A turn timed out: deactivate it through its host once no turn runs.
const RETIRING: u8 = 32;
/// Holds a place among the deactivations under way (`lifecycle::waves`).
const IN_WAVE: u8 = 64;
/// Dropped without writing its changes (fenced): a reply still held for
/// them must fail, not report them stored.
const CHANGES_DROPPED: u8 = 128;

impl Inner {
    pub(crate) fn state_loaded(&self) -> bool {
        self.flags & STATE_LOADED != 0
    }

    pub(crate) fn set_state_loaded(&mut self) {
        self.flags |= STATE_LOADED;
    }

    /// Drops the state read from the store (which no longer holds it): the
    /// next activation reads it again.
    pub(crate) fn forget_state(&mut self) {
        self.state = StateSnapshot::default();
        self.flags &= !STATE_LOADED;
    }

    pub(crate) fn in_wave(&self) -> bool {
        self.flags & IN_WAVE != 0
    }

    pub(crate) fn set_in_wave(&mut self, on: bool) {
        self.set_flag(IN_WAVE, on);
    }

    pub(crate) fn in_dirty_list(&self) -> bool {
        self.flags & IN_DIRTY_LIST != 0
    }

    pub(crate) fn set_in_dirty_list(&mut self, on: bool) {
        self.set_flag(IN_DIRTY_LIST, on);
    }

    pub(crate) fn host_lost(&self) -> bool {
        self.flags & HOST_LOST != 0
    }

    pub(crate) fn set_host_lost(&mut self, on: bool) {
        self.set_flag(HOST_LOST, on);
    }

    pub(crate) fn reading(&self) -> bool {
        self.flags & READING != 0
    }

    pub(crate) fn set_reading(&mut self, on: bool) {
        self.set_flag(READING, on);
    }

    pub(crate) fn retiring(&self) -> bool {
        self.flags & RETIRING != 0
    }

    pub(crate) fn set_retiring(&mut self, on: bool) {
        self.set_flag(RETIRING, on);
    }

    pub(crate) fn changes_dropped(&self) -> bool {
        self.flags & CHANGES_DROPPED != 0
    }

    /// Forgets the unwritten changes for good.
    pub(crate) fn drop_changes(&mut self) {
        if self.is_dirty() {
            self.set_flag(CHANGES_DROPPED, true);
        }
        self.dirty = None;
    }

    pub(crate) fn announced(&self) -> bool {
        self.flags & ANNOUNCED != 0
    }

    pub(crate) fn set_announced(&mut self, on: bool) {
        self.set_flag(ANNOUNCED, on);
    }

    fn set_flag(&mut self, flag: u8, on: bool) {
        if on {
            self.flags |= flag;
        } else {
            self.flags &= !flag;
        }
    }

    /// Whether the activation must go on a run queue now (calls wait and
    /// it is not on one); if so, it counts as scheduled from here on.
    pub(crate) fn claim_wake(&mut self) -> bool {
        let wake = !self.mailbox.is_empty() && !self.scheduled;
        self.scheduled |= wake;
        wake
    }

    /// Pops the next call whose caller still waits. While a durable tell
    /// waits out a retry backoff, it and the durable tells behind it stay
    /// (in order); other calls go ahead.
    pub(crate) fn next_envelope(&mut self) -> Option<Envelope> {
        loop {
            let held = self
                .mailbox
                .front()
                .and_then(|env| env.inbox.as_ref())
                .is_some_and(|tag| tag.in_backoff(tokio::time::Instant::now()));
            let env = if held {
                self.mailbox.pop_first_not_inbox()
            } else {
                self.mailbox.pop_front()
            };
            match env {
                Some(env) if env.abandoned() => continue,
                other => return other,
            }
        }
    }

    /// Applies a turn's changes at once and records the dirty keys.
    /// Returns the number of bytes written, for the flush threshold.
    pub(crate) fn apply(&mut self, changes: &[StateChange]) -> usize {
        if changes.is_empty() {
            return 0;
        }
        self.state.apply(changes);
        let dirty = self.dirty.get_or_insert_with(Default::default);
        let mut bytes = 0;
        for change in changes {
            bytes += change.key.len() + change.value.as_ref().map_or(0, Bytes::len);
            dirty.keys.insert(change.key.clone());
        }
        bytes
    }

    pub(crate) fn is_dirty(&self) -> bool {
        self.dirty.as_ref().is_some_and(|d| !d.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A million idle actors is the case that matters: every byte here is a
    /// megabyte there. Clocks, counters and flags fill exactly the first 16
    /// bytes, then four pointers.
    #[test]
    fn inner_stays_six_words() {
        assert_eq!(std::mem::size_of::<Inner>(), 48);
    }
}
