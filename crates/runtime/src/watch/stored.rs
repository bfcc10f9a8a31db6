//! Events of durable turns, held until the turn's writes are stored.
//!
//! A `durable` type's caller hears of a turn only once its writes are
//! stored; its watchers must not hear of it sooner, or a crash could undo
//! what they were told happened. So such a turn's events are queued on the
//! actor's topic with a ticket, given numbers when the flush that stores
//! them answers (or dropped if it fails), and every turn's events published
//! after them wait behind them: watchers see turns in the order they ended.
//! Nothing is queued for an actor nobody watches.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{EventHub, Topic, HELD_BYTES, HELD_BYTES_PER_ACTOR, HELD_EVENTS};
use crate::types::{ActorId, Payload};

/// One turn's events on the queue.
pub(super) struct Queued {
    /// Waiting for this ticket's write; `None`: ready once those before are.
    ticket: Option<u64>,
    events: Vec<Payload>,
    published_unix_ms: u64,
}

impl Queued {
    fn bytes(&self) -> usize {
        self.events.iter().map(|e| e.len()).sum()
    }
}

/// Tickets tell queued turns apart across the daemon.
static NEXT_TICKET: AtomicU64 = AtomicU64::new(1);

impl Topic {
    /// Queues a turn's events behind the others, within the bounds: past
    /// them the oldest go, and their numbers are skipped so that watchers
    /// are told some were missed. Whether any were published.
    pub(super) fn queue(
        &mut self,
        daemon_bytes: &mut usize,
        ticket: Option<u64>,
        events: Vec<Payload>,
        published_unix_ms: u64,
    ) -> bool {
        let queued = Queued {
            ticket,
            events,
            published_unix_ms,
        };
        let size = queued.bytes();
        self.queued_events = self.queued_events.saturating_add(queued.events.len());
        self.queued_bytes = self.queued_bytes.saturating_add(size);
        *daemon_bytes = daemon_bytes.saturating_add(size);
        self.queued.push_back(queued);
        while self.queued.len() > 1
            && (self.queued_events > HELD_EVENTS
                || self.queued_bytes > HELD_BYTES_PER_ACTOR
                || *daemon_bytes > HELD_BYTES)
        {
            if let Some(dropped) = self.unqueue_front(daemon_bytes) {
                let skipped = u64::try_from(dropped.events.len()).unwrap_or(u64::MAX);
                self.last_seq = self.last_seq.saturating_add(skipped);
            }
        }
        self.publish_ready(daemon_bytes)
    }

    fn unqueue_front(&mut self, daemon_bytes: &mut usize) -> Option<Queued> {
        let front = self.queued.pop_front()?;
        self.forget_queued(daemon_bytes, &front);
        Some(front)
    }

    fn forget_queued(&mut self, daemon_bytes: &mut usize, queued: &Queued) {
        let size = queued.bytes();
        self.queued_events = self.queued_events.saturating_sub(queued.events.len());
        self.queued_bytes = self.queued_bytes.saturating_sub(size);
        *daemon_bytes = daemon_bytes.saturating_sub(size);
    }

    /// Ends `ticket`'s wait (its events kept if `stored`), then publishes
    /// what is ready at the front. Whether any was published.
    fn settle(&mut self, daemon_bytes: &mut usize, ticket: u64, stored: bool) -> bool {
        let Some(at) = self.queued.iter().position(|q| q.ticket == Some(ticket)) else {
            // Dropped past the bounds, or its topic was forgotten and made anew.
            return false;
        };
        if stored {
            if let Some(q) = self.queued.get_mut(at) {
                q.ticket = None;
            }
        } else if let Some(failed) = self.queued.remove(at) {
            self.forget_queued(daemon_bytes, &failed);
        }
        self.publish_ready(daemon_bytes)
    }

    /// Numbers and holds the ready events at the front of the queue.
    fn publish_ready(&mut self, daemon_bytes: &mut usize) -> bool {
        let mut published = false;
        while self.queued.front().is_some_and(|q| q.ticket.is_none()) {
            if let Some(ready) = self.unqueue_front(daemon_bytes) {
                self.append(daemon_bytes, ready.events, ready.published_unix_ms);
                published = true;
            }
        }
        published
    }
}

impl EventHub {
    /// Queues a durable turn's events until [`StoredEvents::settle`] says
    /// whether its writes were stored; `None` when nobody watches the actor
    /// (the events go nowhere, as [`EventHub::publish`]'s would).
    pub(crate) fn hold_until_stored(
        self: &Arc<Self>,
        actor: &ActorId,
        events: Vec<Payload>,
        now_unix_ms: u64,
    ) -> Option<StoredEvents> {
        if self.watched.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut topics = self.topics.lock();
        let topics = &mut *topics;
        let topic = topics.by_actor.get_mut(actor)?;
        let ticket = NEXT_TICKET.fetch_add(1, Ordering::Relaxed);
        if topic.queue(&mut topics.held_bytes, Some(ticket), events, now_unix_ms) {
            topic.published.send_replace(topic.last_seq);
        }
        Some(StoredEvents {
            hub: self.clone(),
            actor: actor.clone(),
            ticket,
            settled: false,
        })
    }

    fn settle(&self, actor: &ActorId, ticket: u64, stored: bool) {
        let mut topics = self.topics.lock();
        let topics = &mut *topics;
        if let Some(topic) = topics.by_actor.get_mut(actor) {
            if topic.settle(&mut topics.held_bytes, ticket, stored) {
                topic.published.send_replace(topic.last_seq);
            }
        }
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
        self.hub.settle(&self.actor, self.ticket, stored);
    }
}

impl Drop for StoredEvents {
    fn drop(&mut self) {
        if !self.settled {
            self.hub.settle(&self.actor, self.ticket, false);
        }
    }
}
