//! The scrape: every family and the gauges read off the runtime at scrape
//! time, as OpenMetrics text.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use super::{Metrics, Snapshot, TypeLabels, VersionLabels};

impl Metrics {
    /// OpenMetrics text of everything, gauges from `snapshot`.
    pub(crate) fn encode(&self, snapshot: Snapshot, out: &mut String) -> std::fmt::Result {
        // A registry per scrape: the persistent families are registered as
        // clones (they share their values), the gauges are fresh.
        let mut registry = Registry::with_prefix("troupe");
        let info: Family<VersionLabels, Gauge> = Family::default();
        info.get_or_create(&VersionLabels {
            version: env!("CARGO_PKG_VERSION").into(),
        })
        .set(1);
        registry.register("build_info", "Version of the troupe runtime", info);
        let uptime: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default();
        uptime.set(snapshot.uptime.as_secs_f64());
        registry.register_with_unit(
            "uptime",
            "Time since the runtime started",
            Unit::Seconds,
            uptime,
        );
        let active: Family<TypeLabels, Gauge> = Family::default();
        let mailbox: Family<TypeLabels, Gauge> = Family::default();
        for (actor_type, (actors, queued)) in snapshot.per_type {
            let labels = TypeLabels { actor_type };
            active.get_or_create(&labels).set(actors);
            mailbox.get_or_create(&labels).set(queued);
        }
        registry.register(
            "actors_active",
            "Actors with a live activation on this daemon",
            active,
        );
        registry.register(
            "mailbox_depth",
            "Calls waiting in actor mailboxes behind the running turn",
            mailbox,
        );
        registry.register(
            "activations",
            "Activations started",
            self.activations.clone(),
        );
        registry.register(
            "deactivations",
            "Activations ended, by reason",
            self.deactivations.clone(),
        );
        registry.register(
            "calls",
            "Calls and scheduled turns by result (ok, actor_error, or the gRPC status)",
            self.calls.clone(),
        );
        registry.register_with_unit(
            "turn_duration",
            "Time from handing a turn to its host until its result",
            Unit::Seconds,
            self.turn_seconds.clone(),
        );
        registry.register(
            "reminders_fired",
            "Reminder, alarm and delayed tell firings delivered",
            self.reminders_fired.clone(),
        );
        registry.register_with_unit(
            "reminder_lateness",
            "Time from a reminder's, alarm's or timer's due time until its turn was handed to the app (a delayed tell's: until it was stored in the actor's inbox)",
            Unit::Seconds,
            self.lateness.clone(),
        );
        registry.register(
            "turns_cancelled",
            "Running turns whose app was told to stop them because their caller stopped waiting",
            self.turns_cancelled.clone(),
        );
        registry.register(
            "flush_batch_keys",
            "Keys written per write-behind batch",
            self.flush_keys.clone(),
        );
        registry.register_with_unit(
            "flush_duration",
            "Time to store one write-behind batch",
            Unit::Seconds,
            self.flush_seconds.clone(),
        );
        registry.register(
            "call_record_reads",
            "Keyed calls and durable tells whose key memory did not know, so the store was asked \
             whether they were answered before",
            self.record_reads.clone(),
        );
        registry.register(
            "flush_failures",
            "Batches the store refused (retried with backoff)",
            self.flush_failures.clone(),
        );
        registry.register(
            "fenced_writes",
            "Actors whose state write the store refused because a newer owner had them (their \
             activation here was dropped)",
            self.fenced_writes.clone(),
        );
        registry.register(
            "call_records_shed",
            "Times a live actor gave back memory that remembers which keys the store holds answers \
             for, to stay within --idempotency-memory-bytes: its keys kept as tags only (their \
             retries read the store) or forgotten (every unmarked key reads the store)",
            {
                let shed: Counter = Counter::default();
                shed.inc_by(snapshot.records_shed);
                shed
            },
        );
        let gauge = |v: i64| {
            let g: Gauge = Gauge::default();
            g.set(v);
            g
        };
        registry.register(
            "dirty_actors",
            "Actors with changes not yet in the store",
            gauge(snapshot.dirty_actors),
        );
        registry.register_with_unit(
            "dirty",
            "Bytes of changes not yet in the store",
            Unit::Bytes,
            gauge(snapshot.dirty_bytes),
        );
        registry.register_with_unit(
            "call_records_memory",
            "Memory the live actors spend remembering which keys the store holds answers for",
            Unit::Bytes,
            gauge(snapshot.record_memory_bytes),
        );
        if let Some(paused) = snapshot.reminders_paused {
            registry.register(
                "reminders_paused",
                "Reminders paused (PauseReminder): they do not fire until resumed; as this daemon \
                 last read them from the store",
                gauge(paused),
            );
        }
        registry.register(
            "watched_actors",
            "Actors and whole types whose events this daemon holds for watchers \
             (ActorClient.Watch, WatchType), against --max-watched-actors",
            gauge(snapshot.watched_actors),
        );
        registry.register_with_unit(
            "events_held",
            "Bytes of events this daemon holds for watchers to poll, of at most 64 MiB (the \
             oldest go first)",
            Unit::Bytes,
            gauge(snapshot.events_held_bytes),
        );
        registry.register(
            "events_published",
            "Events the succeeded turns of a type published here, watched or not",
            self.events_published.clone(),
        );
        registry.register(
            "watch_gaps",
            "Polls of a type's events (one actor's or the whole type's) answered here with \
             'events may be missing before these': a watcher fell behind what is held, resumed \
             from an unknown cursor, or the actor's events were dropped waiting for a durable write",
            self.watch_gaps.clone(),
        );
        registry.register(
            "pending_calls",
            "Calls admitted and not yet answered",
            gauge(snapshot.pending_calls),
        );
        registry.register(
            "max_pending_calls",
            "The bound on pending calls (--max-pending-calls), past which new calls get \
             RESOURCE_EXHAUSTED",
            gauge(snapshot.max_pending_calls),
        );
        registry.register(
            "serving",
            "1 while the daemon may serve its actors, else 0: in a cluster, its placement lease \
             lapsed and every call to its actors gets UNAVAILABLE (always 1 on a single node)",
            gauge(i64::from(snapshot.serving)),
        );
        if snapshot.shedding.shed_percent > 0 {
            registry.register(
                "memory_shedding",
                "1 while the daemon refuses new calls because its resident memory is near its \
                 limit (--memory-shed-percent), else 0",
                gauge(i64::from(snapshot.shedding.shedding)),
            );
            registry.register(
                "memory_shed_requests",
                "New calls and reminder, alarm or timer settings refused because resident memory \
                 was near the limit",
                {
                    let refused: Counter = Counter::default();
                    refused.inc_by(snapshot.shedding.refused);
                    refused
                },
            );
        }
        crate::inbox::metrics::register(&mut registry, &snapshot.delivery);
        prometheus_client::encoding::text::encode(out, &registry)
    }
}
