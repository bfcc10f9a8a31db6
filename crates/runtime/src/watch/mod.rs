//! Events actors publish to whoever watches them (`ActorClient.Watch` and
//! `WatchType`, docs/events.md): the events a turn published, held on its
//! owner for the watchers' long polls (`poll`), per watched actor and per
//! watched type (`topic`).
//!
//! Events are live, not stored. The owner keeps an actor's recent events
//! only while someone watches it (and for [`KEPT_AFTER_LAST_POLL`] after the
//! last poll, so a watcher that reconnects resumes where it was): at most
//! [`HELD_EVENTS`] of them within [`HELD_BYTES_PER_ACTOR`]; a watched type's,
//! [`HELD_EVENTS_PER_TYPE`] within [`HELD_BYTES_PER_TYPE`]; [`HELD_BYTES`]
//! across the daemon. An actor nobody watches, of a type nobody watches,
//! publishes into nothing, so a turn's events cost one map lookup.
//!
//! A [`Cursor`] is an event's place in its stream: an epoch, drawn when the
//! owner began holding the stream's events, and the event's number. A
//! cursor of another epoch (the actor moved, or its owner restarted or
//! forgot it) cannot say what was missed, so the watcher is told some may
//! have been.

pub(crate) mod poll;
mod stored;
mod topic;

pub(crate) use stored::StoredEvents;

use std::fmt;
use std::hash::Hash;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hashbrown::HashMap;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::CallError;
use crate::types::{ActorId, Payload};
use topic::{Bounds, From, Publisher, Topic};

/// Events held per actor for watchers that fall behind or reconnect.
pub const HELD_EVENTS: usize = 256;
/// Bytes of events held per actor (the oldest go first).
pub const HELD_BYTES_PER_ACTOR: usize = 1024 * 1024;
/// Events held per watched type: its actors' together.
pub const HELD_EVENTS_PER_TYPE: usize = 4096;
/// Bytes of events held per watched type.
pub const HELD_BYTES_PER_TYPE: usize = 8 * 1024 * 1024;
/// Bytes of events held across the daemon.
pub const HELD_BYTES: usize = 64 * 1024 * 1024;
/// Events one turn may publish.
pub const MAX_EVENTS_PER_TURN: usize = HELD_EVENTS;
/// How long a stream's events are held after its last watcher's poll: a
/// watcher's next poll comes within milliseconds, a reconnect within seconds.
pub const KEPT_AFTER_LAST_POLL: Duration = Duration::from_secs(30);
/// Stale streams are looked for at most this often.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

const ACTOR_BOUNDS: Bounds = Bounds {
    events: HELD_EVENTS,
    bytes: HELD_BYTES_PER_ACTOR,
};
const TYPE_BOUNDS: Bounds = Bounds {
    events: HELD_EVENTS_PER_TYPE,
    bytes: HELD_BYTES_PER_TYPE,
};

/// Where an event is in its stream (see the module docs).
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
    /// The actor that published it.
    pub actor: ActorId,
    pub payload: Payload,
    /// When the turn that published it ended (unix ms).
    pub published_unix_ms: u64,
    /// The trace context of the turn that published it; `None`: untraced.
    pub trace: Option<Arc<EventTrace>>,
}

/// The W3C trace context of the turn that published an event, as the
/// turn's host was handed it, passed on to watchers so that their work
/// joins the trace of the call that caused the event. Like every trace
/// context, the runtime carries it and never parses it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EventTrace {
    pub traceparent: String,
    pub tracestate: String,
}

/// What every event of one turn shares.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Origin {
    /// When the turn ended (unix ms).
    pub(crate) published_unix_ms: u64,
    pub(crate) trace: Option<Arc<EventTrace>>,
}

/// What a watch of a whole type follows: the type's events, or only those
/// of its actors whose id starts with `id_prefix` (empty: all of them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedType {
    pub ty: Arc<str>,
    pub id_prefix: Arc<str>,
}

impl WatchedType {
    /// Every actor of `ty`.
    pub fn all(ty: impl Into<Arc<str>>) -> Self {
        Self {
            ty: ty.into(),
            id_prefix: Arc::from(""),
        }
    }

    /// Refuses an empty or unprintable type, and a prefix no id could
    /// start with.
    pub fn validate(&self) -> Result<(), CallError> {
        crate::validate::name("actor type", &self.ty)?;
        if !self.id_prefix.is_empty() {
            crate::validate::name("id prefix", &self.id_prefix)?;
        }
        Ok(())
    }

    fn wants(&self, actor: &ActorId) -> bool {
        actor.id.starts_with(&*self.id_prefix)
    }
}

/// Where a type watch's poll of one daemon begins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypeFrom {
    /// From now on: a new watch's first poll.
    Now,
    /// From now on, for a watch under way that polls this daemon for the
    /// first time (it joined, or began to host the type): the answer's
    /// `missed` says whether the daemon published any of the type's events
    /// before, which the watch may not have seen. A daemon that published
    /// none, as a new one mostly has not, adds no gap to the watch.
    NewHost,
    /// After the cursor among these that is of this daemon's stream; none
    /// is: events may have been missed.
    After(Vec<Cursor>),
}

impl TypeFrom {
    /// After `cursors`, or from now on when there are none.
    pub fn after(cursors: Vec<Cursor>) -> Self {
        if cursors.is_empty() {
            Self::Now
        } else {
            Self::After(cursors)
        }
    }

    /// Whether this poll begins a watch, which a type must be known for.
    pub(crate) fn begins(&self) -> bool {
        !matches!(self, Self::After(_))
    }
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

/// Whether a type's actors ever published an event on this daemon, kept
/// per type for the life of the process: a type watch's first poll of this
/// daemon is told events may be missing only if they did
/// ([`TypeFrom::NewHost`]).
#[derive(Debug, Default)]
pub(crate) struct PublishedFlag(AtomicBool);

impl PublishedFlag {
    /// A turn of the type published, before its events are handed over.
    pub(crate) fn mark(&self) {
        // Written once: publishing turns on every worker then only read it.
        if !self.0.load(Ordering::Acquire) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    pub(crate) fn get(&self) -> bool {
        self.0.load(Ordering::SeqCst)
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
    by_type: HashMap<Arc<str>, Topic>,
    /// Events waiting for durable turns' writes, per actor (`stored`).
    queues: HashMap<ActorId, stored::Queue>,
    held_bytes: usize,
    last_sweep: Option<Instant>,
}

impl Topics {
    fn watched(&self) -> usize {
        self.by_actor.len().saturating_add(self.by_type.len())
    }

    /// Whether anyone watches `actor`, alone or with its type.
    fn watches(&self, actor: &ActorId) -> bool {
        self.by_actor.contains_key(actor) || self.by_type.contains_key(&actor.ty)
    }

    /// Hands `actor`'s events to its stream and its type's, if watched.
    fn deliver(&mut self, actor: &ActorId, events: &[Payload], origin: &Origin) {
        if let Some(topic) = self.by_actor.get_mut(actor) {
            topic.append(&mut self.held_bytes, None, events, origin);
        }
        if let Some(topic) = self.by_type.get_mut(&actor.ty) {
            topic.append(&mut self.held_bytes, Some(actor), events, origin);
        }
    }

    /// Numbers `count` of `actor`'s events that were dropped unheld, in
    /// both its streams, so their watchers hear of the gap.
    fn skip(&mut self, actor: &ActorId, count: usize) {
        if let Some(topic) = self.by_actor.get_mut(actor) {
            topic.skip(count);
        }
        if let Some(topic) = self.by_type.get_mut(&actor.ty) {
            topic.skip(count);
        }
    }
}

/// Every watched stream's recent events on this daemon.
pub(crate) struct EventHub {
    topics: Mutex<Topics>,
    /// How many streams `topics` holds, read without its lock: while none
    /// is watched, which is most of the time, a publishing turn takes no
    /// lock that every worker shares.
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

    /// Streams (actors and types) whose events are held now.
    pub(crate) fn watched(&self) -> usize {
        self.watched.load(Ordering::Relaxed)
    }

    /// Bytes of events held now, queued ones included; read when scraped.
    pub(crate) fn held_bytes(&self) -> usize {
        self.topics.lock().held_bytes
    }

    /// Hands a turn's events to the actor's watchers and its type's, if it
    /// has any: at once, or behind events still waiting for their turns'
    /// writes (`stored`).
    pub(crate) fn publish(&self, actor: &ActorId, events: Vec<Payload>, origin: Origin) {
        // A watch that began before this turn ended stored its count before
        // (its poll returned first), so this load sees it.
        // SeqCst: after the turn marked its type as publishing (see
        // `take_from`); on x86 as cheap as a relaxed load.
        if self.watched.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut topics = self.topics.lock();
        if !topics.watches(actor) {
            return;
        }
        if topics.queues.contains_key(actor) {
            topics.queue(actor, None, events, origin);
        } else {
            topics.deliver(actor, &events, &origin);
        }
    }

    /// The events of `actor` after `after` (`None`: from now on), or what
    /// to wait on when there are none yet. Begins holding its events.
    pub(crate) fn take(
        &self,
        actor: &ActorId,
        after: Option<Cursor>,
        now: Instant,
    ) -> Result<Take, CallError> {
        let from = after.map_or(From::Now, From::After);
        self.take_from(
            actor,
            now,
            |t| &mut t.by_actor,
            ACTOR_BOUNDS,
            |topic| topic.take(Publisher::Named(actor), from, now),
        )
    }

    /// The events of every actor of the type `watched` wants from `from`
    /// on, or what to wait on. Begins holding the type's events.
    /// `published_before` tells whether this daemon ever published events
    /// of the type (read for [`TypeFrom::NewHost`], once the type's events
    /// are held, so that a turn ending meanwhile is either delivered or
    /// seen by it).
    pub(crate) fn take_type(
        &self,
        watched: &WatchedType,
        from: &TypeFrom,
        now: Instant,
        published_before: impl FnOnce() -> bool,
    ) -> Result<Take, CallError> {
        self.take_from(
            &watched.ty,
            now,
            |t| &mut t.by_type,
            TYPE_BOUNDS,
            |topic| {
                let wants = |a: &ActorId| watched.wants(a);
                match from {
                    TypeFrom::Now => topic.take(Publisher::Held(&wants), From::Now, now),
                    // From now on, which is always an answer at once.
                    TypeFrom::NewHost => {
                        match topic.take(Publisher::Held(&wants), From::Now, now) {
                            Take::Ready(polled) => Take::Ready(Polled {
                                missed: published_before(),
                                ..polled
                            }),
                            wait @ Take::Wait(..) => wait,
                        }
                    }
                    TypeFrom::After(after) => {
                        let from = after
                            .iter()
                            .find(|c| c.epoch == topic.epoch())
                            .map_or(From::Unknown, |c| From::After(*c));
                        topic.take(Publisher::Held(&wants), from, now)
                    }
                }
            },
        )
    }

    /// `take` on the stream of `key` in the map `map` picks, made (within
    /// the bound on watched streams) if there is none.
    fn take_from<K: Hash + Eq + Clone>(
        &self,
        key: &K,
        now: Instant,
        map: impl Fn(&mut Topics) -> &mut HashMap<K, Topic>,
        bounds: Bounds,
        take: impl FnOnce(&mut Topic) -> Take,
    ) -> Result<Take, CallError> {
        let mut topics = self.topics.lock();
        let topics = &mut *topics;
        if !map(topics).contains_key(key) {
            sweep(topics, now);
            self.watched.store(topics.watched(), Ordering::Relaxed);
            if topics.watched() >= self.max_watched {
                return Err(CallError::Overloaded(format!(
                    "this daemon already holds events for {} watched actors and types (its \
                     max_watched_actors); stop watches you no longer need, or raise the limit",
                    self.max_watched
                )));
            }
            map(topics).insert(key.clone(), Topic::new(bounds, now));
            // Before a new-host poll reads whether the type published: a
            // turn that published after that read sees this count (both
            // SeqCst) and delivers to the new topic.
            self.watched.store(topics.watched(), Ordering::SeqCst);
        }
        match map(topics).get_mut(key) {
            Some(topic) => Ok(take(topic)),
            None => Err(CallError::Internal(
                "a topic vanished under its lock".into(),
            )),
        }
    }

    /// A poll of `actor`'s events that waited is over.
    pub(crate) fn done_waiting(&self, actor: &ActorId, now: Instant) {
        done(self.topics.lock().by_actor.get_mut(actor), now);
    }

    /// A poll of `ty`'s events that waited is over.
    pub(crate) fn done_waiting_type(&self, ty: &Arc<str>, now: Instant) {
        done(self.topics.lock().by_type.get_mut(ty), now);
    }
}

fn done(topic: Option<&mut Topic>, now: Instant) {
    if let Some(topic) = topic {
        topic.waiting = topic.waiting.saturating_sub(1);
        topic.last_poll = now;
    }
}

/// Forgets streams nobody polled for [`KEPT_AFTER_LAST_POLL`].
fn sweep(topics: &mut Topics, now: Instant) {
    if topics
        .last_sweep
        .is_some_and(|at| now.saturating_duration_since(at) < SWEEP_EVERY)
    {
        return;
    }
    topics.last_sweep = Some(now);
    let mut freed = 0usize;
    let mut stale = |t: &Topic| {
        let keep =
            t.waiting > 0 || now.saturating_duration_since(t.last_poll) < KEPT_AFTER_LAST_POLL;
        if !keep {
            freed = freed.saturating_add(t.held_bytes);
        }
        keep
    };
    topics.by_actor.retain(|_, t| stale(t));
    topics.by_type.retain(|_, t| stale(t));
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
