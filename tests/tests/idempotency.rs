//! Idempotency keys end to end: a keyed invoke whose daemon dies after the
//! turn ran and before the reply left (a crash point in the daemon, the
//! moment no outside signal can hit) gets its recorded answer when the
//! client retries on the next daemon, and the method ran once — on sled and
//! on PostgreSQL. And the keys the SDK core makes spare a busy actor's calls
//! the store read a key memory does not know costs.

use anyhow::Context;
use troupe_sdk_core::client::{ActorCalls, CallOptions};
use troupe_sdk_core::connect::{self, ConnectOptions};
use troupe_tests::scrape::{metrics_addr, scrape};
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

/// Calls through the SDK core to an actor past the keys memory knows (1,024
/// fingerprints and 8,192 tags of keys let go): the core marks the keys it
/// makes as new, so the daemon does not ask its store about them (a round
/// trip per call on PostgreSQL); keys a caller chose are looked up there
/// only past both bounds. Counted by the daemon's own metric.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sdk_keys_to_a_busy_actor_are_not_looked_for_in_the_store() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &["--metrics-listen", "127.0.0.1:0"]).await?;
    let _app = TestApp::attach(
        daemon.addr,
        vec![type_with_mode("acct", pb::StateMode::Durable)],
    )
    .await?;
    let metrics = metrics_addr(&daemon.log()).context("no metrics address logged")?;
    let options = ConnectOptions {
        address: daemon.addr.to_string(),
        ..Default::default()
    };
    let calls = ActorCalls::new(connect::channel(&options)?, &options);
    let incr = |key: &str| pb::InvokeRequest {
        actor: Some(actor("acct", "busy")),
        method: "incr".into(),
        payload: Some(json_payload(r#"{"kwargs":{"by":1}}"#.to_owned())),
        idempotency_key: key.into(),
        ..Default::default()
    };
    let call = || CallOptions {
        timeout: Some(std::time::Duration::from_secs(30)),
        metadata: Vec::new(),
        retry: true,
    };
    // Durable: each answer is stored before its reply, so the actor passes
    // the bounds during these calls, made 64 at a time.
    let sdk_calls = |n: usize| {
        let calls = &calls;
        async move {
            for _ in 0..n {
                let batch = (0..64).map(|_| calls.invoke(incr(""), call(), |_| {}));
                for answer in futures::future::join_all(batch).await {
                    answer.map_err(|e| anyhow::anyhow!("{:?}", e.status))?;
                }
            }
            anyhow::Ok(())
        }
    };
    let mine = |from: usize| {
        let calls = &calls;
        async move {
            for i in from..from + 3 {
                calls
                    .invoke(incr(&format!("mine-{i}")), call(), |_| {})
                    .await
                    .map_err(|e| anyhow::anyhow!("{:?}", e.status))?;
            }
            anyhow::Ok(())
        }
    };
    let reads = || async move {
        anyhow::Ok(
            scrape(metrics)
                .await?
                .sum("troupe_call_record_reads_total", &[("actor_type", "acct")]),
        )
    };
    // 1,280 keys: past the fingerprints, within the tags.
    sdk_calls(20).await?;
    mine(0).await?;
    assert_eq!(reads().await?, 0.0, "keys memory knew were looked up");
    // 9,347 keys: past both.
    sdk_calls(126).await?;
    assert_eq!(reads().await?, 0.0, "keys the SDK core made were looked up");
    mine(3).await?;
    assert_eq!(reads().await?, 3.0, "a caller's keys past both bounds");
    Ok(())
}
