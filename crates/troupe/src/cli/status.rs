//! `troupe status`: the daemon at a glance.

use serde_json::{json, Value};
use troupe_proto::v1 as pb;

use super::render::{self, Table};
use super::{connect, emit, emit_json, Output, Target};

pub async fn status(target: &Target) -> anyhow::Result<()> {
    let daemon = connect(target).await?;
    let mut admin = pb::admin_client::AdminClient::new(daemon.channel.clone());
    let request = daemon.request("read the daemon's status");
    let s = admin
        .status(pb::StatusRequest {})
        .await
        .map_err(|e| request.failed(e))?
        .into_inner();
    match target.output {
        Output::Json => emit_json(&status_json(&s)),
        Output::Table => emit(&status_table(&s)),
    }
}

fn status_json(s: &pb::StatusResponse) -> Value {
    let flush = s.flush.clone().unwrap_or_default();
    let mut flush_json = json!({
        "dirty_actors": flush.dirty_actors,
        "dirty_bytes": flush.dirty_bytes,
        "held_replies": flush.held_replies,
        "batches": flush.batches,
        "keys_written": flush.keys_written,
        "failing": flush.failing,
        "last_error": (!flush.last_error.is_empty()).then_some(&flush.last_error),
    });
    if let Some(o) = flush_json.as_object_mut() {
        render::time_json(o, "last_flush", flush.last_flush_unix_ms);
    }
    let types: Vec<Value> = s
        .types
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "apps": t.apps,
                "active_actors": t.active_actors,
                "state_mode": render::state_mode(t.state_mode),
                "idle_timeout_ms": t.idle_timeout_ms,
                "max_mailbox": t.max_mailbox,
                "reentrant": t.reentrant,
            })
        })
        .collect();
    let mut out = json!({
        "version": s.version,
        "node": s.node,
        "listen": s.listen,
        "store": s.store,
        "store_bytes": (s.store_bytes > 0).then_some(s.store_bytes),
        "uptime_ms": s.uptime_ms,
        "active_actors": s.active_actors,
        "dirty_actors": s.dirty_actors,
        "pending_calls": s.pending_calls,
        "max_pending_calls": s.max_pending_calls,
        "reminders_fired": s.reminders_fired,
        "flush": flush_json,
        "delivery": s.delivery.as_ref().map(delivery_json),
        "inbound_links": super::links::inbound_json(s.inbound_links.as_ref()),
        "memory": s.memory.as_ref().map(memory_json),
        "types": types,
    });
    if let Some(o) = out.as_object_mut() {
        render::time_json(o, "started", s.started_unix_ms);
    }
    out
}

/// Where state lives, with its size on disk when the store tells it.
fn store_cell(s: &pb::StatusResponse) -> String {
    match (s.store.is_empty(), s.store_bytes) {
        (true, _) => "-".to_owned(),
        (false, 0) => s.store.clone(),
        (false, n) => format!("{} ({} on disk)", s.store, render::bytes(n)),
    }
}

fn status_table(s: &pb::StatusResponse) -> String {
    let flush = s.flush.clone().unwrap_or_default();
    let or_dash = |v: &str| {
        if v.is_empty() {
            "-".to_owned()
        } else {
            v.to_owned()
        }
    };
    let started = match render::time(s.started_unix_ms) {
        Some(t) => format!("{t} (up {})", render::duration(s.uptime_ms)),
        None => format!("up {}", render::duration(s.uptime_ms)),
    };
    let backlog = format!(
        "{} dirty actors ({} bytes), {} durable replies waiting",
        flush.dirty_actors, flush.dirty_bytes, flush.held_replies
    );
    let written = format!(
        "{} keys in {} since start, last {}",
        flush.keys_written,
        plural(flush.batches, "batch", "batches"),
        render::time_cell(flush.last_flush_unix_ms)
    );
    let mut pairs = vec![
        ("version", s.version.clone()),
        ("node", or_dash(&s.node)),
        ("listen", or_dash(&s.listen)),
        ("store", store_cell(s)),
        ("started", started),
        ("active actors", active_actors(s)),
        (
            "pending calls",
            format!("{} of at most {}", s.pending_calls, s.max_pending_calls),
        ),
        ("reminders fired", s.reminders_fired.to_string()),
        ("flush backlog", backlog),
        ("flushed", written),
    ];
    // Absent from a daemon older than the CLI.
    if let Some(d) = &s.delivery {
        pairs.extend(delivery_pairs(d));
    }
    if let Some(m) = &s.memory {
        pairs.push(("memory", process_memory(m)));
        if m.memory_limit_bytes > 0 {
            pairs.push(("load shedding", load_shedding(m)));
        }
        pairs.push(("key memory", key_memory(m)));
    }
    if let Some(l) = &s.inbound_links {
        pairs.push((
            "inbound links",
            format!(
                "{} from other daemons; {} let go since start (their pings stopped)",
                plural(l.streams, "stream", "streams"),
                l.let_go
            ),
        ));
    }
    if flush.failing {
        pairs.push((
            "STORE FAILING",
            format!(
                "{} (durable calls get UNAVAILABLE; dirty state waits in memory and is retried)",
                or_dash(&flush.last_error)
            ),
        ));
    }
    let mut out = render::fields(&pairs);
    out.push('\n');
    if s.types.is_empty() {
        out.push_str("no actor types registered: no app is connected\n");
        return out;
    }
    let mut t = Table::new(&[
        ("TYPE", false),
        ("ACTIVE", true),
        ("STATE MODE", false),
        ("IDLE TIMEOUT", true),
        ("MAX MAILBOX", true),
        ("REENTRANT", false),
        ("APPS", false),
    ]);
    for ty in &s.types {
        t.row(vec![
            ty.name.clone(),
            ty.active_actors.to_string(),
            render::state_mode(ty.state_mode).to_owned(),
            render::duration_cell(ty.idle_timeout_ms),
            ty.max_mailbox.to_string(),
            render::yes_no(ty.reentrant).to_owned(),
            if ty.apps.is_empty() {
                "(no app connected)".to_owned()
            } else {
                ty.apps.join(", ")
            },
        ]);
    }
    out.push_str(&t.render());
    out
}

fn memory_json(m: &pb::MemoryBounds) -> Value {
    json!({
        "call_records_bytes": m.call_records_bytes,
        "call_records_limit_bytes": m.call_records_limit_bytes,
        "call_records_shed": m.call_records_shed,
        "max_activations": (m.max_activations > 0).then_some(m.max_activations),
        "capacity_deactivations": m.capacity_deactivations,
        "resident_bytes": (m.resident_bytes > 0).then_some(m.resident_bytes),
        "memory_limit_bytes": (m.memory_limit_bytes > 0).then_some(m.memory_limit_bytes),
        "shed_percent": (m.shed_percent > 0).then_some(m.shed_percent),
        "shed_at_bytes": (m.shed_percent > 0).then_some(m.shed_at_bytes),
        "resume_percent": (m.shed_percent > 0).then_some(m.resume_percent),
        "shedding": m.shedding,
        "shed_requests": m.shed_requests,
        "shed_episodes": m.shed_episodes,
        "shed_deactivations": m.shed_deactivations,
    })
}

/// Whether new work is refused for memory, and from where.
fn load_shedding(m: &pb::MemoryBounds) -> String {
    if m.shed_percent == 0 {
        return "off (--memory-shed-percent 0)".into();
    }
    let threshold = format!(
        "{}% of the limit ({}, --memory-shed-percent)",
        m.shed_percent,
        render::bytes(m.shed_at_bytes)
    );
    if m.shedding {
        format!(
            "REFUSING new calls (RESOURCE_EXHAUSTED): resident memory reached {threshold}; \
             until it is below {}%; {} refused, {} deactivated since start",
            m.resume_percent,
            m.shed_requests,
            plural(m.shed_deactivations, "actor", "actors")
        )
    } else {
        format!(
            "new calls refused from {threshold}; not now; {} since start, {} refused, {} \
             deactivated",
            plural(m.shed_episodes, "time", "times"),
            m.shed_requests,
            plural(m.shed_deactivations, "actor", "actors")
        )
    }
}

/// The process's resident memory against the limit it runs under.
fn process_memory(m: &pb::MemoryBounds) -> String {
    let resident = match m.resident_bytes {
        0 => "resident size unknown".to_owned(),
        bytes => format!("{} resident", render::bytes(bytes)),
    };
    match m.memory_limit_bytes {
        0 => format!("{resident}; no memory limit"),
        limit => format!("{resident} of a {} limit (cgroup)", render::bytes(limit)),
    }
}

/// With the bound on activations, when there is one.
fn active_actors(s: &pb::StatusResponse) -> String {
    match &s.memory {
        Some(m) if m.max_activations > 0 => format!(
            "{} of at most {} (--max-activations); {} deactivated for room since start",
            s.active_actors, m.max_activations, m.capacity_deactivations
        ),
        _ => s.active_actors.to_string(),
    }
}

/// What the live actors spend remembering stored idempotency keys.
fn key_memory(m: &pb::MemoryBounds) -> String {
    format!(
        "{} of at most {} (--idempotency-memory-bytes) for stored idempotency keys; given back \
         {} since start",
        render::bytes(m.call_records_bytes),
        render::bytes(m.call_records_limit_bytes),
        plural(m.call_records_shed, "time", "times"),
    )
}

fn delivery_json(d: &pb::DeliveryStatus) -> Value {
    let counted = d.dead_letters_error.is_empty();
    json!({
        "inbox_depth": d.inbox_depth,
        "retrying": d.retrying,
        "stored": d.stored,
        "delivered": d.delivered,
        "retries": d.retries,
        "dead_lettered": d.dead_lettered,
        "redriven": d.redriven,
        "dropped": d.dropped,
        "dead_letters": counted.then_some(d.dead_letters),
        "dead_letters_at_least": d.dead_letters_at_least,
        "dead_letters_error": (!counted).then_some(&d.dead_letters_error),
    })
}

fn delivery_pairs(d: &pb::DeliveryStatus) -> [(&'static str, String); 3] {
    let depth = format!(
        "{} held here ({} waiting to retry)",
        plural(d.inbox_depth, "durable tell", "durable tells"),
        d.retrying
    );
    let since = format!(
        "{} stored, {} delivered, {}, {} dead-lettered since start",
        d.stored,
        d.delivered,
        plural(d.retries, "retry", "retries"),
        d.dead_lettered
    );
    let letters = if !d.dead_letters_error.is_empty() {
        format!("unknown: {}", d.dead_letters_error)
    } else {
        let at_least = if d.dead_letters_at_least { "≥" } else { "" };
        format!(
            "{at_least}{} in the store (`troupe dead-letters list`); {} re-driven, {} dropped \
             here since start",
            d.dead_letters, d.redriven, d.dropped
        )
    };
    [
        ("inbox depth", depth),
        ("durable tells", since),
        ("dead letters", letters),
    ]
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_delivery(delivery: pb::DeliveryStatus) -> pb::StatusResponse {
        pb::StatusResponse {
            version: "0.1.0".into(),
            delivery: Some(delivery),
            ..Default::default()
        }
    }

    #[test]
    fn delivery_figures_read_as_sentences_and_json() {
        let s = with_delivery(pb::DeliveryStatus {
            inbox_depth: 3,
            retrying: 1,
            stored: 120,
            delivered: 115,
            retries: 4,
            dead_lettered: 1,
            redriven: 1,
            dead_letters: 1000,
            dead_letters_at_least: true,
            ..Default::default()
        });
        let text = status_table(&s);
        for line in [
            "inbox depth      3 durable tells held here (1 waiting to retry)\n",
            "durable tells    120 stored, 115 delivered, 4 retries, 1 dead-lettered since start\n",
            "dead letters     ≥1000 in the store (`troupe dead-letters list`); 1 re-driven, 0 \
             dropped here since start\n",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
        let json = status_json(&s);
        assert_eq!(json["delivery"]["inbox_depth"], 3, "{json}");
        assert_eq!(json["delivery"]["retries"], 4, "{json}");
        assert_eq!(json["delivery"]["dead_letters"], 1000, "{json}");
        assert_eq!(json["delivery"]["dead_letters_at_least"], true, "{json}");
        assert_eq!(
            json["delivery"]["dead_letters_error"],
            Value::Null,
            "{json}"
        );
    }

    #[test]
    fn inbound_links_show_when_the_daemon_reports_them() {
        let s = pb::StatusResponse {
            inbound_links: Some(pb::InboundLinks {
                streams: 6,
                let_go: 2,
            }),
            ..Default::default()
        };
        let text = status_table(&s);
        assert!(
            text.contains(
                "inbound links    6 streams from other daemons; 2 let go since start (their \
                 pings stopped)\n"
            ),
            "{text}"
        );
        let json = status_json(&s);
        assert_eq!(json["inbound_links"]["streams"], 6, "{json}");
        assert_eq!(json["inbound_links"]["let_go"], 2, "{json}");
        // A single node, or a daemon older than the CLI.
        let single = status_table(&pb::StatusResponse::default());
        assert!(!single.contains("inbound links"), "{single}");
        assert_eq!(
            status_json(&pb::StatusResponse::default())["inbound_links"],
            Value::Null
        );
    }

    #[test]
    fn memory_bounds_show_next_to_the_flags_that_set_them() {
        let bounded = pb::StatusResponse {
            active_actors: 18_000,
            memory: Some(pb::MemoryBounds {
                call_records_bytes: 14 << 20,
                call_records_limit_bytes: 64 << 20,
                call_records_shed: 1,
                max_activations: 20_000,
                capacity_deactivations: 2_500,
                resident_bytes: 90 << 20,
                memory_limit_bytes: 512 << 20,
                shed_percent: 90,
                shed_at_bytes: 460 << 20,
                resume_percent: 85,
                shedding: false,
                shed_requests: 1_234,
                shed_episodes: 1,
                shed_deactivations: 40,
            }),
            ..Default::default()
        };
        let text = status_table(&bounded);
        for line in [
            "load shedding    new calls refused from 90% of the limit (460.0 MiB, \
             --memory-shed-percent); not now; 1 time since start, 1234 refused, 40 actors \
             deactivated\n",
            "active actors    18000 of at most 20000 (--max-activations); 2500 deactivated for \
             room since start\n",
            "memory           90.0 MiB resident of a 512.0 MiB limit (cgroup)\n",
            "key memory       14.0 MiB of at most 64.0 MiB (--idempotency-memory-bytes) for \
             stored idempotency keys; given back 1 time since start\n",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
        let json = status_json(&bounded);
        assert_eq!(json["memory"]["call_records_bytes"], 14 << 20, "{json}");
        assert_eq!(json["memory"]["max_activations"], 20_000, "{json}");
        assert_eq!(json["memory"]["capacity_deactivations"], 2_500, "{json}");
        assert_eq!(json["memory"]["resident_bytes"], 90 << 20, "{json}");
        assert_eq!(json["memory"]["memory_limit_bytes"], 512 << 20, "{json}");

        // No bound on activations (the default), or a daemon older than the CLI.
        let unbounded = pb::StatusResponse {
            active_actors: 7,
            memory: Some(pb::MemoryBounds::default()),
            ..Default::default()
        };
        let text = status_table(&unbounded);
        assert!(text.contains("active actors    7\n"), "{text}");
        assert!(
            text.contains("memory           resident size unknown; no memory limit\n"),
            "{text}"
        );
        assert_eq!(
            status_json(&unbounded)["memory"]["max_activations"],
            Value::Null
        );
        assert!(!text.contains("load shedding"), "{text}");
        let old = pb::StatusResponse::default();
        assert!(!status_table(&old).contains("key memory"));
        assert_eq!(status_json(&old)["memory"], Value::Null);
    }

    #[test]
    fn shedding_now_says_so_and_until_when() {
        let m = pb::MemoryBounds {
            resident_bytes: 240 << 20,
            memory_limit_bytes: 256 << 20,
            shed_percent: 90,
            shed_at_bytes: 230 << 20,
            resume_percent: 85,
            shedding: true,
            shed_requests: 42,
            shed_episodes: 2,
            shed_deactivations: 1,
            ..Default::default()
        };
        assert_eq!(
            load_shedding(&m),
            "REFUSING new calls (RESOURCE_EXHAUSTED): resident memory reached 90% of the limit \
             (230.0 MiB, --memory-shed-percent); until it is below 85%; 42 refused, 1 actor \
             deactivated since start"
        );
        let json = memory_json(&m);
        assert_eq!(json["shedding"], true, "{json}");
        assert_eq!(json["shed_requests"], 42, "{json}");
        assert_eq!(json["resume_percent"], 85, "{json}");
        assert_eq!(json["shed_deactivations"], 1, "{json}");
        let off = pb::MemoryBounds {
            memory_limit_bytes: 256 << 20,
            ..Default::default()
        };
        assert_eq!(load_shedding(&off), "off (--memory-shed-percent 0)");
        assert_eq!(memory_json(&off)["shed_percent"], Value::Null);
    }

    #[test]
    fn dead_letters_that_could_not_be_counted_say_why() {
        let s = with_delivery(pb::DeliveryStatus {
            dead_letters_error: "the store did not answer within 2s".into(),
            ..Default::default()
        });
        let text = status_table(&s);
        assert!(
            text.contains("dead letters     unknown: the store did not answer within 2s\n"),
            "{text}"
        );
        let json = status_json(&s);
        assert_eq!(json["delivery"]["dead_letters"], Value::Null, "{json}");
        assert_eq!(
            json["delivery"]["dead_letters_error"],
            "the store did not answer within 2s"
        );
        let old = status_json(&pb::StatusResponse::default());
        assert_eq!(old["delivery"], Value::Null, "a daemon older than the CLI");
        assert!(!status_table(&pb::StatusResponse::default()).contains("inbox depth"));
    }
}
