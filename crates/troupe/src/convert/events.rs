//! Watch polls and the events they bring back (`ActorClient.Watch`, the
//! runtime's `watch`), between the wire and the runtime.

use std::time::Duration;

use tonic::Status;
use troupe_proto::v1 as pb;
use troupe_runtime::{ActorId, ActorRequest, Cursor, Polled, WatchedEvent};

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
        wait_ms: u32::try_from(wait.as_millis()).unwrap_or(u32::MAX),
    }
}

pub fn event_to_pb(e: WatchedEvent, missed_before: bool) -> pb::ActorEvent {
    pb::ActorEvent {
        payload: Some(payload_to_pb(e.payload)),
        cursor: e.cursor.to_string(),
        missed_before,
        published_unix_ms: e.published_unix_ms,
        actor: Some(actor_ref(&e.actor)),
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
            })
            .collect(),
        cursor: read(&r.cursor),
        missed: r.missed,
    }
}
