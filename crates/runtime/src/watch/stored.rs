//! Events of durable turns, held until the turn's writes are stored.
//!
//! A `durable` type's caller hears of a turn only once its writes are
//! stored; its watchers must not hear of it sooner, or a crash could undo
//! what they were told happened. So such a turn's events wait in a queue
//! of their actor with a ticket, are handed to the actor's and its type's
//! streams when the flush that stores them answers (or dropped if it
//! fails), and every turn's events published after them wait behind them:
//! watchers see an actor's turns in the order they ended. Nothing is queued
//! for an actor nobody watches, alone or with its type.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{EventHub, Origin, Topics, HELD_BYTES, HELD_BYTES_PER_ACTOR, HELD_EVENTS};
use crate::types::{ActorId, Payload};

/// One actor's events waiting, oldest first.
#[derive(Default)]
pub(super) struct Queue {
    entries: VecDeque<Queued>,
    events: usize,
    bytes: usize,
}

/// One turn's events on a queue.
struct Queued {
    /// Waiting for this ticket's write; `None`: ready once those before are.
    ticket: Option<u64>,
    events: Vec<Payload>,
    origin: Origin,
}

impl Queued {
    fn bytes(&self) -> usize {
        self.events.iter().map(|e| e.len()).sum()
    }
}

/// Tickets tell queued turns apart across the daemon.
static NEXT_TICKET: AtomicU64 = AtomicU64::new(1);

impl Topics {
    /// Queues a turn's events behind `actor`'s others, within the bounds:
    /// past them the oldest go, and their numbers are skipped so that
    /// watchers are told some were missed.
    pub(super) fn queue(
        &mut self,
        actor: &ActorId,
        ticket: Option<u64>,
        events: Vec<Payload>,
        origin: Origin,
    ) {
        let queued = Queued {
            ticket,
            events,
            origin,
        };
        let size = queued.bytes();
        self.held_bytes = self.held_bytes.saturating_add(size);
        if !self.queues.contains_key(actor) {
            self.queues.insert(actor.clone(), Queue::default());
        }
        let Some(queue) = self.queues.get_mut(actor) else {
            return;
        };
        queue.events = queue.events.saturating_add(queued.events.len());
        queue.bytes = queue.bytes.saturating_add(size);
        queue.entries.push_back(queued);
        let mut skipped = 0usize;
        while queue.entries.len() > 1
            && (queue.events > HELD_EVENTS
                || queue.bytes > HELD_BYTES_PER_ACTOR
                || self.held_bytes > HELD_BYTES)
        {
            if let Some(dropped) = queue.entries.pop_front() {
                self.held_bytes = self.held_bytes.saturating_sub(queue.forget(&dropped));
                skipped = skipped.saturating_add(dropped.events.len());
            }
        }
        if skipped > 0 {
            self.skip(actor, skipped);
        }
        self.deliver_ready(actor);
    }

    /// Ends `ticket`'s wait (its events kept if `stored`), then delivers
    /// what is ready at the front of `actor`'s queue.
    fn settle(&mut self, actor: &ActorId, ticket: u64, stored: bool) {
        let Some(queue) = self.queues.get_mut(actor) else {
            return;
        };
        // Dropped past the bounds, its events skipped: nothing to do.
        let Some(at) = queue.entries.iter().position(|q| q.ticket == Some(ticket)) else {
            return;
        };
        if stored {
            if let Some(q) = queue.entries.get_mut(at) {
                q.ticket = None;
            }
        } else if let Some(failed) = queue.entries.remove(at) {
            self.held_bytes = self.held_bytes.saturating_sub(queue.forget(&failed));
        }
        self.deliver_ready(actor);
    }

    /// Hands the ready turns at the front of `actor`'s queue to its
    /// streams, and forgets the queue once it is empty.
    fn deliver_ready(&mut self, actor: &ActorId) {
        loop {
            let Some(queue) = self.queues.get_mut(actor) else {
                return;
            };
            if queue.entries.front().is_some_and(|q| q.ticket.is_some()) {
                return;
            }
            let Some(ready) = queue.entries.pop_front() else {
                self.queues.remove(actor);
                return;
            };
            self.held_bytes = self.held_bytes.saturating_sub(queue.forget(&ready));
            self.deliver(actor, &ready.events, &ready.origin);
        }
    }
}

impl Queue {
    /// Takes `queued`'s share out of the counts; its bytes.
    fn forget(&mut self, queued: &Queued) -> usize {
        let size = queued.bytes();
        self.events = self.events.saturating_sub(queued.events.len());
        self.bytes = self.bytes.saturating_sub(size);
        size
    }
}

impl EventHub {
    /// Queues a durable turn's events until [`StoredEvents::settle`] says
    /// whether its writes were stored; `None` when nobody watches the actor
    /// or its type (the events go nowhere, as [`EventHub::publish`]'s would).
    pub(crate) fn hold_until_stored(
        self: &Arc<Self>,
        actor: &ActorId,
        events: Vec<Payload>,
        origin: Origin,
    ) -> Option<StoredEvents> {
        // SeqCst, as in `publish`.
        if self.watched.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let mut topics = self.topics.lock();
        if !topics.watches(actor) {
            return None;
        }
        let ticket = NEXT_TICKET.fetch_add(1, Ordering::Relaxed);
        topics.queue(actor, Some(ticket), events, origin);
        Some(StoredEvents {
            hub: self.clone(),
            actor: actor.clone(),
            ticket,
            settled: false,
        })
    }
}

/// A durable turn's events on their actor's queue. Dropped unsettled (its
/// reply was never answered), they count as not stored.
pub(crate) struct StoredEvents {
    hub: Arc<EventHub>,
    actor: ActorId,
    ticket: u64,
    settled: bool,
}

impl std::fmt::Debug for StoredEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredEvents")
            .field("actor", &self.actor)
            .field("ticket", &self.ticket)
            .finish_non_exhaustive()
    }
}

impl StoredEvents {
    /// Publishes the events if the turn's writes were `stored`, else drops
    /// them; either way the events queued behind them may go.
    pub(crate) fn settle(mut self, stored: bool) {
        self.settled = true;
        self.hub
            .topics
            .lock()
            .settle(&self.actor, self.ticket, stored);
    }
}

impl Drop for StoredEvents {
    fn drop(&mut self) {
        if !self.settled {
            self.hub
                .topics
                .lock()
                .settle(&self.actor, self.ticket, false);
        }
    }
}
