//! Durable tells against the real binary (docs/delivery.md), on sled and on
//! PostgreSQL: an acknowledged tell survives kill -9 and a graceful restart
//! before its delivery; per sender, tells arrive in order; a crash right after
//! handling turns never applies a tell twice (its removal from the inbox is
//! in the same write as its state changes).
//!
//! The actors log the numbers told to them (`troupe_tests::log_app`), so a
//! duplicate, a loss or a reordering is visible in their stored state.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use troupe_tests::log_app::{log_of, tell_durable, LogApp};
use troupe_tests::*;

const TY: &str = "log";

/// The daemon's flags: `store`, and a flush interval of an hour, so that
/// only the group commits of durable tells write anything.
fn args(store: &TestStore) -> Vec<String> {
    let mut args = store.args();
    args.extend(["--flush-interval".into(), "1h".into()]);
    args
}

/// The restarted daemon's flags: the default flush interval, so that the
/// inbox removals of the tells it delivers are written (with their state)
/// and the inbox is seen to empty.
fn restart_args(store: &TestStore) -> Vec<String> {
    store.args()
}

async fn start(dir: &std::path::Path, args: &[String]) -> anyhow::Result<(Daemon, LogApp)> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let daemon = Daemon::start(dir, &args).await?;
    let app = LogApp::attach(daemon.addr, vec![type_spec(TY)]).await?;
    Ok((daemon, app))
}

/// The stored log of `id` once its inbox is empty and it holds at least
/// `at_least` numbers (pending tells are delivered by the inbox scan; a
/// handled tell leaves the stored inbox with the flush of its turn's state).
async fn settled_log(daemon: &Daemon, id: &str, at_least: usize) -> anyhow::Result<Vec<i64>> {
    let client = daemon.client().await?;
    let admin = daemon.admin().await?;
    poll_until(Duration::from_secs(30), "pending durable tells", || {
        let (mut client, mut admin) = (client.clone(), admin.clone());
        async move {
            let (entries, _) = client.state(TY, id).await?;
            let log = log_of(&entries)?;
            let described = admin
                .describe_actor(pb::DescribeActorRequest {
                    actor: Some(actor(TY, id)),
                })
                .await?
                .into_inner();
            Ok((described.inbox_depth == 0 && log.len() >= at_least).then_some(log))
        }
    })
    .await
    .map_err(|e| e.context(format!("daemon log:\n{}", daemon.log())))
}

/// Tells acknowledged while the actor is busy, so none is delivered yet;
/// `stop` ends the daemon (kill -9 or SIGTERM); a new daemon on the same
/// store delivers every one of them, once and in order.
async fn acknowledged_tells_survive(
    store: TestStore,
    stop: impl AsyncFnOnce(&mut Daemon) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let args = args(&store);
    let (mut daemon, app) = start(dir.path(), &args).await?;
    let mut client = daemon.client().await?;
    // A best-effort call keeps the actor busy; the tells queue behind it.
    let mut holder = client.clone();
    let hold = tokio::spawn(async move {
        holder
            .invoke_raw(TY, "a", "hold", r#"{"kwargs":{"ms":4000}}"#)
            .await
    });
    poll_until(WAIT, "the hold turn to run", || {
        let daemon = &daemon;
        async move {
            let running = pb::ActivationStatus::Running as i32;
            let actors = daemon.actors().await?;
            Ok(actors.iter().any(|a| a.status == running).then_some(()))
        }
    })
    .await?;
    for n in 0..20 {
        tell_durable(&mut client, TY, "a", "append", n).await?;
    }
    // Acknowledged, not delivered: the actor's log is still empty.
    let (entries, _) = client.state(TY, "a").await?;
    anyhow::ensure!(
        log_of(&entries)?.is_empty(),
        "a tell was delivered before the daemon was stopped: the test checks nothing"
    );
    stop(&mut daemon).await?;
    hold.abort();
    drop(app);

    let (daemon, _app) = start(dir.path(), &restart_args(&store)).await?;
    let log = settled_log(&daemon, "a", 20).await?;
    assert_eq!(log, (0..20).collect::<Vec<_>>(), "each tell once, in order");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sled_acknowledged_durable_tells_survive_kill9() -> anyhow::Result<()> {
    acknowledged_tells_survive(TestStore::Sled, async |d: &mut Daemon| d.kill9().await).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_acknowledged_durable_tells_survive_kill9() -> anyhow::Result<()> {
    match TestStore::postgres("postgres_acknowledged_durable_tells_survive_kill9").await? {
        Some(store) => {
            acknowledged_tells_survive(store, async |d: &mut Daemon| d.kill9().await).await
        }
        None => Ok(()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sled_acknowledged_durable_tells_survive_a_graceful_restart() -> anyhow::Result<()> {
    acknowledged_tells_survive(TestStore::Sled, async |d: &mut Daemon| {
        let status = d.terminate().await?;
        anyhow::ensure!(status.success(), "graceful stop failed: {status:?}");
        Ok(())
    })
    .await
}

const WRITERS: usize = 8;

/// Writers stream durable tells (one at a time each, `append(0..)`) while
/// the actors handle them; the daemon is killed mid-stream. With a flush
/// interval of an hour, every write is a group commit carrying the state
/// changes of turns that just ran next to their inbox removals, so at the
/// kill many handled tells have both stored or neither: were a removal
/// written apart from its state, a restart would deliver a handled tell
/// again and log its number twice.
async fn a_crash_after_handling_applies_each_tell_once(store: TestStore) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let args = args(&store);
    let (mut daemon, app) = start(dir.path(), &args).await?;
    let client = daemon.client().await?;
    let acked = Arc::new(AtomicI64::new(0));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let mut client = client.clone();
        let acked = acked.clone();
        writers.push(tokio::spawn(async move {
            // (acknowledged, sent)
            let mut n = 0;
            loop {
                if tell_durable(&mut client, TY, &format!("w{w}"), "append", n)
                    .await
                    .is_err()
                {
                    return (n, n + 1);
                }
                acked.fetch_add(1, Ordering::Relaxed);
                n += 1;
            }
        }));
    }
    poll_until(WAIT, "300 acknowledged tells", || {
        let acked = acked.clone();
        async move { Ok((acked.load(Ordering::Relaxed) >= 300).then_some(())) }
    })
    .await?;
    daemon.kill9().await?;
    let mut counts = Vec::new();
    for writer in writers {
        counts.push(within(WAIT, "a writer to see the kill", writer).await??);
    }
    drop(app);

    let (daemon, _app) = start(dir.path(), &restart_args(&store)).await?;
    for (w, (acked, sent)) in counts.into_iter().enumerate() {
        let id = format!("w{w}");
        let log = settled_log(&daemon, &id, usize::try_from(acked)?).await?;
        let len = i64::try_from(log.len())?;
        assert!(
            log.iter().copied().eq(0..len),
            "{id}: the log is not 0, 1, 2, ...: a tell applied twice or out of order: {log:?}"
        );
        assert!(
            (acked..=sent).contains(&len),
            "{id}: {len} tells applied, {acked} acknowledged, {sent} sent"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sled_a_crash_after_handling_applies_each_tell_once() -> anyhow::Result<()> {
    a_crash_after_handling_applies_each_tell_once(TestStore::Sled).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_crash_after_handling_applies_each_tell_once() -> anyhow::Result<()> {
    match TestStore::postgres("postgres_a_crash_after_handling_applies_each_tell_once").await? {
        Some(store) => a_crash_after_handling_applies_each_tell_once(store).await,
        None => Ok(()),
    }
}

/// Runs the CLI against `daemon`; fails unless it exits with `code`.
async fn cli(daemon: &Daemon, args: &[&str], code: i32) -> anyhow::Result<String> {
    let addr = daemon.addr.to_string();
    let mut all = args.to_vec();
    all.extend(["--addr", &addr]);
    let (status, out, err) = run_cli(&all).await?;
    anyhow::ensure!(
        status.code() == Some(code),
        "`troupe {}` exited {:?}, expected {code}\nstdout:\n{out}\nstderr:\n{err}",
        all.join(" "),
        status.code()
    );
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_tells_become_dead_letters_the_cli_lists_and_redrives() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (daemon, app) = start(dir.path(), &restart_args(&TestStore::Sled)).await?;
    let mut client = daemon.client().await?;
    app.set_failing(true);
    tell_durable(&mut client, TY, "d", "flaky", 42).await?;
    // Three attempts with backoff, then a dead letter, stored with the flush.
    let letters = poll_until(WAIT, "a dead letter", || {
        let daemon = &daemon;
        async move {
            let out = cli(daemon, &["dead-letters", "list", "-o", "json"], 0).await?;
            let letters: serde_json::Value = serde_json::from_str(&out)?;
            let found = letters.as_array().is_some_and(|l| !l.is_empty());
            Ok(found.then_some(letters))
        }
    })
    .await?;
    let letter = &letters[0];
    assert_eq!(
        (
            &letter["type"],
            &letter["id"],
            &letter["method"],
            &letter["attempts"]
        ),
        (&"log".into(), &"d".into(), &"flaky".into(), &3.into()),
        "{letters}"
    );
    assert!(
        letter["error"]
            .as_str()
            .is_some_and(|e| e.contains("flaky failed on purpose")),
        "{letter}"
    );
    let seq = letter["seq"]
        .as_u64()
        .context("the dead letter has no numeric seq")?
        .to_string();
    let table = cli(&daemon, &["dead-letters", "list", "--type", TY], 0).await?;
    assert!(table.starts_with("TYPE") && table.contains(&seq), "{table}");
    let shown = cli(
        &daemon,
        &["dead-letters", "get", TY, "d", &seq, "-o", "json"],
        0,
    )
    .await?;
    let shown: serde_json::Value = serde_json::from_str(&shown)?;
    assert_eq!(shown["payload"]["kwargs"]["n"], 42, "{shown}");
    let described = cli(&daemon, &["actors", "get", TY, "d", "-o", "json"], 0).await?;
    let described: serde_json::Value = serde_json::from_str(&described)?;
    assert_eq!(described["dead_letters"], 1, "{described}");

    // Fixed, re-driven: delivered (once), and the letter is gone.
    app.set_failing(false);
    let out = cli(&daemon, &["dead-letters", "redrive", TY, "d", &seq], 0).await?;
    assert!(out.starts_with("re-drove dead letter"), "{out}");
    assert_eq!(settled_log(&daemon, "d", 1).await?, [42]);
    let left = cli(&daemon, &["dead-letters", "list", "-o", "json"], 0).await?;
    assert_eq!(left.trim(), "[]");
    // Gone: not found (exit 4), for get, redrive and drop alike.
    for verb in ["get", "redrive", "drop"] {
        cli(&daemon, &["dead-letters", verb, TY, "d", &seq], 4).await?;
    }
    Ok(())
}
