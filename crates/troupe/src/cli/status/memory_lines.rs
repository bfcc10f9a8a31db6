//! The memory lines of `troupe status`: resident memory against the
//! process's limit, load shedding, the bound on activations, what stored
//! idempotency keys take and what is held for watchers of events, each
//! next to the flag that sets it.

use serde_json::{json, Value};
use troupe_proto::v1 as pb;

use crate::cli::plural;
use crate::cli::render;

pub(super) fn memory_json(m: &pb::MemoryBounds) -> Value {
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

/// The lines under the daemon's figures: load shedding only when there is a
/// limit to shed against.
pub(super) fn memory_pairs(m: &pb::MemoryBounds) -> Vec<(&'static str, String)> {
    let mut pairs = vec![("memory", process_memory(m))];
    if m.memory_limit_bytes > 0 {
        pairs.push(("load shedding", load_shedding(m)));
    }
    pairs.push(("key memory", key_memory(m)));
    pairs
}

pub(super) fn events_json(e: &pb::EventsStatus) -> Value {
    json!({
        "watched": e.watched,
        "max_watched": e.max_watched,
        "held_bytes": e.held_bytes,
        "max_held_bytes": e.max_held_bytes,
    })
}

/// What is held for watchers of events, against the bounds.
pub(super) fn events_held(e: &pb::EventsStatus) -> String {
    if e.watched == 0 {
        return format!(
            "nothing watched (at most {} actors and types, --max-watched-actors)",
            e.max_watched
        );
    }
    format!(
        "{} of at most {} actors and types watched (--max-watched-actors), {} held of {}",
        e.watched,
        e.max_watched,
        render::bytes(e.held_bytes),
        render::bytes(e.max_held_bytes)
    )
}

/// Whether new work is refused for memory, and from where.
pub(super) fn load_shedding(m: &pb::MemoryBounds) -> String {
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

/// With the bound on activations, when there is one.
pub(super) fn active_actors(s: &pb::StatusResponse) -> String {
    match &s.memory {
        Some(m) if m.max_activations > 0 => format!(
            "{} of at most {} (--max-activations); {} deactivated for room since start",
            s.active_actors, m.max_activations, m.capacity_deactivations
        ),
        _ => s.active_actors.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{status_json, status_table};
    use super::*;

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
            "load shedding     new calls refused from 90% of the limit (460.0 MiB, \
             --memory-shed-percent); not now; 1 time since start, 1234 refused, 40 actors \
             deactivated\n",
            "active actors     18000 of at most 20000 (--max-activations); 2500 deactivated for \
             room since start\n",
            "memory            90.0 MiB resident of a 512.0 MiB limit (cgroup)\n",
            "key memory        14.0 MiB of at most 64.0 MiB (--idempotency-memory-bytes) for \
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
        assert!(text.contains("active actors     7\n"), "{text}");
        assert!(
            text.contains("memory            resident size unknown; no memory limit\n"),
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
}
