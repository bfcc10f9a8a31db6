//! What operators and callers read without a turn: status, listings, one
//! actor in detail, its state, metrics.
//!
//! Reads take each activation's lock briefly and copy out; none of them
//! activates an actor or waits for a turn.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::activation::{Inner, Status};
use crate::error::{CallError, Unavailable};
use crate::expiry;
use crate::flush::FlushBacklog;
use crate::inbox::status::InboxRetry;
use crate::metrics::Snapshot;
use crate::runtime::Runtime;
use crate::schedule::timers::TimerInfo;
use crate::schedule::{ReminderInfo, ALARM_NAME};
use crate::types::{ActorId, StateMode, TypeOptions};
use crate::validate;

/// Where an actor's activation is in its life, as operators see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActivationState {
    /// No live activation here.
    Inactive,
    /// Waiting for an app, loading state, or in the activation hook.
    Activating,
    Idle,
    Running,
    Deactivating,
}

impl ActivationState {
    fn of(inner: &Inner) -> Self {
        match inner.status {
            // Calls are queued: the next worker pass activates it.
            Status::Unloaded if !inner.mailbox.is_empty() => Self::Activating,
            // Kept only to hold unflushed state.
            Status::Unloaded | Status::Gone => Self::Inactive,
            Status::Activating => Self::Activating,
            Status::Idle => Self::Idle,
            Status::Running => Self::Running,
            Status::Deactivating => Self::Deactivating,
        }
    }

    pub fn is_live(self) -> bool {
        !matches!(self, Self::Inactive)
    }
}

/// One registered actor type.
#[derive(Debug, Clone)]
pub struct TypeStatus {
    pub name: String,
    /// Names of the connected apps hosting it; empty while its app is away.
    pub apps: Vec<String>,
    pub active_actors: usize,
    pub options: Option<Arc<TypeOptions>>,
}

/// A snapshot of the runtime for status output.
#[derive(Debug, Clone)]
pub struct RuntimeStatus {
    pub node: String,
    pub uptime: Duration,
    pub started_unix_ms: u64,
    pub active_actors: usize,
    pub pending_calls: usize,
    pub max_pending_calls: usize,
    pub types: Vec<TypeStatus>,
    pub store: String,
    pub flush: FlushBacklog,
    pub reminders_fired: u64,
    /// Reminders paused, as this daemon last read them; `None` until it has.
    pub reminders_paused: Option<usize>,
    /// The placement table version calls are routed by.
    pub placement_version: u64,
    /// Whether this daemon may serve actors (its placement lease holds).
    pub serving: bool,
    pub memory: MemoryBounds,
    pub events: EventsHeld,
}

/// What the daemon holds for watchers of actor events, against its bounds.
#[derive(Debug, Clone, Default)]
pub struct EventsHeld {
    /// Actors and whole types whose events are held, and the bound
    /// (`RuntimeConfig::max_watched_actors`).
    pub watched: usize,
    pub max_watched: usize,
    /// Bytes of events held, and the most held ([`crate::HELD_BYTES`]).
    pub held_bytes: usize,
    pub max_held_bytes: usize,
}

/// The daemon's memory bounds, how near it is, and what they did since it
/// started.
#[derive(Debug, Clone, Default)]
pub struct MemoryBounds {
    /// Bytes the live actors' stored idempotency keys take, and the bound
    /// (`RuntimeConfig::idempotency_memory_bytes`).
    pub call_records_bytes: usize,
    pub call_records_limit_bytes: usize,
    /// Times an actor gave that memory back at the bound.
    pub call_records_shed: u64,
    /// `RuntimeConfig::max_activations`.
    pub max_activations: Option<usize>,
    /// Actors deactivated to keep within it.
    pub capacity_deactivations: u64,
    /// Load shedding for memory (`RuntimeConfig::memory_shedding`).
    pub shedding: crate::MemoryGateStatus,
}

/// One active actor, for listings.
#[derive(Debug, Clone)]
pub struct ActorInfo {
    pub actor: ActorId,
    pub state: ActivationState,
    pub mailbox_depth: usize,
    pub turns: u64,
    pub dirty: bool,
    pub idle: Duration,
}

/// Everything known about one actor.
#[derive(Debug, Clone)]
pub struct ActorDetails {
    pub actor: ActorId,
    pub node: String,
    pub state: ActivationState,
    /// The app hosting the activation.
    pub app: Option<String>,
    pub activated_unix_ms: Option<u64>,
    pub last_active_unix_ms: Option<u64>,
    pub mailbox_depth: usize,
    pub turns: u64,
    /// Key, value, changed since the last flush; sorted by key.
    pub state_entries: Vec<(String, Bytes, bool)>,
    pub dirty: bool,
    pub state_mode: Option<StateMode>,
    pub reminders: Vec<ReminderInfo>,
    pub alarm: Option<ReminderInfo>,
    pub timers: Vec<TimerInfo>,
    /// The store holds state for it.
    pub stored: bool,
    /// Durable tells stored in its inbox: not yet handled, or handled by a
    /// turn whose writes (which remove them) are not yet flushed.
    pub inbox_depth: usize,
    /// Its durable tells that failed every attempt (counted up to a bound).
    pub dead_letters: usize,
    /// Its durable tells waiting for another attempt here, by seq.
    pub inbox_retries: Vec<InboxRetry>,
}

/// The most reminders one description lists.
const DESCRIBE_REMINDERS: usize = 1_000;

impl Runtime {
    pub fn status(&self) -> RuntimeStatus {
        let shared = &self.shared;
        let mut per_type = std::collections::HashMap::<String, usize>::new();
        shared.directory.for_each(|act| {
            *per_type.entry(act.id.ty.to_string()).or_default() += 1;
        });
        let types = shared
            .hosts
            .known_types()
            .into_iter()
            .map(|(name, apps)| TypeStatus {
                active_actors: per_type.get(&name).copied().unwrap_or(0),
                options: shared.hosts.options(&name),
                name,
                apps,
            })
            .collect();
        RuntimeStatus {
            node: shared.config.node.clone(),
            uptime: shared.clock.uptime(),
            started_unix_ms: shared.clock.started_unix_ms(),
            active_actors: shared.directory.len(),
            pending_calls: shared.pending.in_use(),
            max_pending_calls: shared.config.max_pending_calls,
            types,
            store: shared.flusher.store().describe(),
            flush: shared.flusher.backlog(),
            reminders_fired: shared.scheduler.fired.load(Ordering::Relaxed),
            reminders_paused: shared.scheduler.paused_count(),
            placement_version: shared.placement.table_version(),
            serving: shared.placement.may_serve(),
            memory: self.memory_bounds(),
            events: EventsHeld {
                watched: shared.events.watched(),
                max_watched: shared.config.max_watched_actors,
                held_bytes: shared.events.held_bytes(),
                max_held_bytes: crate::HELD_BYTES,
            },
        }
    }

    fn memory_bounds(&self) -> MemoryBounds {
        let shared = &self.shared;
        MemoryBounds {
            call_records_bytes: shared.records.held_bytes(),
            call_records_limit_bytes: shared.records.budget(),
            call_records_shed: shared.records.shed_total(),
            max_activations: shared.config.max_activations,
            capacity_deactivations: shared.capacity_deactivations.load(Ordering::Relaxed),
            shedding: shared.memory_gate.status(),
        }
    }

    /// Actor types a connected app hosts now, sorted. Cheap: no walk over
    /// the actors (placement heartbeats ask every few hundred ms).
    pub fn hosted_types(&self) -> Vec<String> {
        self.shared
            .hosts
            .hosted_types()
            .into_iter()
            .map(|(name, _)| name)
            .collect()
    }

    /// Changes whenever an app registers (the value counts registrations),
    /// so a watcher (`troupe dev`) learns of one without polling; read
    /// [`Runtime::hosted_types`] after a change.
    pub fn registrations(&self) -> tokio::sync::watch::Receiver<u64> {
        self.shared.hosts.registrations()
    }

    /// Active actors, optionally of one type, ordered by (type, id), after
    /// `after` (exclusive), at most `limit`.
    pub fn list_actors(
        &self,
        actor_type: Option<&str>,
        after: Option<&ActorId>,
        limit: usize,
    ) -> Vec<ActorInfo> {
        let now = self.shared.clock.now_ms();
        let mut out = Vec::new();
        self.shared.directory.for_each(|act| {
            if actor_type.is_some_and(|t| *act.id.ty != *t) || after.is_some_and(|a| act.id <= *a) {
                return;
            }
            let inner = act.inner.lock();
            out.push(ActorInfo {
                actor: act.id.clone(),
                state: ActivationState::of(&inner),
                mailbox_depth: inner.mailbox.len(),
                turns: u64::from(inner.turns),
                dirty: inner.is_dirty(),
                idle: Duration::from_millis(u64::from(
                    (now as u32).wrapping_sub(inner.last_active_ms),
                )),
            });
        });
        out.sort_by(|a, b| a.actor.cmp(&b.actor));
        out.truncate(limit);
        out
    }

    /// The bytes the store takes on disk, when it can tell (see
    /// `StateStore::size_on_disk`).
    pub async fn store_size_on_disk(&self) -> Option<u64> {
        self.shared.flusher.store().size_on_disk().await
    }

    /// Ids of actors of `actor_type` with stored state, in id order, after
    /// `after`, at most `limit`.
    pub async fn list_stored_actors(
        &self,
        actor_type: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, CallError> {
        validate::name("actor type", actor_type)?;
        self.shared
            .flusher
            .store()
            .list_actors(actor_type, after, limit)
            .await
            .map_err(|e| {
                Unavailable::store(
                    format!("cannot list the stored actors of type '{actor_type}'"),
                    e,
                )
                .into()
            })
    }

    /// Everything about `actor`, active or not; `None` when it is neither
    /// active, stored, nor scheduled. Never activates it.
    pub async fn describe_actor(&self, actor: &ActorId) -> Result<Option<ActorDetails>, CallError> {
        validate::name("actor type", &actor.ty)?;
        validate::name("actor id", &actor.id)?;
        let shared = &self.shared;
        let mut details = ActorDetails {
            actor: actor.clone(),
            node: shared.config.node.clone(),
            state: ActivationState::Inactive,
            app: None,
            activated_unix_ms: None,
            last_active_unix_ms: None,
            mailbox_depth: 0,
            turns: 0,
            state_entries: Vec::new(),
            dirty: false,
            state_mode: shared.hosts.options(&actor.ty).map(|o| o.state_mode),
            reminders: Vec::new(),
            alarm: None,
            timers: Vec::new(),
            stored: false,
            inbox_depth: 0,
            dead_letters: 0,
            inbox_retries: Vec::new(),
        };
        let mut have_state = false;
        if let Some(act) = shared.directory.get(actor) {
            let inner = act.inner.lock();
            details.state = ActivationState::of(&inner);
            if details.state.is_live() {
                details.app = inner.binding.as_ref().map(|b| b.host.name().to_owned());
                details.activated_unix_ms = Some(shared.clock.unix_ms_of(inner.activated_ms));
                details.last_active_unix_ms = Some(shared.clock.unix_ms_of(inner.last_active_ms));
                details.turns = u64::from(inner.turns);
            }
            if let Some(binding) = &inner.binding {
                details.state_mode = Some(binding.options.state_mode);
            }
            details.mailbox_depth = inner.mailbox.len();
            details.dirty = inner.is_dirty();
            if inner.state_loaded() {
                have_state = true;
                let dirty = inner.dirty.as_deref();
                details.state_entries = inner
                    .state
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            v.clone(),
                            dirty.is_some_and(|d| d.keys.contains(k)),
                        )
                    })
                    .collect();
            }
        }
        let stored = shared.stored_state(actor).await?;
        details.stored = !stored.is_empty();
        if !have_state {
            details.state_entries = stored.into_iter().map(|(k, v)| (k, v, false)).collect();
        }
        // As state reads show it: without the daemon's expiry times, and
        // without the keys past theirs.
        let view = expiry::ReaderView::of(
            details.state_entries.iter().map(|(k, v, _)| (k, v)),
            shared.time.now_ms(),
        );
        details
            .state_entries
            .retain(|(k, _, _)| view.shows(k).is_some());
        details.state_entries.sort_by(|a, b| a.0.cmp(&b.0));
        let reminders = shared
            .scheduler
            .list(Some(&actor.ty), Some(&actor.id), None, DESCRIBE_REMINDERS)
            .await?;
        for reminder in reminders {
            if reminder.alarm || reminder.name == ALARM_NAME {
                details.alarm = Some(reminder);
            } else {
                details.reminders.push(reminder);
            }
        }
        details.timers = shared.timers.describe(actor);
        (details.inbox_depth, details.dead_letters) = shared.inbox_counts(actor).await?;
        details.inbox_retries = shared.inbox_retries_of(actor);
        let known = details.state.is_live()
            || details.stored
            || details.inbox_depth > 0
            || details.dead_letters > 0
            || details.dirty
            || !details.reminders.is_empty()
            || details.alarm.is_some();
        Ok(known.then_some(details))
    }

    /// OpenMetrics text of the runtime's metrics; empty when
    /// [`RuntimeConfig::metrics`](crate::RuntimeConfig::metrics) is off.
    pub fn encode_metrics(&self, out: &mut String) -> std::fmt::Result {
        let Some(metrics) = &self.shared.metrics else {
            return Ok(());
        };
        let mut snapshot = Snapshot {
            dirty_actors: self.shared.flusher.dirty_actors() as i64,
            dirty_bytes: self.shared.flusher.dirty_bytes() as i64,
            record_memory_bytes: self.shared.records.held_bytes() as i64,
            records_shed: self.shared.records.shed_total(),
            shedding: self.shared.memory_gate.status(),
            uptime: self.shared.clock.uptime(),
            max_pending_calls: i64::try_from(self.shared.config.max_pending_calls)
                .unwrap_or(i64::MAX),
            serving: self.shared.placement.may_serve(),
            watched_actors: i64::try_from(self.shared.events.watched()).unwrap_or(i64::MAX),
            events_held_bytes: i64::try_from(self.shared.events.held_bytes()).unwrap_or(i64::MAX),
            reminders_paused: self
                .shared
                .scheduler
                .paused_count()
                .map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
            ..Snapshot::default()
        };
        // Registered types show up with zeros rather than not at all.
        for (name, _) in self.shared.hosts.hosted_types() {
            snapshot.per_type.entry(name).or_default();
        }
        self.shared.directory.for_each(|act| {
            let inner = act.inner.lock();
            let live = ActivationState::of(&inner).is_live();
            let queued = inner.mailbox.len() as i64;
            drop(inner);
            let entry = snapshot.per_type.entry(act.id.ty.to_string()).or_default();
            entry.0 += i64::from(live);
            entry.1 += queued;
        });
        // Read after the mailboxes: a call takes its pending slot before it
        // enters a mailbox, so a scrape never shows fewer pending calls than
        // the queued ones it counted.
        snapshot.pending_calls = self.shared.pending.in_use() as i64;
        snapshot.delivery = self.shared.delivery_per_type();
        metrics.encode(snapshot, out)
    }
}
