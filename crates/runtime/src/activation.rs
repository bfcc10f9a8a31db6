//! One live actor: its mailbox, status and cached state.
//!
//! Activations are not tasks. An activation with work is put on a worker's
//! run queue; the worker starts one turn and the host's completion handle
//! finishes it. That keeps an idle actor down to a few hundred bytes.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use hashbrown::HashSet;
use parking_lot::Mutex;

use crate::dispatch::pending::PendingSlot;
use crate::host_registry::Binding;
use crate::reply::Reply;
use crate::types::{ActorId, CallExtra, Payload, StateChange, StateSnapshot, TurnKind};

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

/// A call waiting in a mailbox.
#[derive(Debug)]
pub(crate) struct Envelope {
    pub(crate) kind: TurnKind,
    pub(crate) name: Arc<str>,
    pub(crate) payload: Payload,
    pub(crate) extra: Option<Box<CallExtra>>,
    pub(crate) reply: Reply,
    pub(crate) slot: PendingSlot,
    /// Whether the turn counts as activity for idle deactivation (timers
    /// without keep-alive do not).
    pub(crate) touch: bool,
    /// A call back into an actor already waiting on its chain, for a
    /// re-entrant type: runs nested in that turn instead of queueing.
    pub(crate) reentering: bool,
    /// A durable tell: its place in the actor's inbox (the `inbox` module).
    pub(crate) inbox: Option<Box<crate::inbox::tag::InboxTag>>,
}

impl Envelope {
    /// The caller stopped waiting (deadline, cancellation): skip the turn.
    pub(crate) fn abandoned(&self) -> bool {
        self.reply.abandoned()
    }
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

/// Calls waiting behind the running turn. Boxed and allocated only while
/// calls wait: a call for an idle actor skips the mailbox (direct dispatch),
/// so most actors never need one, and an empty one costs one pointer.
#[derive(Debug, Default)]
#[allow(clippy::box_collection)] // a thin pointer on purpose: 8 bytes per actor, not 32
pub(crate) struct Mailbox(Option<Box<VecDeque<Envelope>>>);

impl Mailbox {
    pub(crate) fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |q| q.len())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn push_back(&mut self, env: Envelope) {
        self.0.get_or_insert_with(Default::default).push_back(env);
    }

    pub(crate) fn front(&self) -> Option<&Envelope> {
        self.0.as_ref()?.front()
    }

    pub(crate) fn push_front(&mut self, env: Envelope) {
        self.0.get_or_insert_with(Default::default).push_front(env);
    }

    pub(crate) fn pop_front(&mut self) -> Option<Envelope> {
        let queue = self.0.as_mut()?;
        let env = queue.pop_front();
        if queue.is_empty() {
            // Give the buffer back: most actors are idle most of the time.
            self.0 = None;
        }
        env
    }

    /// Whether all that waits is durable tells held behind a retry's
    /// backoff: stored, so a shutdown need not wait for them (the actor's
    /// next activation delivers them).
    pub(crate) fn only_held_retries(&self, now: tokio::time::Instant) -> bool {
        let Some(queue) = self.0.as_ref() else {
            return false;
        };
        queue
            .front()
            .and_then(|env| env.inbox.as_ref())
            .is_some_and(|tag| tag.held(now))
            && queue.iter().all(|env| env.inbox.is_some())
    }

    /// Takes the first call that is not a durable tell's delivery.
    pub(crate) fn pop_first_not_inbox(&mut self) -> Option<Envelope> {
        let queue = self.0.as_mut()?;
        let at = queue.iter().position(|env| env.inbox.is_none())?;
        let env = queue.remove(at);
        if queue.is_empty() {
            self.0 = None;
        }
        env
    }

    /// The span of the oldest traced call waiting, if any.
    pub(crate) fn first_trace_span(&self) -> Option<tracing::Span> {
        self.0.as_ref()?.iter().find_map(|env| {
            let trace = env.extra.as_ref()?.trace.as_ref()?;
            Some(trace.span.clone())
        })
    }

    /// Empties the mailbox, returning what was in it.
    pub(crate) fn take_all(&mut self) -> VecDeque<Envelope> {
        self.0.take().map(|q| *q).unwrap_or_default()
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
                .is_some_and(|tag| tag.held(tokio::time::Instant::now()));
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
