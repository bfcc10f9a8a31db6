//! Watch polls and the events they bring back (`ActorClient.Watch`, the
//! runtime's `watch`), between the wire and the runtime.

use std::sync::Arc;
use std::time::Duration;

use tonic::Status;
use troupe_proto::v1 as pb;
use troupe_runtime::{
    ActorId, ActorRequest, Cursor, EventTrace, Polled, TypeFrom, WatchedEvent, WatchedType,
};

use super::errors::status_of;
use super::{actor_id, actor_ref, payload, payload_to_pb};

/// A watch's cursor as the caller gave it; empty: none.
pub fn cursor(after: &str) -> Result<Option<Cursor>, Status> {
    let after = after.trim();
    if after.is_empty() {
        return Ok(None);
    }
    after
        .parse()
        .map(Some)
        .map_err(|e: troupe_runtime::BadCursor| Status::invalid_argument(e.to_string()))
}

/// Cursors one type watch's cursor may carry: one per daemon polled.
const MAX_CURSOR_PARTS: usize = 1024;

/// Cursors as the caller or a peer gave them, empty ones left out.
fn cursors<'a>(parts: impl IntoIterator<Item = &'a str>) -> Result<Vec<Cursor>, Status> {
    let mut read = Vec::new();
    for part in parts {
        read.extend(cursor(part)?);
    }
    Ok(read)
}

/// A type watch's cursor as the caller gave it: one part per daemon, joined
/// by `.` (empty: none).
pub fn type_cursors(after: &str) -> Result<Vec<Cursor>, Status> {
    let parts = after.trim().split('.').count();
    if parts > MAX_CURSOR_PARTS {
        return Err(Status::invalid_argument(format!(
            "the cursor has {parts} parts, more than a type watch's cursor has \
             ({MAX_CURSOR_PARTS} at most); pass one a WatchType of this type sent"
        )));
    }
    cursors(after.trim().split('.'))
}

/// A type watch's cursor for the caller: each daemon's part, as
/// [`type_cursors`] reads it back.
pub fn type_cursor_text<'a>(parts: impl IntoIterator<Item = &'a Cursor>) -> String {
    let parts: Vec<String> = parts.into_iter().map(Cursor::to_string).collect();
    parts.join(".")
}

/// A wait as the wire's milliseconds.
fn wait_ms(wait: Duration) -> u32 {
    u32::try_from(wait.as_millis()).unwrap_or(u32::MAX)
}

/// What a type watch wants, as its caller sent it: a type and maybe an id
/// prefix, both as they must be.
pub fn watched_type(ty: &str, id_prefix: &str) -> Result<WatchedType, Status> {
    let watched = WatchedType {
        ty: Arc::from(ty.trim()),
        id_prefix: Arc::from(id_prefix),
    };
    watched.validate().map_err(status_of)?;
    Ok(watched)
}

/// A type watcher's poll from another daemon: what it wants, where it
/// begins and how long to wait.
pub fn type_poll_from_pb(
    r: pb::PollTypeEvents,
) -> Result<(WatchedType, TypeFrom, Duration), Status> {
    let watched = watched_type(&r.r#type, &r.id_prefix)?;
    let after = cursors(r.after.iter().map(String::as_str))?;
    let from = match (r.new_host, after.is_empty()) {
        (true, true) => TypeFrom::NewHost,
        (true, false) => {
            return Err(Status::invalid_argument(
                "a type poll of a new host carries no cursor; send one or the other",
            ))
        }
        (false, _) => TypeFrom::after(after),
    };
    Ok((watched, from, Duration::from_millis(u64::from(r.wait_ms))))
}

pub fn type_poll_to_pb(
    watched: &WatchedType,
    from: &TypeFrom,
    wait: Duration,
) -> pb::PollTypeEvents {
    let after = match from {
        TypeFrom::After(after) => after.iter().map(ToString::to_string).collect(),
        TypeFrom::Now | TypeFrom::NewHost => Vec::new(),
    };
    pb::PollTypeEvents {
        r#type: watched.ty.to_string(),
        after,
        wait_ms: wait_ms(wait),
        id_prefix: watched.id_prefix.to_string(),
        new_host: *from == TypeFrom::NewHost,
    }
}

pub fn poll_from_pb(r: pb::PollEvents) -> Result<ActorRequest, Status> {
    Ok(ActorRequest::PollEvents {
        actor: actor_id(r.actor)?,
        after: cursor(&r.after)?,
        wait: Duration::from_millis(u64::from(r.wait_ms)),
    })
}

pub fn poll_to_pb(
    actor: &troupe_runtime::ActorId,
    after: Option<Cursor>,
    wait: Duration,
) -> pb::PollEvents {
    pb::PollEvents {
        actor: Some(actor_ref(actor)),
        after: after.map(|c| c.to_string()).unwrap_or_default(),
        wait_ms: wait_ms(wait),
    }
}

pub fn event_to_pb(e: WatchedEvent, missed_before: bool) -> pb::ActorEvent {
    let (traceparent, tracestate) = e.trace.map_or_else(Default::default, |t| {
        let t = Arc::unwrap_or_clone(t);
        (t.traceparent, t.tracestate)
    });
    pb::ActorEvent {
        payload: Some(payload_to_pb(e.payload)),
        cursor: e.cursor.to_string(),
        missed_before,
        published_unix_ms: e.published_unix_ms,
        actor: Some(actor_ref(&e.actor)),
        traceparent,
        tracestate,
    }
}

pub fn polled_to_pb(p: Polled) -> pb::PolledEvents {
    pb::PolledEvents {
        events: p
            .events
            .into_iter()
            .map(|e| event_to_pb(e, false))
            .collect(),
        cursor: p.cursor.to_string(),
        missed: p.missed,
        new_host_checked: false,
    }
}

/// Another daemon's answer. A cursor it should not have sent reads as one
/// of no epoch: the next poll then hears that events may have been missed.
pub fn polled_from_pb(r: pb::PolledEvents) -> Polled {
    let read = |c: &str| {
        c.parse().unwrap_or(Cursor {
            epoch: 0,
            seq: u64::MAX,
        })
    };
    Polled {
        events: r
            .events
            .into_iter()
            .map(|e| WatchedEvent {
                cursor: read(&e.cursor),
                // A daemon of this version always names the actor.
                actor: e
                    .actor
                    .map_or_else(|| ActorId::new("", ""), |a| ActorId::new(a.r#type, a.id)),
                payload: payload(e.payload),
                published_unix_ms: e.published_unix_ms,
                trace: trace(e.traceparent, e.tracestate),
            })
            .collect(),
        cursor: read(&r.cursor),
        missed: r.missed,
    }
}

/// An event's trace context as another daemon sent it; none when empty.
fn trace(traceparent: String, tracestate: String) -> Option<Arc<EventTrace>> {
    (!traceparent.is_empty()).then(|| {
        Arc::new(EventTrace {
            traceparent,
            tracestate,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_watchs_cursor_reads_back_as_written() -> Result<(), Status> {
        let parts = [
            Cursor { epoch: 1, seq: 7 },
            Cursor {
                epoch: u64::MAX,
                seq: 0,
            },
        ];
        let text = type_cursor_text(&parts);
        assert_eq!(type_cursors(&text)?, parts);
        assert!(type_cursors("  ")?.is_empty());
        assert!(type_cursors(&format!("{text}.zz")).is_err());
        let too_many = vec!["0000000000000001-1"; MAX_CURSOR_PARTS + 1].join(".");
        assert!(type_cursors(&too_many).is_err());
        Ok(())
    }

    #[test]
    fn an_events_trace_context_crosses_the_link_and_none_stays_none() {
        let event = |trace| WatchedEvent {
            cursor: Cursor { epoch: 2, seq: 1 },
            actor: ActorId::new("bus", "b1"),
            payload: troupe_runtime::Payload::json("1"),
            published_unix_ms: 9,
            trace,
        };
        let traced = Some(Arc::new(EventTrace {
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
            tracestate: "k=v".into(),
        }));
        let polled = Polled {
            events: vec![event(traced), event(None)],
            cursor: Cursor { epoch: 2, seq: 2 },
            missed: false,
        };
        assert_eq!(polled_from_pb(polled_to_pb(polled.clone())), polled);
    }

    #[test]
    fn a_type_poll_crosses_the_link_with_its_id_prefix() -> Result<(), Status> {
        let watched = watched_type("cart", "tenant-42/")?;
        let wait = Duration::from_millis(1500);
        for from in [
            TypeFrom::After(vec![Cursor { epoch: 3, seq: 9 }]),
            TypeFrom::NewHost,
            TypeFrom::Now,
        ] {
            let wire = type_poll_to_pb(&watched, &from, wait);
            assert_eq!(type_poll_from_pb(wire)?, (watched.clone(), from, wait));
        }
        let mut both = type_poll_to_pb(&watched, &TypeFrom::NewHost, wait);
        both.after = vec![Cursor { epoch: 3, seq: 9 }.to_string()];
        assert_eq!(
            type_poll_from_pb(both).map_err(|s| s.code()),
            Err(tonic::Code::InvalidArgument)
        );
        let long = "p".repeat(troupe_runtime::validate::MAX_NAME_BYTES + 1);
        let refused = watched_type("cart", &long).map(|_| ());
        assert_eq!(
            refused.map_err(|s| s.code()),
            Err(tonic::Code::InvalidArgument)
        );
        Ok(())
    }
}
