//! `troupe actors watch TYPE [ID]`: prints an actor's events as it
//! publishes them (`ActorClient.Watch`), or every actor's of the type
//! (`WatchType`, those whose id starts with `--id-prefix` if given), until
//! interrupted, `--count` events, or a reader that closed the pipe; with
//! `--reconnect`, through the daemon's restarts.

use std::io::Write as _;
use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use troupe_backoff::Backoff;
use troupe_proto::v1 as pb;

use super::actors::actor_ref;
use super::render::{self, Shown};
use super::{actor_name, connect, fail, tell_user, Exit, Output, Target};

type ActorClient = pb::actor_client_client::ActorClientClient<super::Authed>;

/// What `troupe actors watch` watches, and how (its arguments).
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    #[arg(value_name = "TYPE")]
    pub actor_type: String,
    /// The actor to watch; none: every actor of TYPE.
    pub id: Option<String>,
    /// Without ID: only the actors whose id starts with this
    /// ("tenant-42/"), left out by each daemon before they travel.
    #[arg(long, value_name = "PREFIX", conflicts_with = "id")]
    pub id_prefix: Option<String>,
    /// Resume after this event's cursor (from an earlier watch's
    /// output): the events since that the daemon still holds come first.
    #[arg(long, value_name = "CURSOR")]
    pub after: Option<String>,
    /// Stop after this many events.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// When the daemon goes away (it restarts, the connection breaks),
    /// watch again after the last event's cursor, pausing 0.1 s doubling
    /// to 5 s between attempts, rather than exit.
    #[arg(long)]
    pub reconnect: bool,
}

type Events = tonic::Streaming<pb::ActorEvent>;

// A reconnecting watch's pauses before re-opens (`Reopening`).
const REOPEN_FIRST: Duration = Duration::from_millis(100);
const REOPEN_MOST: Duration = Duration::from_secs(5);

/// The pauses of a reconnecting watch before its re-opens: doubling from
/// [`REOPEN_FIRST`] to [`REOPEN_MOST`] across outages, and back to the
/// first only once the daemon shows it watches again (an event comes, or
/// a stream outlives the longest pause). A daemon that answers a re-open
/// and then drops the stream at once is not re-opened ten times a second.
#[derive(Debug)]
struct Reopening {
    backoff: Backoff,
}

impl Reopening {
    /// Each pause jittered by a factor in `jitter`.
    fn new(jitter: RangeInclusive<f64>) -> Self {
        Self {
            backoff: Backoff::new(REOPEN_FIRST, REOPEN_MOST, jitter),
        }
    }

    /// An event came.
    fn heard(&mut self) {
        self.backoff.reset();
    }

    /// A stream that had been open for `lived` broke.
    fn broke(&mut self, lived: Duration) {
        if lived >= REOPEN_MOST {
            self.backoff.reset();
        }
    }

    /// The pause before the next attempt; the one after it is twice as
    /// long (before jitter), up to the longest.
    fn next_pause(&mut self) -> Duration {
        self.backoff.next_pause()
    }
}

pub async fn actors_watch(target: &Target, args: WatchArgs) -> anyhow::Result<()> {
    let daemon = connect(target).await?;
    let id_prefix = args.id_prefix.clone().unwrap_or_default();
    let name = match &args.id {
        Some(id) => actor_name(&args.actor_type, id),
        None if id_prefix.is_empty() => format!("every {}", args.actor_type),
        None => format!(
            "every {} whose id starts with {}",
            args.actor_type,
            troupe_runtime::validate::abridged(&id_prefix, 64)
        ),
    };
    let request = daemon.request(format!("watch {name}"));
    let client = daemon.actor_client();
    // Where a re-open resumes: the cursor given, then each event's.
    let mut cursor = args.after.clone().unwrap_or_default();
    let open = |client: &ActorClient, after: String| {
        let mut client = client.clone();
        let (ty, id, id_prefix) = (args.actor_type.clone(), args.id.clone(), id_prefix.clone());
        async move {
            let watched = match id {
                Some(id) => {
                    let actor = actor_ref(&ty, &id);
                    client.watch(pb::WatchRequest { actor, after }).await
                }
                None => {
                    let r#type = ty;
                    let request = pb::WatchTypeRequest {
                        r#type,
                        after,
                        id_prefix,
                    };
                    client.watch_type(request).await
                }
            };
            watched.map(tonic::Response::into_inner)
        }
    };
    let mut events: Events = open(&client, cursor.clone())
        .await
        .map_err(|s| request.failed(s))?;
    let mut opened = Instant::now();
    // Jittered, so that the watches of a restarted daemon do not all come
    // back at once.
    let mut reopening = Reopening::new(0.5..=1.0);
    let whole_type = args.id.is_none();
    // Once the daemon answered: every event published from here on comes.
    tell_user(format_args!("watching {name}; Ctrl-C to stop\n"));
    let mut seen = 0u64;
    // Re-opened with no cursor, from then on: what was published meanwhile
    // is skipped, which the daemon cannot say.
    let mut missed = false;
    while args.count.is_none_or(|n| seen < n) {
        let broke = match events.message().await {
            Ok(Some(mut event)) => {
                reopening.heard();
                event.missed_before |= std::mem::take(&mut missed);
                cursor.clone_from(&event.cursor);
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
                continue;
            }
            Ok(None) => "the daemon ended it".to_owned(),
            Err(status) if args.reconnect && status.code() == tonic::Code::Unavailable => {
                status.message().to_owned()
            }
            Err(status) => return Err(request.failed(status)),
        };
        if !args.reconnect {
            return Err(fail(
                Exit::Daemon,
                format!(
                    "the daemon at {} ended the watch of {name}; watch again (with --after and \
                     the last cursor to resume, or --reconnect)",
                    target.addr
                ),
            ));
        }
        missed |= cursor.is_empty();
        let from = if cursor.is_empty() {
            "from now on".to_owned()
        } else {
            format!("after {cursor}")
        };
        tell_user(format_args!(
            "the watch of {name} broke ({broke}); watching again {from}\n"
        ));
        reopening.broke(opened.elapsed());
        events = loop {
            tokio::time::sleep(reopening.next_pause()).await;
            match open(&client, cursor.clone()).await {
                Ok(events) => break events,
                Err(status) if status.code() == tonic::Code::Unavailable => continue,
                Err(status) => return Err(request.failed(status)),
            }
        };
        opened = Instant::now();
        tell_user(format_args!("watching {name} again\n"));
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
    // Only a traced turn's: a script joins its trace from here.
    if !event.traceparent.is_empty() {
        object.insert("traceparent".into(), json!(event.traceparent));
        if !event.tracestate.is_empty() {
            object.insert("tracestate".into(), json!(event.tracestate));
        }
    }
    Value::Object(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_grow_across_streams_that_break_at_once_and_start_over_once_one_is_heard() {
        let mut reopening = Reopening::new(1.0..=1.0);
        let ms = Duration::from_millis;
        // Two attempts refused, then a stream that broke as it opened: the
        // next outage goes on from the pause reached.
        assert_eq!(
            (reopening.next_pause(), reopening.next_pause()),
            (ms(100), ms(200))
        );
        reopening.broke(Duration::ZERO);
        assert_eq!(reopening.next_pause(), ms(400));
        for _ in 0..8 {
            reopening.broke(Duration::ZERO);
            reopening.next_pause();
        }
        assert_eq!(reopening.next_pause(), REOPEN_MOST);
        // An event, or a stream that lasted, shows the daemon watches again.
        reopening.heard();
        assert_eq!(reopening.next_pause(), REOPEN_FIRST);
        reopening.next_pause();
        reopening.broke(REOPEN_MOST);
        assert_eq!(reopening.next_pause(), REOPEN_FIRST);
    }
}
