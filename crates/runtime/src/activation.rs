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

use crate::hosts::Binding;
use crate::runtime::Reply;
use crate::slots::PendingSlot;
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
    pub(crate) status: Status,
    /// On a worker's run queue already; keeps an activation queued once.
    pub(crate) scheduled: bool,
    /// Its host disconnected; finish the current work and deactivate without it.
    pub(crate) host_lost: bool,
    /// `state` holds what the store has (plus changes); false until loaded.
    pub(crate) state_loaded: bool,
    /// On the flusher's dirty list.
    pub(crate) in_dirty_list: bool,
    pub(crate) mailbox: Mailbox,
    /// The host and type options this activation runs with.
    pub(crate) binding: Option<Arc<Binding>>,
    pub(crate) state: StateSnapshot,
    /// Keys changed since the last flush.
    pub(crate) dirty: Option<Box<HashSet<String>>>,
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
                host_lost: false,
                state_loaded: false,
                in_dirty_list: false,
                mailbox: Mailbox::default(),
                binding: None,
                state: StateSnapshot::default(),
                dirty: None,
            }),
        }
    }
}

impl Inner {
    /// Pops the next call whose caller still waits.
    pub(crate) fn next_envelope(&mut self) -> Option<Envelope> {
        loop {
            match self.mailbox.pop_front() {
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
            dirty.insert(change.key.clone());
        }
        bytes
    }

    pub(crate) fn is_dirty(&self) -> bool {
        self.dirty.as_ref().is_some_and(|d| !d.is_empty())
    }
}
