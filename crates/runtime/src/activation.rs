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
}

impl Envelope {
    /// The caller stopped waiting (deadline, cancellation): skip the turn.
    pub(crate) fn abandoned(&self) -> bool {
        self.reply.abandoned()
    }
}

#[derive(Debug)]
pub(crate) struct Activation {
    pub(crate) id: ActorId,
    pub(crate) inner: Mutex<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) status: Status,
    /// On a worker's run queue already; keeps an activation queued once.
    pub(crate) scheduled: bool,
    /// Its host disconnected; finish the current work and deactivate without it.
    pub(crate) host_lost: bool,
    /// `state` holds what the store has (plus changes); false until loaded.
    pub(crate) state_loaded: bool,
    /// On the flusher's dirty list.
    pub(crate) in_dirty_list: bool,
    pub(crate) mailbox: VecDeque<Envelope>,
    /// The host and type options this activation runs with.
    pub(crate) binding: Option<Arc<Binding>>,
    pub(crate) state: StateSnapshot,
    /// Keys changed since the last flush.
    pub(crate) dirty: Option<Box<HashSet<String>>>,
    /// Milliseconds since runtime start at the end of the last turn.
    pub(crate) last_active_ms: u64,
    pub(crate) turns: u64,
}

impl Activation {
    pub(crate) fn new(id: ActorId, now_ms: u64) -> Self {
        Self {
            id,
            inner: Mutex::new(Inner {
                status: Status::Unloaded,
                scheduled: false,
                host_lost: false,
                state_loaded: false,
                in_dirty_list: false,
                mailbox: VecDeque::new(),
                binding: None,
                state: StateSnapshot::default(),
                dirty: None,
                last_active_ms: now_ms,
                turns: 0,
            }),
        }
    }
}

impl Inner {
    /// Pops the next call whose caller still waits.
    pub(crate) fn next_envelope(&mut self) -> Option<Envelope> {
        let next = loop {
            match self.mailbox.pop_front() {
                Some(env) if env.abandoned() => continue,
                other => break other,
            }
        };
        if self.mailbox.is_empty() && self.mailbox.capacity() > 0 {
            // Give the buffer back: most actors are idle most of the time, and
            // an empty buffer of four envelopes would double an idle actor's size.
            self.mailbox = VecDeque::new();
        }
        next
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
