//! What the runtime counts for the metrics endpoint.
//!
//! Counters and histograms live here and are bumped on the paths they
//! measure; gauges (active actors, mailbox depth, dirty actors, pending
//! calls) are read off the directory when scraped, so keeping them costs the
//! hot path nothing. Per-type handles are resolved once per type and held by
//! the type's hosts, so counting a turn is an atomic add, not a label lookup.
//! Names follow the Prometheus/OpenTelemetry conventions: base units
//! (seconds), `_total` on counters, snake-case label values.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use crate::error::CallError;
use crate::inbox::metrics::TypeDelivery;
use crate::types::{DeactivateReason, TurnKind};

mod scrape;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TypeLabels {
    actor_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    actor_type: String,
    kind: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    actor_type: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    actor_type: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    version: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Turns and flushes span tens of microseconds (in-process) to seconds.
fn latency_buckets() -> Histogram {
    Histogram::new([
        0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
        0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

/// How late a reminder or alarm starts: on time is a millisecond or so, a
/// busy actor holds it for turns, a daemon that was down for minutes.
fn lateness_buckets() -> Histogram {
    Histogram::new([
        0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
        300.0,
    ])
}

/// Keys per flush batch: one to millions.
fn batch_buckets() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        1.0, 4.0, 11,
    ))
}

const KINDS: [TurnKind; 4] = [
    TurnKind::Call,
    TurnKind::Reminder,
    TurnKind::Timer,
    TurnKind::Alarm,
];

fn kind_index(kind: TurnKind) -> usize {
    match kind {
        TurnKind::Call => 0,
        TurnKind::Reminder => 1,
        TurnKind::Timer => 2,
        TurnKind::Alarm => 3,
    }
}

/// The `result` label of a call that did not succeed.
fn result_label(error: &CallError) -> &'static str {
    match error {
        CallError::Actor(_) => "actor_error",
        CallError::InvalidArgument(_) => "invalid_argument",
        CallError::UnknownType { .. } => "not_found",
        CallError::NotFound(_) => "not_found",
        CallError::Overloaded(_)
        | CallError::RemoteOverloaded { .. }
        | CallError::TooLarge(_)
        | CallError::TooLargeForApp(_)
        | CallError::MemoryPressure(_) => "resource_exhausted",
        CallError::Unavailable(_) => "unavailable",
        CallError::DeadlineExceeded(_) | CallError::TurnTimedOut { .. } => "deadline_exceeded",
        CallError::FailedPrecondition(_) | CallError::ChainRefused(_) => "failed_precondition",
        CallError::Conflict(_) => "aborted",
        CallError::Internal(_) => "internal",
    }
}

/// Call results exported at 0 before the first one (`for_type`).
const WATCHED_FAILURES: [&str; 3] = ["resource_exhausted", "unavailable", "deadline_exceeded"];

/// One actor type's pre-resolved handles.
#[derive(Debug)]
pub(crate) struct TypeStats {
    activations: Counter,
    ok: [Counter; 4],
    actor_errors: [Counter; 4],
    turn_seconds: [Histogram; 4],
    /// By [`Scheduled::index`]; timers have no firings counted (their
    /// turns count as calls of kind `timer`).
    fired: [Counter; 3],
    lateness: [Histogram; 4],
    /// Running turns its apps were told to stop, their callers gone.
    cancelled: Counter,
    /// Events its succeeded turns published, watched or not.
    published: Counter,
    /// Polls of its events answered with "some may be missing".
    watch_gaps: Counter,
}

/// What a firing of the scheduler was: the `kind` label of
/// `reminders_fired` and `reminder_lateness`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheduled {
    Reminder,
    Alarm,
    /// A delayed tell, stored in its actor's inbox when due.
    Tell,
    /// A timer's turn: lateness only.
    Timer,
}

impl Scheduled {
    const FIRED: [Self; 3] = [Self::Reminder, Self::Alarm, Self::Tell];
    const LATE: [Self; 4] = [Self::Reminder, Self::Alarm, Self::Tell, Self::Timer];

    /// A reminder's firing: the alarm's, or another reminder's.
    pub(crate) fn firing(alarm: bool) -> Self {
        if alarm {
            Self::Alarm
        } else {
            Self::Reminder
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Reminder => "reminder",
            Self::Alarm => "alarm",
            Self::Tell => "tell",
            Self::Timer => "timer",
        }
    }

    fn index(self) -> usize {
        match self {
            Self::Reminder => 0,
            Self::Alarm => 1,
            Self::Tell => 2,
            Self::Timer => 3,
        }
    }
}

impl TypeStats {
    pub(crate) fn activated(&self) {
        self.activations.inc();
    }

    /// A turn ended with `result` after `took`.
    pub(crate) fn turn(&self, kind: TurnKind, took: Duration, ok: bool) {
        let i = kind_index(kind);
        self.turn_seconds[i].observe(took.as_secs_f64());
        if ok {
            self.ok[i].inc();
        } else {
            self.actor_errors[i].inc();
        }
    }

    /// A firing `late` after it was due (by the scheduling clock): a
    /// reminder's, alarm's or timer's turn handed to the app, or a delayed
    /// tell stored in its actor's inbox.
    pub(crate) fn firing_started(&self, kind: Scheduled, late: Duration) {
        if let Some(lateness) = self.lateness.get(kind.index()) {
            lateness.observe(late.as_secs_f64());
        }
    }

    /// A succeeded turn published `events` events.
    pub(crate) fn published(&self, events: usize) {
        self.published
            .inc_by(u64::try_from(events).unwrap_or(u64::MAX));
    }

    /// A firing of `kind` went through (for timers: nothing to count).
    pub(crate) fn fired(&self, kind: Scheduled) {
        if let Some(fired) = self.fired.get(kind.index()) {
            fired.inc();
        }
    }
}

#[derive(Debug)]
pub(crate) struct Metrics {
    types: RwLock<HashMap<Arc<str>, Arc<TypeStats>>>,
    activations: Family<TypeLabels, Counter>,
    deactivations: Family<ReasonLabels, Counter>,
    calls: Family<CallLabels, Counter>,
    record_reads: Family<TypeLabels, Counter>,
    turn_seconds: HistogramFamily<KindLabels>,
    reminders_fired: Family<KindLabels, Counter>,
    lateness: HistogramFamily<KindLabels>,
    turns_cancelled: Family<TypeLabels, Counter>,
    events_published: Family<TypeLabels, Counter>,
    watch_gaps: Family<TypeLabels, Counter>,
    flush_keys: Histogram,
    flush_seconds: Histogram,
    flush_failures: Counter,
    fenced_writes: Counter,
}

/// Gauges read at scrape time.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    /// Per type: active actors, queued calls.
    pub(crate) per_type: HashMap<String, (i64, i64)>,
    pub(crate) dirty_actors: i64,
    pub(crate) dirty_bytes: i64,
    /// Bytes the live actors' stored keys take (`idempotency::budget`).
    pub(crate) record_memory_bytes: i64,
    /// Since start: times an actor gave that memory back (`budget`, which
    /// counts them whether or not metrics are on).
    pub(crate) records_shed: u64,
    /// Load shedding for memory (`memory_gate`).
    pub(crate) shedding: crate::MemoryGateStatus,
    pub(crate) pending_calls: i64,
    /// `--max-pending-calls`, so an alert can divide by it.
    pub(crate) max_pending_calls: i64,
    /// Whether the daemon may serve its actors (its placement lease).
    pub(crate) serving: bool,
    pub(crate) uptime: Duration,
    /// Durable tells per type (`inbox::metrics`).
    pub(crate) delivery: Vec<TypeDelivery>,
    /// Reminders paused, once this daemon has read which.
    pub(crate) reminders_paused: Option<i64>,
    /// Actors whose events are held for watchers (`watch`).
    pub(crate) watched_actors: i64,
    /// Bytes of events held for watchers, of [`crate::HELD_BYTES`].
    pub(crate) events_held_bytes: i64,
}

impl Metrics {
    pub(crate) fn new() -> Self {
        Self {
            types: RwLock::default(),
            activations: Family::default(),
            deactivations: Family::default(),
            calls: Family::default(),
            record_reads: Family::default(),
            turn_seconds: Family::new_with_constructor(latency_buckets),
            reminders_fired: Family::default(),
            lateness: Family::new_with_constructor(lateness_buckets),
            turns_cancelled: Family::default(),
            events_published: Family::default(),
            watch_gaps: Family::default(),
            flush_keys: batch_buckets(),
            flush_seconds: latency_buckets(),
            flush_failures: Counter::default(),
            fenced_writes: Counter::default(),
        }
    }

    /// The handles for `ty`, created on first use.
    pub(crate) fn for_type(&self, ty: &Arc<str>) -> Arc<TypeStats> {
        if let Some(stats) = self.types.read().get(ty) {
            return stats.clone();
        }
        let actor_type = ty.to_string();
        let call = |kind: TurnKind, result: &str| {
            self.calls.get_or_create_owned(&CallLabels {
                actor_type: actor_type.clone(),
                kind: kind.as_str().into(),
                result: result.into(),
            })
        };
        let fired = |kind: &str| {
            self.reminders_fired.get_or_create_owned(&KindLabels {
                actor_type: actor_type.clone(),
                kind: kind.into(),
            })
        };
        let late = |kind: &str| {
            self.lateness.get_or_create_owned(&KindLabels {
                actor_type: actor_type.clone(),
                kind: kind.into(),
            })
        };
        let stats = Arc::new(TypeStats {
            activations: self.activations.get_or_create_owned(&TypeLabels {
                actor_type: actor_type.clone(),
            }),
            ok: KINDS.map(|k| call(k, "ok")),
            actor_errors: KINDS.map(|k| call(k, "actor_error")),
            turn_seconds: KINDS.map(|k| {
                self.turn_seconds.get_or_create_owned(&KindLabels {
                    actor_type: actor_type.clone(),
                    kind: k.as_str().into(),
                })
            }),
            fired: Scheduled::FIRED.map(|k| fired(k.label())),
            lateness: Scheduled::LATE.map(|k| late(k.label())),
            // Made here, so there at 0 from the type's first use: the first
            // cancellation must show in rate().
            cancelled: self.turns_cancelled.get_or_create_owned(&TypeLabels {
                actor_type: actor_type.clone(),
            }),
            published: self.events_published.get_or_create_owned(&TypeLabels {
                actor_type: actor_type.clone(),
            }),
            watch_gaps: self.watch_gaps.get_or_create_owned(&TypeLabels {
                actor_type: actor_type.clone(),
            }),
        });
        // The failures alerts and dashboards take a rate() of, there at 0
        // from the type's first use: a series born at its first increment
        // shows no increase for it, so the first burst of refusals would
        // not count.
        for kind in KINDS {
            for result in WATCHED_FAILURES {
                call(kind, result);
            }
        }
        self.types
            .write()
            .entry(ty.clone())
            .or_insert(stats)
            .clone()
    }

    /// A call that failed before or around its turn (refused, timed out,
    /// host lost); actor errors are counted with the turn.
    pub(crate) fn call_failed(&self, ty: &str, kind: TurnKind, error: &CallError) {
        if matches!(error, CallError::Actor(_)) {
            return;
        }
        self.calls
            .get_or_create(&CallLabels {
                actor_type: ty.to_owned(),
                kind: kind.as_str().into(),
                result: result_label(error).into(),
            })
            .inc();
    }

    /// A keyed call answered from its record: the method did not run again.
    pub(crate) fn call_replayed(&self, ty: &str) {
        self.calls
            .get_or_create(&CallLabels {
                actor_type: ty.to_owned(),
                kind: TurnKind::Call.as_str().into(),
                result: "replayed".into(),
            })
            .inc();
    }

    /// A keyed call or durable tell whose key memory did not know: the
    /// store was asked whether it was answered before.
    pub(crate) fn record_read(&self, ty: &str) {
        self.record_reads
            .get_or_create(&TypeLabels {
                actor_type: ty.to_owned(),
            })
            .inc();
    }

    pub(crate) fn deactivated(&self, ty: &str, reason: DeactivateReason) {
        self.deactivations
            .get_or_create(&ReasonLabels {
                actor_type: ty.to_owned(),
                reason: reason.as_str().into(),
            })
            .inc();
    }

    pub(crate) fn fired(&self, ty: &Arc<str>, kind: Scheduled) {
        self.for_type(ty).fired(kind);
    }

    /// A running turn's host was told to stop it, its caller gone.
    pub(crate) fn turn_cancelled(&self, ty: &Arc<str>) {
        self.for_type(ty).cancelled.inc();
    }

    /// A poll of `ty`'s events (an actor's, or the whole type's) was
    /// answered with "events may be missing before these".
    pub(crate) fn watch_gap(&self, ty: &Arc<str>) {
        self.for_type(ty).watch_gaps.inc();
    }

    pub(crate) fn flushed(&self, keys: usize, took: Duration) {
        self.flush_keys.observe(keys as f64);
        self.flush_seconds.observe(took.as_secs_f64());
    }

    pub(crate) fn flush_failed(&self) {
        self.flush_failures.inc();
    }

    pub(crate) fn write_fenced(&self) {
        self.fenced_writes.inc();
    }
}
