//! One watched stream on this daemon, an actor's or a whole type's: its
//! recent events, numbered under an epoch, and what a poll takes from them.

use std::collections::VecDeque;

use tokio::sync::watch;
use tokio::time::Instant;

use super::{new_epoch, Cursor, Origin, Polled, Take, WatchedEvent, HELD_BYTES};
use crate::types::{ActorId, Payload};

/// How much one stream holds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    pub(super) events: usize,
    pub(super) bytes: usize,
}

struct Held {
    seq: u64,
    /// Who published it; in a type's stream only (an actor's names its own).
    actor: Option<ActorId>,
    payload: Payload,
    origin: Origin,
}

/// Who published a stream's events, for a poll of it.
pub(super) enum Publisher<'a> {
    /// One actor's stream: this actor, every event.
    Named(&'a ActorId),
    /// A type's stream: each event's own, and only those this wants.
    Held(&'a dyn Fn(&ActorId) -> bool),
}

/// Where a poll starts.
pub(super) enum From {
    /// From now on: no events, only a position.
    Now,
    /// After this event, if the cursor is of this stream's epoch.
    After(Cursor),
    /// After none of this stream's events that the watcher knows of: it
    /// gets what is held and hears that some may have been missed.
    Unknown,
}

pub(super) struct Topic {
    epoch: u64,
    /// The number of the last event published (0: none yet).
    pub(super) last_seq: u64,
    held: VecDeque<Held>,
    pub(super) held_bytes: usize,
    bounds: Bounds,
    /// Tells waiting polls the last number moved.
    published: watch::Sender<u64>,
    /// Polls waiting now: the topic stays while any does.
    pub(super) waiting: usize,
    pub(super) last_poll: Instant,
}

impl Topic {
    pub(super) fn new(bounds: Bounds, now: Instant) -> Self {
        Self {
            epoch: new_epoch(),
            last_seq: 0,
            held: VecDeque::new(),
            held_bytes: 0,
            bounds,
            published: watch::Sender::new(0),
            waiting: 0,
            last_poll: now,
        }
    }

    pub(super) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Numbers `events` and holds them for the watchers, making room within
    /// the bounds; `daemon_bytes` counts every stream's.
    pub(super) fn append(
        &mut self,
        daemon_bytes: &mut usize,
        actor: Option<&ActorId>,
        events: &[Payload],
        origin: &Origin,
    ) {
        for payload in events {
            self.last_seq = self.last_seq.saturating_add(1);
            let size = payload.len();
            while self.held.len() >= self.bounds.events
                || (!self.held.is_empty()
                    && (self.held_bytes.saturating_add(size) > self.bounds.bytes
                        || daemon_bytes.saturating_add(size) > HELD_BYTES))
            {
                let freed = self.drop_oldest();
                *daemon_bytes = daemon_bytes.saturating_sub(freed);
            }
            self.held_bytes = self.held_bytes.saturating_add(size);
            *daemon_bytes = daemon_bytes.saturating_add(size);
            self.held.push_back(Held {
                seq: self.last_seq,
                actor: actor.cloned(),
                payload: payload.clone(),
                origin: origin.clone(),
            });
        }
        self.published.send_replace(self.last_seq);
    }

    /// Numbers `count` events that will never be held (dropped while they
    /// waited): a watcher past them is told some were missed.
    pub(super) fn skip(&mut self, count: usize) {
        let count = u64::try_from(count).unwrap_or(u64::MAX);
        self.last_seq = self.last_seq.saturating_add(count);
    }

    fn drop_oldest(&mut self) -> usize {
        match self.held.pop_front() {
            Some(h) => {
                self.held_bytes = self.held_bytes.saturating_sub(h.payload.len());
                h.payload.len()
            }
            None => 0,
        }
    }

    /// The events after `from` that `publisher` wants, or what to wait on
    /// when there are none yet.
    pub(super) fn take(&mut self, publisher: Publisher<'_>, from: From, now: Instant) -> Take {
        self.last_poll = now;
        let end = Cursor {
            epoch: self.epoch,
            seq: self.last_seq,
        };
        let from = match from {
            From::Now => {
                return Take::Ready(Polled {
                    events: Vec::new(),
                    cursor: end,
                    missed: false,
                })
            }
            // Another epoch's cursor (or one past the end, which only a
            // made-up cursor is): what it missed is unknown, so all held.
            From::After(c) if c.epoch != self.epoch || c.seq > self.last_seq => None,
            From::After(c) => Some(c.seq),
            From::Unknown => None,
        };
        let after = |h: &&Held| from.is_none_or(|seq| h.seq > seq);
        let first_after = self
            .held
            .iter()
            .find(after)
            .map_or(self.last_seq.saturating_add(1), |h| h.seq);
        let missed = match from {
            None => true,
            Some(seq) => seq.saturating_add(1) < first_after,
        };
        // Up to a gap (events dropped while queued): the next poll starts
        // after it and is told. Events the watcher does not want are passed
        // over, so its cursor moves past them.
        let mut events: Vec<WatchedEvent> = Vec::new();
        let mut looked: Option<u64> = None;
        for h in self.held.iter().filter(after) {
            if looked.is_some_and(|seq| seq.saturating_add(1) != h.seq) {
                break;
            }
            looked = Some(h.seq);
            let publisher = match (&publisher, &h.actor) {
                (Publisher::Named(actor), _) => *actor,
                (Publisher::Held(wants), Some(actor)) if wants(actor) => actor,
                (Publisher::Held(_), _) => continue,
            };
            events.push(WatchedEvent {
                cursor: Cursor {
                    epoch: self.epoch,
                    seq: h.seq,
                },
                actor: publisher.clone(),
                payload: h.payload.clone(),
                published_unix_ms: h.origin.published_unix_ms,
                trace: h.origin.trace.clone(),
            });
        }
        let position = looked.map_or(end, |seq| Cursor {
            epoch: self.epoch,
            seq,
        });
        // Nothing wanted up to the end: wait there. Stopped at a gap with
        // nothing wanted before it, the next poll (at once) crosses it.
        if events.is_empty() && !missed && position == end {
            self.waiting += 1;
            return Take::Wait(position, self.published.subscribe());
        }
        Take::Ready(Polled {
            events,
            cursor: position,
            missed,
        })
    }
}
