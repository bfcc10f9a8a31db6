//! Events actors publish to whoever watches them (`ActorClient.Watch`,
//! docs/events.md): the events a turn published, held per actor on its
//! owner for the watchers' long polls (`poll`).
//!
//! Events are live, not stored. The owner keeps an actor's recent events
//! only while someone watches it (and for [`KEPT_AFTER_LAST_POLL`] after the
//! last poll, so a watcher that reconnects resumes where it was): at most
//! [`HELD_EVENTS`] of them within [`HELD_BYTES_PER_ACTOR`], and
//! [`HELD_BYTES`] across the daemon. An actor nobody watches publishes into
//! nothing, so a turn's events cost one map lookup.
//!
//! A [`Cursor`] is an event's place: an epoch, drawn when the owner began
//! holding the actor's events, and the event's number. A cursor of another
//! epoch (the actor moved, or its owner restarted or forgot it) cannot say
//! what was missed, so the watcher is told some may have been.

pub(crate) mod poll;
mod stored;

pub(crate) use stored::StoredEvents;

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hashbrown::HashMap;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::CallError;
use crate::types::{ActorId, Payload};

/// Events held per actor for watchers that fall behind or reconnect.
pub const HELD_EVENTS: usize = 256;
/// Bytes of events held per actor (the oldest go first).
pub const HELD_BYTES_PER_ACTOR: usize = 1024 * 1024;
/// Bytes of events held across the daemon.
pub const HELD_BYTES: usize = 64 * 1024 * 1024;
/// Events one turn may publish.
pub const MAX_EVENTS_PER_TURN: usize = HELD_EVENTS;
/// How long an actor's events are held after its last watcher's poll: a
/// watcher's next poll comes within milliseconds, a reconnect within seconds.
pub const KEPT_AFTER_LAST_POLL: Duration = Duration::from_secs(30);
/// Stale actors are looked for at most this often.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// Where an event is in its actor's stream (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub epoch: u64,
    /// The event's number; 0: before the first.
    pub seq: u64,
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}-{}", self.epoch, self.seq)
    }
}

/// A cursor that is not one the daemon gave out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "cursor {0:?} is not an event's cursor (they look like 00c0ffee00c0ffee-42); pass one a \
     watch sent, or none to watch from now"
)]
pub struct BadCursor(pub String);

impl FromStr for Cursor {
    type Err = BadCursor;

    fn from_str(s: &str) -> Result<Self, BadCursor> {
        let bad = || BadCursor(s.chars().take(64).collect());
        let (epoch, seq) = s.split_once('-').ok_or_else(bad)?;
        if epoch.len() != 16 {
            return Err(bad());
        }
        Ok(Cursor {
            epoch: u64::from_str_radix(epoch, 16).map_err(|_| bad())?,
            seq: seq.parse().map_err(|_| bad())?,
        })
    }
}

/// One event as a watcher gets it.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchedEvent {
    pub cursor: Cursor,
    pub payload: Payload,
    /// When the turn that published it ended (unix ms).
    pub published_unix_ms: u64,
}

/// The answer to one poll.
#[derive(Debug, Clone, PartialEq)]
pub struct Polled {
    pub events: Vec<WatchedEvent>,
    /// Where the next poll continues.
    pub cursor: Cursor,
    /// Events may have been lost before these.
    pub missed: bool,
}

struct Held {
    seq: u64,
    payload: Payload,
    published_unix_ms: u64,
}

struct Topic {
    epoch: u64,
    /// The number of the last event published (0: none yet).
    last_seq: u64,
    held: VecDeque<Held>,
    held_bytes: usize,
    /// Tells waiting polls the last number moved.
    published: watch::Sender<u64>,
    /// Polls waiting now: the topic stays while any does.
    waiting: usize,
    last_poll: Instant,
    /// Events not yet given numbers, in turn order: those of durable turns
    /// whose writes are not stored yet, and every later turn's behind them
    /// (`stored`).
    queued: VecDeque<stored::Queued>,
    queued_bytes: usize,
    queued_events: usize,
}

impl Topic {
    fn new(now: Instant) -> Self {
        Self {
            epoch: new_epoch(),
            last_seq: 0,
            held: VecDeque::new(),
            held_bytes: 0,
            published: watch::Sender::new(0),
            waiting: 0,
            last_poll: now,
            queued: VecDeque::new(),
            queued_bytes: 0,
            queued_events: 0,
        }
    }

    /// Numbers `events` and holds them for the watchers, making room within
    /// the bounds; `daemon_bytes` counts every actor's.
    fn append(&mut self, daemon_bytes: &mut usize, events: Vec<Payload>, now_unix_ms: u64) {
        for payload in events {
            self.last_seq = self.last_seq.saturating_add(1);
            let size = payload.len();
            while self.held.len() >= HELD_EVENTS
                || (!self.held.is_empty()
                    && (self.held_bytes.saturating_add(size) > HELD_BYTES_PER_ACTOR
                        || daemon_bytes.saturating_add(size) > HELD_BYTES))
            {
                let freed = self.drop_oldest();
                *daemon_bytes = daemon_bytes.saturating_sub(freed);
            }
            self.held_bytes = self.held_bytes.saturating_add(size);
            *daemon_bytes = daemon_bytes.saturating_add(size);
            self.held.push_back(Held {
                seq: self.last_seq,
                payload,
                published_unix_ms: now_unix_ms,
            });
        }
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
}

/// What a poll finds now.
pub(crate) enum Take {
    Ready(Polled),
    /// Nothing new: wait for the number to move past this cursor.
    Wait(Cursor, watch::Receiver<u64>),
}

#[derive(Default)]
struct Topics {
    by_actor: HashMap<ActorId, Topic>,
    held_bytes: usize,
    last_sweep: Option<Instant>,
}

/// Every watched actor's recent events on this daemon.
pub(crate) struct EventHub {
    topics: Mutex<Topics>,
    /// How many actors `topics` holds, read without its lock: while none is
    /// watched, which is most of the time, a publishing turn takes no lock
    /// that every worker shares.
    watched: AtomicUsize,
    max_watched: usize,
}

impl std::fmt::Debug for EventHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventHub")
            .field("watched", &self.watched())
            .finish_non_exhaustive()
    }
}

impl EventHub {
    pub(crate) fn new(max_watched: usize) -> Self {
        Self {
            topics: Mutex::new(Topics::default()),
            watched: AtomicUsize::new(0),
            max_watched,
        }
    }

    /// Actors whose events are held now.
    pub(crate) fn watched(&self) -> usize {
        self.watched.load(Ordering::Relaxed)
    }

    /// Hands a turn's events to the actor's watchers, if it has any: at
    /// once, or behind events still waiting for their turns' writes
    /// (`stored`).
    pub(crate) fn publish(&self, actor: &ActorId, events: Vec<Payload>, now_unix_ms: u64) {
        // A watch that began before this turn ended stored its count before
        // (its poll returned first), so this load sees it.
        if self.watched.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut topics = self.topics.lock();
        let topics = &mut *topics;
        let Some(topic) = topics.by_actor.get_mut(actor) else {
            return;
        };
        let published = if topic.queued.is_empty() {
            topic.append(&mut topics.held_bytes, events, now_unix_ms);
            true
        } else {
            topic.queue(&mut topics.held_bytes, None, events, now_unix_ms)
        };
        if published {
            topic.published.send_replace(topic.last_seq);
        }
    }

    /// The events after `after` (`None`: from now on), or what to wait on
    /// when there are none yet. Begins holding the actor's events.
    pub(crate) fn take(
        &self,
        actor: &ActorId,
        after: Option<Cursor>,
        now: Instant,
    ) -> Result<Take, CallError> {
        let mut topics = self.topics.lock();
        let topics = &mut *topics;
        if !topics.by_actor.contains_key(actor) {
            sweep(topics, now);
            self.watched.store(topics.by_actor.len(), Ordering::Relaxed);
            if topics.by_actor.len() >= self.max_watched {
                return Err(CallError::Overloaded(format!(
                    "this daemon already holds events for {} watched actors (its \
                     max_watched_actors); stop watches you no longer need, or raise the limit",
                    self.max_watched
                )));
            }
            topics.by_actor.insert(actor.clone(), Topic::new(now));
            self.watched.store(topics.by_actor.len(), Ordering::Relaxed);
        }
        let Some(topic) = topics.by_actor.get_mut(actor) else {
            return Err(CallError::Internal(
                "a topic vanished under its lock".into(),
            ));
        };
        topic.last_poll = now;
        let position = Cursor {
            epoch: topic.epoch,
            seq: topic.last_seq,
        };
        let from = match after {
            None => {
                return Ok(Take::Ready(Polled {
                    events: Vec::new(),
                    cursor: position,
                    missed: false,
                }))
            }
            // Another epoch's cursor (or one past the end, which only a
            // made-up cursor is): what it missed is unknown, so all held.
            Some(c) if c.epoch != topic.epoch || c.seq > topic.last_seq => None,
            Some(c) => Some(c.seq),
        };
        let first_after = topic
            .held
            .iter()
            .find(|h| from.is_none_or(|seq| h.seq > seq))
            .map_or(topic.last_seq.saturating_add(1), |h| h.seq);
        let missed = match from {
            None => true,
            Some(seq) => seq.saturating_add(1) < first_after,
        };
        // Up to a gap (events dropped while queued): the next poll starts
        // after it and is told.
        let mut events: Vec<WatchedEvent> = Vec::new();
        for h in topic
            .held
            .iter()
            .filter(|h| from.is_none_or(|seq| h.seq > seq))
        {
            if events
                .last()
                .is_some_and(|e| e.cursor.seq.saturating_add(1) != h.seq)
            {
                break;
            }
            events.push(WatchedEvent {
                cursor: Cursor {
                    epoch: topic.epoch,
                    seq: h.seq,
                },
                payload: h.payload.clone(),
                published_unix_ms: h.published_unix_ms,
            });
        }
        let position = events.last().map_or(position, |e| e.cursor);
        if events.is_empty() && !missed {
            topic.waiting += 1;
            return Ok(Take::Wait(position, topic.published.subscribe()));
        }
        Ok(Take::Ready(Polled {
            events,
            cursor: position,
            missed,
        }))
    }

    /// A poll that waited is over.
    pub(crate) fn done_waiting(&self, actor: &ActorId, now: Instant) {
        if let Some(topic) = self.topics.lock().by_actor.get_mut(actor) {
            topic.waiting = topic.waiting.saturating_sub(1);
            topic.last_poll = now;
        }
    }
}

/// Forgets actors nobody polled for [`KEPT_AFTER_LAST_POLL`].
fn sweep(topics: &mut Topics, now: Instant) {
    if topics
        .last_sweep
        .is_some_and(|at| now.saturating_duration_since(at) < SWEEP_EVERY)
    {
        return;
    }
    topics.last_sweep = Some(now);
    let mut freed = 0usize;
    topics.by_actor.retain(|_, t| {
        let keep =
            t.waiting > 0 || now.saturating_duration_since(t.last_poll) < KEPT_AFTER_LAST_POLL;
        if !keep {
            freed = freed.saturating_add(t.held_bytes.saturating_add(t.queued_bytes));
        }
        keep
    });
    topics.held_bytes = topics.held_bytes.saturating_sub(freed);
}

/// Tells one holding of an actor's events from another: random, so a
/// restarted or new owner never reuses one.
fn new_epoch() -> u64 {
    let mut bytes = [0u8; 8];
    // Without OS randomness the clock still tells epochs apart.
    if getrandom::fill(&mut bytes).is_err() {
        return std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
    }
    u64::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests;
