//! PostgreSQL stopped and restarted under load: while it is down, `durable`
//! calls fail with UNAVAILABLE and `write_behind` calls keep succeeding with
//! their state kept dirty; once it is back the daemon recovers by itself
//! (no restart) and every write-behind write reaches PostgreSQL. And a
//! SIGTERM while PostgreSQL is frozen ends anyway, saying what it could not
//! write.

use std::time::Duration;

use troupe_tests::store::{ids, pair_of, postgres_state, type_with_mode};
use troupe_tests::*;

/// How long recovery may take: the flusher retries at most 2 s apart; the rest
/// is slack for a loaded machine.
const RECOVERY: Duration = Duration::from_secs(30);

async fn dirty_actors(daemon: &Daemon) -> anyhow::Result<u64> {
    let mut admin = daemon.admin().await?;
    Ok(within(WAIT, "Status", admin.status(pb::StatusRequest {}))
        .await??
        .into_inner()
        .dirty_actors)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_outage_under_load_fails_durable_calls_keeps_write_behind_and_recovers(
) -> anyhow::Result<()> {
    let Some(pg) = PgServer::start("postgres_outage_under_load").await? else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let args = ["--store", pg.url.as_str(), "--flush-interval", "200ms"];
    let daemon = Daemon::start(dir.path(), &args).await?;
    let types = vec![
        type_with_mode("wb", pb::StateMode::WriteBehind),
        type_with_mode("dur", pb::StateMode::Durable),
    ];
    let _app = TestApp::attach(daemon.addr, types).await?;
    let mut client = daemon.client().await?;
    let dur_actors = ids("d", 4);
    let before_actors = ids("w", 6);
    let across_actors = ids("x", 4);
    // Activate the actors while the database is up: an activation loads
    // state, which needs the store.
    for id in &dur_actors {
        client.invoke("dur", id, "incr_pair", "{}").await?;
    }
    for id in before_actors.iter().chain(&across_actors) {
        client.invoke("wb", id, "incr_pair", "{}").await?;
    }

    // Load: write-behind writers on `w-*` run before and during the outage
    // and stop before it ends, so their last writes exist only as dirty
    // state in the daemon; writers on `x-*` run from the outage to after it.
    let mut before = WriteStream::start(&client, "wb", &before_actors);
    before.wait_acks(100).await?;

    pg.stop().await?;
    let acked_before_outage = before.acks();
    let mut across = WriteStream::start(&client, "wb", &across_actors);

    // Write-behind calls go on succeeding.
    before.wait_acks(acked_before_outage + 200).await?;
    across.wait_acks(50).await?;
    let before = before.finish().await?;

    // Durable calls cannot be confirmed: UNAVAILABLE, with the reason. Each
    // answer comes from a failed flush attempt that also held every dirty
    // write-behind actor, `w-*` included.
    let mut calls = Vec::new();
    for id in &dur_actors {
        let (mut client, id) = (client.clone(), id.clone());
        calls.push(tokio::spawn(async move {
            within(
                WAIT,
                "a durable call during the outage",
                client.invoke_raw("dur", &id, "incr_pair", "{}"),
            )
            .await
        }));
    }
    for call in calls {
        let status = expect_code(call.await??, tonic::Code::Unavailable)?;
        assert!(
            status.message().contains("state store failed"),
            "UNAVAILABLE without the reason: {}",
            status.message()
        );
    }
    // The failed flushes kept the state dirty in the daemon.
    assert!(
        dirty_actors(&daemon).await? >= before.len() as u64,
        "fewer dirty actors than the write-behind actors written during the outage"
    );

    pg.restart().await?;
    // The daemon recovers without a restart: a durable call succeeds again.
    let confirmed = poll_until(RECOVERY, "a durable call to succeed again", || {
        let mut client = client.clone();
        async move {
            match client.invoke_raw("dur", "d-0", "incr_pair", "{}").await {
                Ok(bytes) => Ok(Some(serde_json::from_slice::<i64>(&bytes)?)),
                Err(status) if status.code() == tonic::Code::Unavailable => Ok(None),
                Err(status) => Err(status.into()),
            }
        }
    })
    .await?;
    let across_acks = across.acks();
    across.wait_acks(across_acks + 50).await?;
    let across = across.finish().await?;

    // Everything dirty reaches PostgreSQL.
    poll_until(RECOVERY, "no dirty actors", || async {
        Ok((dirty_actors(&daemon).await? == 0).then_some(()))
    })
    .await?;
    for log in before.iter().chain(&across) {
        assert!(
            log.error.is_none(),
            "write-behind call on {} failed: {:?}",
            log.actor_id,
            log.error
        );
        let (count, copy) = pair_of(&postgres_state(&pg.url, "wb", &log.actor_id).await?)?;
        assert_eq!(count, copy, "wb/{}: a torn turn was stored", log.actor_id);
        assert_eq!(
            count,
            log.last_acked(),
            "wb/{}: PostgreSQL holds {count}, the last acknowledged write was {}: dirty state \
             was dropped during the outage",
            log.actor_id,
            log.last_acked()
        );
    }
    let (count, copy) = pair_of(&postgres_state(&pg.url, "dur", "d-0").await?)?;
    assert_eq!((count, copy), (confirmed, confirmed));
    // The daemon said why, in its log.
    let log = daemon.log();
    assert!(
        log.contains("state flush failed"),
        "no flush failure in the daemon log:\n{log}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_postgres_is_frozen_exits_non_zero_naming_the_unwritten_actors_and_keys(
) -> anyhow::Result<()> {
    let Some(pg) = PgServer::start("sigterm_while_postgres_is_frozen").await? else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    // The state stays dirty until the shutdown: the flush interval never
    // comes.
    let args = [
        "--store",
        pg.url.as_str(),
        "--flush-interval",
        "1h",
        "--shutdown-grace",
        "1s",
        "--shutdown-flush-timeout",
        "2s",
    ];
    let mut daemon = Daemon::start(dir.path(), &args).await?;
    let types = vec![type_with_mode("wb", pb::StateMode::WriteBehind)];
    let _app = TestApp::attach(daemon.addr, types).await?;
    let mut client = daemon.client().await?;
    let actors = ids("p", 3);
    for id in &actors {
        client.invoke("wb", id, "incr_pair", "{}").await?;
    }

    // Frozen, not stopped: the daemon's connections stay open and its
    // writes get no answer at all, which is the case a bound must cover.
    pg.pause().await?;
    // `terminate` waits 30 s for the exit: far more than the 1 s grace and
    // 2 s flush timeout, so only a shutdown that waits for the store fails.
    let status = daemon.terminate().await;
    pg.resume().await?;
    let status = status?;
    assert!(
        !status.success(),
        "the daemon exited 0 without writing its state:\n{}",
        daemon.log()
    );
    let log = daemon.log();
    for id in &actors {
        let line = log
            .lines()
            .find(|l| l.contains("state not written to the store") && l.contains(id.as_str()))
            .ok_or_else(|| anyhow::anyhow!("wb/{id} is not reported as unwritten:\n{log}"))?;
        assert!(
            line.contains("count") && line.contains("copy"),
            "the report of wb/{id} does not name both keys: {line}"
        );
    }
    assert!(
        log.contains("--shutdown-flush-timeout"),
        "the exit error does not say what was waited for:\n{log}"
    );
    Ok(())
}
