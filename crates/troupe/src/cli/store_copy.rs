//! `troupe store copy --from A --to B`: everything in one store copied into
//! another, empty one, with no daemon on either: how a single daemon's sled
//! store moves to the PostgreSQL a cluster shares, or back for a look at
//! production data on a laptop. The copy itself is
//! [`troupe_storage::copy_store`]; this is where the stores are opened and
//! the result is shown.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;
use troupe_storage::{copy_store, Copied, CopyError, ReminderStore, StateStore, Stores};
use troupe_storage_postgres::PostgresStore;
use troupe_storage_sled::{SledReminders, SledStore};

use super::render;
use super::{emit, emit_json, fail, Exit, Output};

/// How the copy names its PostgreSQL connections, so that daemons' can be
/// told from its own.
const TOOL_NAME: &str = "troupe store copy";
/// How long connections of daemons just stopped get to leave the server's
/// list (their backends exit as they notice the closed sockets).
const CLOSING_GRACE: Duration = Duration::from_secs(2);
/// How often a long copy says how far it is.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// One side of a copy, opened.
struct Opened {
    state: Box<dyn StateStore>,
    reminders: Box<dyn ReminderStore>,
    /// As status output shows a store (no password).
    shown: String,
    /// What `troupe serve` takes to use it.
    serve_with: String,
    /// The database, when it is one: daemons may be connected to it.
    postgres: Option<PostgresStore>,
}

impl Opened {
    fn stores(&self) -> Stores<'_> {
        Stores {
            state: self.state.as_ref(),
            reminders: self.reminders.as_ref(),
        }
    }
}

/// Which end of a copy a store is, for the checks each needs.
#[derive(Debug, Clone, Copy)]
enum End {
    /// `live_ok`: daemons may be using it (`--live-source`).
    From {
        live_ok: bool,
    },
    To,
}

impl End {
    fn flag(self) -> &'static str {
        match self {
            End::From { .. } => "--from",
            End::To => "--to",
        }
    }
}

/// Opens `place`, a sled data directory or a PostgreSQL URL; a source
/// directory must exist.
async fn open(end: End, place: &str) -> anyhow::Result<Opened> {
    let flag = end.flag();
    if crate::config::is_postgres_url(place) {
        let store = PostgresStore::connect_as_tool(place, TOOL_NAME)
            .await
            .map_err(|e| fail(Exit::Other, format!("{flag}: {e}")))?;
        let shown = store.describe();
        return Ok(Opened {
            state: Box::new(store.clone()),
            reminders: Box::new(store.clone()),
            shown,
            serve_with: "--store and the URL given as --to".into(),
            postgres: Some(store),
        });
    }
    let dir = PathBuf::from(place);
    if matches!(end, End::From { .. }) && !dir.join("db").exists() && !dir.join("conf").exists() {
        return Err(fail(
            Exit::Usage,
            format!(
                "{flag} {place}: no sled store there; give the --data-dir of the daemon to copy \
                 from, or a postgres:// URL"
            ),
        ));
    }
    let opened = SledStore::open(&dir).and_then(|store| {
        let reminders = SledReminders::open(&store)?;
        Ok((store, reminders))
    });
    let (store, reminders) = opened.map_err(|e| fail(Exit::Other, format!("{flag}: {e}")))?;
    Ok(Opened {
        shown: store.describe(),
        state: Box::new(store),
        reminders: Box::new(reminders),
        serve_with: format!("--data-dir {place}"),
        postgres: None,
    })
}

/// Refuses a database daemons are connected to: they would write into the
/// destination beside the copy, and the source would lack what they hold
/// unflushed (unless `live_ok` accepts that). A sled store needs no check:
/// a daemon holds its directory's lock, so it did not open.
async fn refuse_live(end: End, side: &Opened) -> anyhow::Result<()> {
    let Some(store) = &side.postgres else {
        return Ok(());
    };
    let flag = end.flag();
    let grace_ends = Instant::now() + CLOSING_GRACE;
    let daemons = loop {
        let daemons = store
            .daemon_connections()
            .await
            .map_err(|e| fail(Exit::Other, format!("{flag}: {e}")))?;
        if daemons == 0 {
            return Ok(());
        }
        if Instant::now() >= grace_ends {
            break daemons;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let connected = format!(
        "{flag} {}: daemons hold {daemons} connection(s) to this database",
        side.shown
    );
    match end {
        End::To => Err(fail(
            Exit::Usage,
            format!(
                "{connected}; stop them before copying into it, and start them once the copy \
                 is done (what they wrote meanwhile would mix with the copy)"
            ),
        )),
        End::From { live_ok: true } => {
            super::tell_user(format_args!(
                "{connected}; copying anyway (--live-source) the database as of now: what they \
                 write from now on, and state they have not flushed yet, is not in the copy\n"
            ));
            Ok(())
        }
        End::From { live_ok: false } => Err(fail(
            Exit::Usage,
            format!(
                "{connected}, so the copy would lack the state they have not flushed yet; stop \
                 them first, or add --live-source to copy what the database holds now"
            ),
        )),
    }
}

/// The source read as of one instant: a database daemons may still write
/// to (`--live-source`, or one started during the copy) cannot change
/// under the copy, page after page and table after table. A sled store is
/// locked while the copy runs.
async fn as_of_now(source: Opened) -> anyhow::Result<Opened> {
    let Some(store) = &source.postgres else {
        return Ok(source);
    };
    let snapshot = store
        .snapshot()
        .await
        .map_err(|e| fail(Exit::Other, format!("--from: {e}")))?;
    Ok(Opened {
        state: Box::new(snapshot.clone()),
        reminders: Box::new(snapshot.clone()),
        postgres: Some(snapshot),
        ..source
    })
}

pub async fn store_copy(
    from: String,
    to: String,
    live_source: bool,
    output: Output,
) -> anyhow::Result<()> {
    if from == to {
        return Err(fail(
            Exit::Usage,
            "--from and --to name the same store; give the store to fill as --to",
        ));
    }
    let from_end = End::From {
        live_ok: live_source,
    };
    let source = open(from_end, &from).await?;
    let destination = open(End::To, &to).await?;
    refuse_live(End::To, &destination).await?;
    refuse_live(from_end, &source).await?;
    let source = as_of_now(source).await?;
    let mut last = Instant::now();
    let copied = copy_store(source.stores(), destination.stores(), |so_far| {
        if last.elapsed() >= PROGRESS_EVERY {
            last = Instant::now();
            super::tell_user(format_args!(
                "copied {} actors and {} reminders so far\n",
                so_far.actors, so_far.reminders
            ));
        }
    })
    .await
    .map_err(|e| copy_failed(&source, &destination, e))?;
    match output {
        Output::Json => emit_json(&json!({
            "from": source.shown,
            "to": destination.shown,
            "actors": copied.actors,
            "state_keys": copied.state_keys,
            "inbox_entries": copied.inbox_entries,
            "dead_letters": copied.dead_letters,
            "call_records": copied.call_records,
            "reminders": copied.reminders,
        })),
        Output::Table => emit(&summary(&source, &destination, &copied)),
    }
}

fn summary(source: &Opened, destination: &Opened, copied: &Copied) -> String {
    let mut out = format!("copied {} to {}\n", source.shown, destination.shown);
    out.push_str(&render::fields(&[
        ("actors", copied.actors.to_string()),
        ("state keys", copied.state_keys.to_string()),
        ("inbox entries", copied.inbox_entries.to_string()),
        ("dead letters", copied.dead_letters.to_string()),
        ("call records", copied.call_records.to_string()),
        ("reminders", copied.reminders.to_string()),
    ]));
    out.push_str(&format!(
        "start the daemons with {} to serve the copy\n",
        destination.serve_with
    ));
    out
}

fn copy_failed(source: &Opened, destination: &Opened, e: CopyError) -> anyhow::Error {
    let (exit, hint) = match e {
        CopyError::NotEmpty { .. } => (Exit::Usage, ""),
        _ => (
            Exit::Other,
            "\n  what was written so far stays; empty the destination before copying again",
        ),
    };
    fail(
        exit,
        format!("copy {} to {}: {e}{hint}", source.shown, destination.shown),
    )
}
