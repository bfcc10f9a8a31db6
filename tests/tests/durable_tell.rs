//! Durable tells against the real binary (docs/delivery.md), on sled and on
//! PostgreSQL: an acknowledged tell survives kill -9 and a graceful restart
//! before its delivery; per sender, tells arrive in order; a crash right after
//! handling turns never applies a tell twice (its removal from the inbox is
//! in the same write as its state changes); a type's `durable_tells` default
//! makes tells without a delivery mode durable.
//!
//! The actors log the numbers told to them (`troupe_tests::log_app`), so a
//! duplicate, a loss or a reordering is visible in their stored state.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use troupe_tests::log_app::{
    crash_args, log_of, restart_args, settled_log, start, start_typed, tell_durable, tell_with,
    LOG_TYPE,
};
use troupe_tests::*;

const TY: &str = LOG_TYPE;

/// Tells acknowledged while the actor is busy, so none is delivered yet;
/// `stop` ends the daemon (kill -9 or SIGTERM); a new daemon on the same
/// store delivers every one of them, once and in order.
async fn acknowledged_tells_survive(
    store: TestStore,
    stop: impl AsyncFnOnce(&mut Daemon) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let args = crash_args(&store);
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
    let args = crash_args(&store);
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

/// A type registered with `durable_tells`: tells sent without a delivery
/// mode are stored before they are acknowledged, so they survive kill -9
/// like explicitly durable ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_types_default_makes_its_tells_durable() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = TestStore::Sled;
    let spec = pb::ActorTypeSpec {
        durable_tells: true,
        ..type_spec(TY)
    };
    let (mut daemon, app) = start_typed(dir.path(), &crash_args(&store), spec.clone()).await?;
    let mut client = daemon.client().await?;
    let mut holder = client.clone();
    let hold = tokio::spawn(async move {
        holder
            .invoke_raw(TY, "p", "hold", r#"{"kwargs":{"ms":4000}}"#)
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    for n in 0..5 {
        tell_with(&mut client, TY, "p", "append", n, pb::Delivery::Unspecified).await?;
    }
    daemon.kill9().await?;
    hold.abort();
    drop(app);
    let (daemon, _app) = start_typed(dir.path(), &restart_args(&store), spec).await?;
    assert_eq!(settled_log(&daemon, "p", 5).await?, [0, 1, 2, 3, 4]);
    Ok(())
}
