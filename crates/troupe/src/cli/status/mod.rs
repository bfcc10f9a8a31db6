//! `troupe status`: the daemon at a glance.

use serde_json::{json, Value};
use troupe_proto::v1 as pb;

mod cluster_lines;
mod delivery_lines;
mod memory_lines;
pub(super) mod problems;
mod security_lines;

use super::render::{self, Table};
use super::{connect, plural, Target};
use cluster_lines::cluster_pairs;
use delivery_lines::{delivery_json, delivery_pairs};
use memory_lines::{active_actors, events_held, events_json, memory_json, memory_pairs};
use problems::{emit_checked, now_ms, problems};
use security_lines::{security_json, security_pairs};

/// Prints the daemon's status; with `check`, also the problems in it, and
/// exits 7 when there is one.
pub async fn status(target: &Target, check: bool) -> anyhow::Result<()> {
    let daemon = connect(target).await?;
    let mut admin = pb::admin_client::AdminClient::new(daemon.channel.clone());
    let request = daemon.request("read the daemon's status");
    let s = admin
        .status(pb::StatusRequest {})
        .await
        .map_err(|e| request.failed(e))?
        .into_inner();
    let found = check.then(|| problems(&s, now_ms()));
    emit_checked(
        target.output,
        || status_json(&s),
        || status_table(&s),
        found,
        &format!("the daemon at {}", daemon.addr),
    )
}

pub(super) fn status_json(s: &pb::StatusResponse) -> Value {
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
                "retention_ms": t.retention_ms,
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
        "reminders_paused": s.reminders_paused,
        "flush": flush_json,
        "delivery": s.delivery.as_ref().map(delivery_json),
        "placement_version": s.placement_version,
        "serving": s.serving,
        "standalone": s.standalone,
        "inbound_links": super::links::inbound_json(s.inbound_links.as_ref()),
        "memory": s.memory.as_ref().map(memory_json),
        "events": s.events.as_ref().map(events_json),
        "security": s.security.as_ref().map(security_json),
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

pub(super) fn status_table(s: &pb::StatusResponse) -> String {
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
        (
            "reminders paused",
            s.reminders_paused
                .map_or_else(|| "-".to_owned(), |n| n.to_string()),
        ),
        ("flush backlog", backlog),
        ("flushed", written),
    ];
    // Absent from a daemon older than the CLI.
    if let Some(d) = &s.delivery {
        pairs.extend(delivery_pairs(d));
    }
    if let Some(m) = &s.memory {
        pairs.extend(memory_pairs(m));
    }
    if let Some(e) = &s.events {
        pairs.push(("events", events_held(e)));
    }
    pairs.extend(cluster_pairs(s));
    if let Some(security) = &s.security {
        pairs.extend(security_pairs(security));
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
        ("RETENTION", true),
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
            render::duration_cell(ty.retention_ms),
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
