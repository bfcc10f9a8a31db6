//! Idempotency keys end to end: a keyed invoke whose daemon dies after the
//! turn ran and before the reply left (a crash point in the daemon, the
//! moment no outside signal can hit) gets its recorded answer when the
//! client retries on the next daemon, and the method ran once — on sled and
//! on PostgreSQL.

use troupe_tests::store::{type_with_mode, TestStore};
use troupe_tests::*;

const CRASH_POINT: &str = "TROUPE_TEST_ABORT_BEFORE_REPLY";

async fn retry_after_the_crash_gets_the_recorded_answer(store: TestStore) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let args = store.args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let types = || vec![type_with_mode("acct", pb::StateMode::Durable)];
    let by_two = r#"{"kwargs":{"by":2}}"#;

    let mut daemon = Daemon::start_with_env(dir.path(), &args, &[(CRASH_POINT, "incr")]).await?;
    let app = TestApp::attach(daemon.addr, types()).await?;
    let mut client = daemon.client().await?;
    let lost = client
        .invoke_keyed("acct", "a", "incr", by_two, "call-1")
        .await;
    anyhow::ensure!(lost.is_err(), "the reply left the daemon: {lost:?}");
    let status = daemon.exited().await?;
    anyhow::ensure!(!status.success(), "the daemon did not crash: {status:?}");
    drop(app);

    let daemon = Daemon::start(dir.path(), &args).await?;
    let _app = TestApp::attach(daemon.addr, types()).await?;
    let mut client = daemon.client().await?;
    let retried = client
        .invoke_keyed("acct", "a", "incr", by_two, "call-1")
        .await?;
    assert_eq!(&retried[..], b"2", "the recorded answer of the first run");
    assert_eq!(
        client.stored_count("acct", "a").await?,
        Some(2),
        "the method ran once: one increment by 2"
    );
    // A new key is a new call.
    let next = client
        .invoke_keyed("acct", "a", "incr", by_two, "call-2")
        .await?;
    assert_eq!(&next[..], b"4");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sled_keyed_invoke_survives_a_crash_before_its_reply() -> anyhow::Result<()> {
    retry_after_the_crash_gets_the_recorded_answer(TestStore::Sled).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_keyed_invoke_survives_a_crash_before_its_reply() -> anyhow::Result<()> {
    match TestStore::postgres("postgres_keyed_invoke_survives_a_crash_before_its_reply").await? {
        Some(store) => retry_after_the_crash_gets_the_recorded_answer(store).await,
        None => Ok(()),
    }
}
