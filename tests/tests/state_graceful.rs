//! A graceful stop (SIGTERM) in the middle of a stream of writes loses no
//! acknowledged write, in either state mode, on sled and on PostgreSQL.
//!
//! The flush interval is an hour: for `write_behind` only the shutdown's
//! flush can have stored the writes; for `durable` the group commit of each
//! held reply does (and the shutdown's flush, for the turns that were
//! running when the stop began).

use troupe_tests::store::{ids, pair_of, type_with_mode};
use troupe_tests::*;

async fn graceful_stop_loses_nothing(store: TestStore, mode: pb::StateMode) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut args = store.args();
    args.extend(["--flush-interval".into(), "1h".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut daemon = Daemon::start(dir.path(), &args).await?;
    let app = TestApp::attach(daemon.addr, vec![type_with_mode("acct", mode)]).await?;
    let client = daemon.client().await?;
    let actors = ids("g", 8);

    let mut writes = WriteStream::start(&client, "acct", &actors);
    writes.wait_acks(300).await?;
    // Stop while the stream still writes.
    let status = daemon.terminate().await?;
    assert!(
        status.success(),
        "graceful stop exited with {status}; log:\n{}",
        daemon.log()
    );
    let logs = writes.finish().await?;
    drop(app);

    let daemon = Daemon::start(dir.path(), &args).await?;
    let mut client = daemon.client().await?;
    for log in &logs {
        let (entries, _) = client.state("acct", &log.actor_id).await?;
        let (count, copy) = pair_of(&entries)?;
        assert_eq!(count, copy, "{}: a torn turn was stored", log.actor_id);
        assert!(
            count >= log.last_acked(),
            "{mode:?} {}: acknowledged {} but {count} was stored after a graceful stop",
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sled_write_behind_graceful_stop_loses_nothing() -> anyhow::Result<()> {
    graceful_stop_loses_nothing(TestStore::Sled, pb::StateMode::WriteBehind).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sled_durable_graceful_stop_loses_nothing() -> anyhow::Result<()> {
    graceful_stop_loses_nothing(TestStore::Sled, pb::StateMode::Durable).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_write_behind_graceful_stop_loses_nothing() -> anyhow::Result<()> {
    let test = "postgres_write_behind_graceful_stop_loses_nothing";
    match TestStore::postgres(test).await? {
        Some(store) => graceful_stop_loses_nothing(store, pb::StateMode::WriteBehind).await,
        None => Ok(()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_durable_graceful_stop_loses_nothing() -> anyhow::Result<()> {
    match TestStore::postgres("postgres_durable_graceful_stop_loses_nothing").await? {
        Some(store) => graceful_stop_loses_nothing(store, pb::StateMode::Durable).await,
        None => Ok(()),
    }
}
