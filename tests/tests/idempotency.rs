//! Idempotency keys end to end: a keyed invoke whose daemon dies after the
//! turn ran and before the reply left (a crash point in the daemon, the
//! moment no outside signal can hit) gets its recorded answer when the
//! client retries on the next daemon, and the method ran once — on sled and
//! on PostgreSQL. And the keys the SDK core makes spare a busy actor's calls
//! the store read a key memory does not know costs; `troupe status` shows
//! the bound on the memory those keys take, and the one on activations.

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

/// `troupe status` shows both memory bounds at work, without a metrics
/// endpoint: keyed calls to more actors than `--max-activations` allows,
/// each leaving more stored keys than `--idempotency-memory-bytes` holds
/// for two.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn status_shows_the_memory_bounds_at_work() -> anyhow::Result<()> {
    const MAX_ACTIVATIONS: u64 = 10;
    const RECORDS_BYTES: u64 = 4096;
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(
        dir.path(),
        &[
            "--max-activations",
            &MAX_ACTIVATIONS.to_string(),
            "--idempotency-memory-bytes",
            &RECORDS_BYTES.to_string(),
        ],
    )
    .await?;
    let _app = TestApp::attach(
        daemon.addr,
        vec![type_with_mode("acct", pb::StateMode::Durable)],
    )
    .await?;
    let mut client = daemon.client().await?;
    // Durable: each answer is stored before its reply, and its key's
    // fingerprint stays with the live actor (about 3 KiB for 40).
    for actor in 0..30 {
        for call in 0..40 {
            client
                .invoke_keyed(
                    "acct",
                    &format!("a{actor}"),
                    "incr",
                    "{}",
                    &format!("k{call}"),
                )
                .await?;
        }
    }
    let addr = daemon.addr.to_string();
    let status = || async {
        let (exit, out, err) = run_cli(&["status", "-o", "json", "--addr", &addr]).await?;
        anyhow::ensure!(exit.success(), "troupe status failed: {err}");
        anyhow::Ok(serde_json::from_str::<serde_json::Value>(&out)?)
    };
    // Room is made by the sweeper, after the activations that passed the
    // bound: 30 actors for room for 10 makes at least 20 go.
    let mut s = status().await?;
    for _ in 0..100 {
        if s["memory"]["capacity_deactivations"].as_u64() >= Some(30 - MAX_ACTIVATIONS) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        s = status().await?;
    }
    let memory = &s["memory"];
    anyhow::ensure!(
        memory["capacity_deactivations"].as_u64() >= Some(30 - MAX_ACTIVATIONS),
        "{s}"
    );
    assert_eq!(memory["max_activations"], MAX_ACTIVATIONS, "{s}");
    assert_eq!(memory["call_records_limit_bytes"], RECORDS_BYTES, "{s}");
    anyhow::ensure!(memory["call_records_shed"].as_u64() >= Some(1), "{s}");
    anyhow::ensure!(
        memory["call_records_bytes"].as_u64() <= Some(RECORDS_BYTES),
        "{s}"
    );
    let (exit, text, err) = run_cli(&["status", "--addr", &addr]).await?;
    anyhow::ensure!(exit.success(), "troupe status failed: {err}");
    for shown in [
        "of at most 10 (--max-activations)",
        "of at most 4.0 KiB (--idempotency-memory-bytes)",
    ] {
        anyhow::ensure!(text.contains(shown), "no {shown:?} in\n{text}");
    }
    Ok(())
}
