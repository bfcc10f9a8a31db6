//! `kill -9` during a stream of writes, on sled and on PostgreSQL.
//!
//! Every turn sets keys `count` and `copy` to the same new value (the test
//! app's `incr_pair`), one call at a time per actor, so every value from 0 to
//! the number of calls sent really existed, and a stored state with
//! `count != copy` is a torn turn.
//!
//! - `durable`: every acknowledged write is stored. The flush interval is an
//!   hour, so only the group commit behind each held reply can have stored
//!   them.
//! - `write_behind`: what is stored is a state that existed, and at most the
//!   flush window (plus slack for a loaded machine) of acknowledged writes is
//!   lost.

use std::time::{Duration, Instant};

use troupe_tests::store::{ids, pair_of, type_with_mode};
use troupe_tests::*;

const ACTORS: usize = 8;

/// Starts a daemon on `store`, streams writes to `ACTORS` actors of one
/// type in `mode`, kills the daemon with SIGKILL once `run` says so, and
/// returns the writers' logs with the stored (count, copy) of each actor,
/// read through a new daemon on the same store.
async fn crash_during_writes(
    store: &TestStore,
    mode: pb::StateMode,
    flush_interval: &str,
    run: impl AsyncFnOnce(&mut WriteStream) -> anyhow::Result<()>,
) -> anyhow::Result<(Vec<WriteLog>, Vec<(i64, i64)>, Instant)> {
    let dir = tempfile::tempdir()?;
    let mut args = store.args();
    args.extend(["--flush-interval".into(), flush_interval.into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut daemon = Daemon::start(dir.path(), &args).await?;
    let app = TestApp::attach(daemon.addr, vec![type_with_mode("acct", mode)]).await?;
    let client = daemon.client().await?;
    let actors = ids("a", ACTORS);

    let mut writes = WriteStream::start(&client, "acct", &actors);
    run(&mut writes).await?;
    let killed_at = Instant::now();
    daemon.kill9().await?;
    let logs = writes.ended().await?;
    drop(app);
    for log in &logs {
        anyhow::ensure!(
            log.error.is_some(),
            "writer {} ended without an error although the daemon was killed",
            log.actor_id
        );
    }

    let daemon = Daemon::start(dir.path(), &args).await?;
    let mut client = daemon.client().await?;
    let mut stored = Vec::with_capacity(ACTORS);
    for id in &actors {
        let (entries, active) = client.state("acct", id).await?;
        anyhow::ensure!(!active, "{id} is active in a daemon no app is attached to");
        stored.push(pair_of(&entries)?);
    }
    Ok((logs, stored, killed_at))
}

async fn durable_acknowledged_writes_survive_kill9(store: TestStore) -> anyhow::Result<()> {
    let (logs, stored, _) = crash_during_writes(
        &store,
        pb::StateMode::Durable,
        // Nothing but the group commit of held replies writes in this test.
        "1h",
        async |writes| writes.wait_acks(300).await,
    )
    .await?;
    for (log, (count, copy)) in logs.iter().zip(stored) {
        assert_eq!(count, copy, "{}: a torn turn was stored", log.actor_id);
        assert!(
            count >= log.last_acked(),
            "{}: acknowledged {} but {count} was stored: an acknowledged durable write was lost",
            log.actor_id,
            log.last_acked()
        );
        assert!(
            count <= log.sent,
            "{}: stored {count}, more than the {} calls sent",
            log.actor_id,
            log.sent
        );
    }
    Ok(())
}

async fn write_behind_loses_at_most_the_flush_window(store: TestStore) -> anyhow::Result<()> {
    let interval = Duration::from_millis(100);
    // Slack for a loaded 2-core machine: a flush's own latency, scheduling.
    let slack = Duration::from_millis(900);
    let stream_for = Duration::from_secs(3);
    let (logs, stored, killed_at) = crash_during_writes(
        &store,
        pb::StateMode::WriteBehind,
        "100ms",
        async |writes| {
            writes.wait_acks(100).await?;
            // The workload runs for a while, so that the bound below covers
            // writes acknowledged several flush windows before the kill.
            tokio::time::sleep(stream_for).await;
            Ok(())
        },
    )
    .await?;
    let window_start = killed_at - (interval + slack);
    let mut covered = 0;
    for (log, (count, copy)) in logs.iter().zip(stored) {
        assert_eq!(count, copy, "{}: a torn turn was stored", log.actor_id);
        assert!(
            count <= log.sent,
            "{}: stored {count}, a value no turn produced ({} calls sent)",
            log.actor_id,
            log.sent
        );
        let floor = log.acked_by(window_start);
        covered += floor;
        assert!(
            count >= floor,
            "{}: {floor} was acknowledged more than {:?} before the kill, but only {count} \
             was stored: write-behind lost more than its flush window",
            log.actor_id,
            interval + slack
        );
    }
    assert!(
        covered > 0,
        "no write was acknowledged before the flush window: the test checked nothing"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sled_durable_acknowledged_writes_survive_kill9() -> anyhow::Result<()> {
    durable_acknowledged_writes_survive_kill9(TestStore::Sled).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_durable_acknowledged_writes_survive_kill9() -> anyhow::Result<()> {
    match TestStore::postgres("postgres_durable_acknowledged_writes_survive_kill9").await? {
        Some(store) => durable_acknowledged_writes_survive_kill9(store).await,
        None => Ok(()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sled_write_behind_loses_at_most_the_flush_window() -> anyhow::Result<()> {
    write_behind_loses_at_most_the_flush_window(TestStore::Sled).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_write_behind_loses_at_most_the_flush_window() -> anyhow::Result<()> {
    match TestStore::postgres("postgres_write_behind_loses_at_most_the_flush_window").await? {
        Some(store) => write_behind_loses_at_most_the_flush_window(store).await,
        None => Ok(()),
    }
}
