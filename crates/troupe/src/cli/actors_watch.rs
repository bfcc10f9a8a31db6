//! `troupe actors watch TYPE [ID]`: prints an actor's events as it
//! publishes them (`ActorClient.Watch`), or every actor's of the type
//! (`WatchType`, those whose id starts with `--id-prefix` if given), until
//! interrupted, `--count` events, or a reader that closed the pipe.

use std::io::Write as _;

use serde_json::{json, Value};
use troupe_proto::v1 as pb;

use super::actors::actor_ref;
use super::render::{self, Shown};
use super::{actor_name, connect, fail, tell_user, Exit, Output, Target};

pub async fn actors_watch(
    target: &Target,
    actor_type: String,
    id: Option<String>,
    id_prefix: Option<String>,
    after: Option<String>,
    count: Option<u64>,
) -> anyhow::Result<()> {
    let daemon = connect(target).await?;
    let after = after.unwrap_or_default();
    let id_prefix = id_prefix.unwrap_or_default();
    let name = match &id {
        Some(id) => actor_name(&actor_type, id),
        None if id_prefix.is_empty() => format!("every {actor_type}"),
        None => format!(
            "every {actor_type} whose id starts with {}",
            troupe_runtime::validate::abridged(&id_prefix, 64)
        ),
    };
    let request = daemon.request(format!("watch {name}"));
    let mut client = daemon.actor_client();
    let watched = match &id {
        Some(id) => {
            client
                .watch(pb::WatchRequest {
                    actor: actor_ref(&actor_type, id),
                    after,
                })
                .await
        }
        None => {
            client
                .watch_type(pb::WatchTypeRequest {
                    r#type: actor_type.clone(),
                    after,
                    id_prefix,
                })
                .await
        }
    };
    let mut events = watched.map_err(|s| request.failed(s))?.into_inner();
    let whole_type = id.is_none();
    // Once the daemon answered: every event published from here on comes.
    tell_user(format_args!("watching {name}; Ctrl-C to stop\n"));
    let mut seen = 0u64;
    while count.is_none_or(|n| seen < n) {
        let Some(event) = events.message().await.map_err(|s| request.failed(s))? else {
            return Err(fail(
                Exit::Daemon,
                format!(
                    "the daemon at {} ended the watch of {name}; watch again (with --after and \
                     the last cursor to resume)",
                    target.addr
                ),
            ));
        };
        let line = match target.output {
            Output::Json => event_json(&event).to_string(),
            Output::Table => event_line(&event, whole_type),
        };
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            // Nobody reads any more (`| head -1`): done.
            return Ok(());
        }
        seen = seen.saturating_add(1);
    }
    Ok(())
}

/// The id of the actor that published `event`.
fn publisher(event: &pb::ActorEvent) -> &str {
    event.actor.as_ref().map_or("", |a| a.id.as_str())
}

/// One event per line: its time, cursor (and actor, watching a type) and
/// value, after a note when events may be missing before it.
fn event_line(event: &pb::ActorEvent, whole_type: bool) -> String {
    let value = Shown::payload(event.payload.as_ref()).text();
    let time = render::time_cell(event.published_unix_ms);
    let line = if whole_type {
        format!("{time}  {}  {}  {value}", event.cursor, publisher(event))
    } else {
        format!("{time}  {}  {value}", event.cursor)
    };
    if event.missed_before {
        format!("(events may be missing here)\n{line}")
    } else {
        line
    }
}

/// One JSON object per line, so a script reads events as they come.
fn event_json(event: &pb::ActorEvent) -> Value {
    let mut object = serde_json::Map::new();
    object.insert(
        "value".into(),
        Shown::payload(event.payload.as_ref()).json(),
    );
    object.insert("actor".into(), json!(publisher(event)));
    object.insert("cursor".into(), json!(event.cursor));
    object.insert("missed_before".into(), json!(event.missed_before));
    render::time_json(&mut object, "published", event.published_unix_ms);
    Value::Object(object)
}
