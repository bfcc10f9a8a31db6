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

/// Opens `place`, a sled data directory or a PostgreSQL URL, given as
/// `flag`; a source directory must exist.
async fn open(flag: &str, place: &str, source: bool) -> anyhow::Result<Opened> {
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
    if source && !dir.join("db").exists() && !dir.join("conf").exists() {
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
/// destination beside the copy, and change the source under it (unless
/// `live_source` accepts a copy that is not a snapshot). A sled store needs
/// no check: a daemon holds its directory's lock, so it did not open.
async fn refuse_live(flag: &str, side: &Opened, live_source: bool) -> anyhow::Result<()> {
    let Some(store) = &side.postgres else {
        return Ok(());
    };
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
    if flag == "--to" {
        return Err(fail(
            Exit::Usage,
            format!(
                "{connected}; stop them before copying into it, and start them once the copy \
                 is done (what they wrote meanwhile would mix with the copy)"
            ),
        ));
    }
    if live_source {
        eprintln!(
            "{connected}; copying anyway (--live-source): actors they change meanwhile may be \
             copied as they were at different moments"
        );
        return Ok(());
    }
    Err(fail(
        Exit::Usage,
        format!(
            "{connected}, so a copy would not be a snapshot; stop them first, or add \
             --live-source for a look at the data that need not be one"
        ),
    ))
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
    let source = open("--from", &from, true).await?;
    let destination = open("--to", &to, false).await?;
    refuse_live("--to", &destination, live_source).await?;
    refuse_live("--from", &source, live_source).await?;
    let mut last = Instant::now();
    let copied = copy_store(source.stores(), destination.stores(), |so_far| {
        if last.elapsed() >= PROGRESS_EVERY {
            last = Instant::now();
            eprintln!(
                "copied {} actors and {} reminders so far",
                so_far.actors, so_far.reminders
            );
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
