//! Durable-tell figures against the real binary (issue 19, point 3): the
//! `/metrics` families, `troupe status` and `troupe actors get` move as
//! tells are stored, queue, fail and retry, become dead letters, and are
//! re-driven or dropped (docs/delivery.md, docs/observability.md).

use std::net::SocketAddr;

use anyhow::Context;
use serde_json::Value;
use troupe_tests::log_app::{restart_args, settled_log, start, tell_durable, LogApp, LOG_TYPE};
use troupe_tests::scrape::{metrics_addr, scrape, Scrape};
use troupe_tests::*;

const TY: &str = LOG_TYPE;

/// Runs the CLI against `daemon`; its output, unless it fails.
async fn cli(daemon: &Daemon, args: &[&str]) -> anyhow::Result<String> {
    Ok(cli_against(daemon, args, 0).await?.0)
}

async fn cli_json(daemon: &Daemon, args: &[&str]) -> anyhow::Result<Value> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    Ok(serde_json::from_str(&cli(daemon, &all).await?)?)
}

/// A sled daemon serving `/metrics`, the log app attached.
async fn daemon(dir: &std::path::Path) -> anyhow::Result<(Daemon, LogApp, SocketAddr)> {
    let mut args = restart_args(&TestStore::Sled);
    args.extend(["--metrics-listen".into(), "127.0.0.1:0".into()]);
    let (daemon, app) = start(dir, &args).await?;
    let addr = metrics_addr(&daemon.log())
        .with_context(|| format!("no metrics address logged:\n{}", daemon.log()))?;
    Ok((daemon, app, addr))
}

/// One series of the log type.
fn of_log(scrape: &Scrape, name: &str) -> f64 {
    scrape.sum(name, &[("actor_type", TY)])
}

fn delta(before: &Scrape, after: &Scrape, name: &str) -> f64 {
    of_log(after, name) - of_log(before, name)
}

async fn delivery(daemon: &Daemon) -> anyhow::Result<pb::DeliveryStatus> {
    let status = daemon.status().await?;
    status
        .delivery
        .context("the status has no delivery figures")
}

async fn described(daemon: &Daemon, id: &str) -> anyhow::Result<pb::DescribeActorResponse> {
    let request = pb::DescribeActorRequest {
        actor: Some(actor(TY, id)),
    };
    Ok(daemon
        .admin()
        .await?
        .describe_actor(request)
        .await?
        .into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tells_queued_behind_a_busy_turn_show_as_inbox_depth() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (daemon, _app, metrics) = daemon(dir.path()).await?;
    let mut client = daemon.client().await?;
    let before = scrape(metrics).await?;
    assert_eq!(
        of_log(&before, "troupe_inbox_depth"),
        0.0,
        "{}",
        before.text
    );
    assert!(
        before.has("troupe_durable_tells_stored_total"),
        "zeros before any tell"
    );

    let mut holder = client.clone();
    let hold = tokio::spawn(async move {
        holder
            .invoke_raw(TY, "a", "hold", r#"{"kwargs":{"ms":3000}}"#)
            .await
    });
    poll_until(WAIT, "the hold turn to run", || {
        let daemon = &daemon;
        async move {
            let running = pb::ActivationStatus::Running as i32;
            Ok(daemon
                .actors()
                .await?
                .iter()
                .any(|a| a.status == running)
                .then_some(()))
        }
    })
    .await?;
    for n in 0..5 {
        tell_durable(&mut client, TY, "a", "append", n).await?;
    }
    let queued = scrape(metrics).await?;
    anyhow::ensure!(
        !hold.is_finished(),
        "the hold turn ended before the check: the test checks nothing"
    );
    assert_eq!(
        of_log(&queued, "troupe_inbox_depth"),
        5.0,
        "{}",
        queued.text
    );
    assert_eq!(
        delta(&before, &queued, "troupe_durable_tells_stored_total"),
        5.0
    );
    assert_eq!(
        delta(&before, &queued, "troupe_durable_tells_delivered_total"),
        0.0
    );
    let status = cli_json(&daemon, &["status"]).await?;
    assert_eq!(status["delivery"]["inbox_depth"], 5, "{status}");
    assert_eq!(status["delivery"]["stored"], 5, "{status}");
    assert_eq!(status["delivery"]["retrying"], 0, "{status}");
    let text = cli(&daemon, &["status"]).await?;
    assert!(
        text.contains("inbox depth       5 durable tells held here (0 waiting to retry)\n"),
        "{text}"
    );
    let get = cli_json(&daemon, &["actors", "get", TY, "a"]).await?;
    assert_eq!(get["inbox"], 5, "stored, from the store: {get}");
    assert_eq!(get["inbox_retries"], serde_json::json!([]), "{get}");

    hold.await??;
    assert_eq!(settled_log(&daemon, "a", 5).await?, [0, 1, 2, 3, 4]);
    let after = scrape(metrics).await?;
    assert_eq!(of_log(&after, "troupe_inbox_depth"), 0.0, "{}", after.text);
    assert_eq!(
        delta(&before, &after, "troupe_durable_tells_delivered_total"),
        5.0
    );
    assert_eq!(
        delta(&before, &after, "troupe_durable_tells_retried_total"),
        0.0
    );
    let status = delivery(&daemon).await?;
    assert_eq!((status.stored, status.delivered), (5, 5), "{status:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retries_dead_letters_and_redrives_show_where_operators_look() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (daemon, app, metrics) = daemon(dir.path()).await?;
    let mut client = daemon.client().await?;
    let before = scrape(metrics).await?;

    // Each attempt works 1.5 s before it fails: the retry stays in view
    // for seconds (backoffs of 100 and 200 ms between the three attempts).
    app.set_failing(true);
    tell_durable(&mut client, TY, "d", "slow_flaky", 1500).await?;
    let d = poll_until(WAIT, "a retry in actors get", || {
        let daemon = &daemon;
        async move {
            let d = described(daemon, "d").await?;
            Ok((!d.inbox_retries.is_empty()).then_some(d))
        }
    })
    .await?;
    let retry = &d.inbox_retries[0];
    assert_eq!((retry.attempts, retry.max_attempts), (1, 3), "{retry:?}");
    assert!(
        retry.last_error.contains("slow_flaky failed on purpose"),
        "{retry:?}"
    );
    assert!(retry.next_attempt_unix_ms > 0, "{retry:?}");

    let get = cli_json(&daemon, &["actors", "get", TY, "d"]).await?;
    let shown = &get["inbox_retries"][0];
    assert_eq!(shown["max_attempts"], 3, "{get}");
    assert!(
        shown["attempts"]
            .as_u64()
            .is_some_and(|a| (1..3).contains(&a)),
        "{get}"
    );
    assert!(
        shown["next_attempt"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{get}"
    );
    let text = cli(&daemon, &["actors", "get", TY, "d"]).await?;
    assert!(text.contains("\ninbox         1 (1 retrying)\n"), "{text}");
    assert!(text.contains("\nRETRIES\nSEQ "), "{text}");
    assert!(text.contains("slow_flaky failed on purpose"), "{text}");
    let status = cli_json(&daemon, &["status"]).await?;
    assert_eq!(status["delivery"]["retrying"], 1, "{status}");
    assert_eq!(status["delivery"]["inbox_depth"], 1, "{status}");
    assert!(
        status["delivery"]["retries"].as_u64() >= Some(1),
        "{status}"
    );
    let retrying = scrape(metrics).await?;
    assert_eq!(
        of_log(&retrying, "troupe_inbox_retrying"),
        1.0,
        "{}",
        retrying.text
    );
    assert_eq!(
        of_log(&retrying, "troupe_inbox_depth"),
        1.0,
        "{}",
        retrying.text
    );
    assert!(delta(&before, &retrying, "troupe_durable_tells_retried_total") >= 1.0);

    // The third failure makes it a dead letter, stored with the next flush.
    let status = poll_until(WAIT, "the dead letter in the status", || {
        let daemon = &daemon;
        async move {
            let s = delivery(daemon).await?;
            Ok((s.dead_letters == 1 && s.retrying == 0).then_some(s))
        }
    })
    .await?;
    assert_eq!((status.retries, status.dead_lettered), (2, 1), "{status:?}");
    assert_eq!(status.inbox_depth, 0, "{status:?}");
    assert!(!status.dead_letters_at_least && status.dead_letters_error.is_empty());
    let dead = scrape(metrics).await?;
    assert_eq!(
        delta(&before, &dead, "troupe_durable_tells_retried_total"),
        2.0
    );
    assert_eq!(
        delta(&before, &dead, "troupe_durable_tells_dead_lettered_total"),
        1.0
    );
    assert_eq!(of_log(&dead, "troupe_inbox_retrying"), 0.0, "{}", dead.text);
    assert_eq!(of_log(&dead, "troupe_inbox_depth"), 0.0, "{}", dead.text);
    let text = cli(&daemon, &["status"]).await?;
    assert!(
        text.contains("dead letters      1 in the store (`troupe dead-letters list`); 0 re-driven"),
        "{text}"
    );
    let get = cli_json(&daemon, &["actors", "get", TY, "d"]).await?;
    assert_eq!(get["inbox_retries"], serde_json::json!([]), "{get}");
    assert_eq!(get["dead_letters"], 1, "{get}");

    // Fixed and re-driven: stored again, delivered, counted as re-driven.
    app.set_failing(false);
    let letters = cli_json(&daemon, &["dead-letters", "list"]).await?;
    let seq = letters[0]["seq"]
        .as_u64()
        .context("the dead letter has no numeric seq")?
        .to_string();
    cli(&daemon, &["dead-letters", "redrive", TY, "d", &seq]).await?;
    assert_eq!(settled_log(&daemon, "d", 1).await?, [1500]);
    let redriven = scrape(metrics).await?;
    assert_eq!(
        delta(&before, &redriven, "troupe_dead_letters_redriven_total"),
        1.0
    );
    assert_eq!(
        delta(&before, &redriven, "troupe_durable_tells_stored_total"),
        2.0
    );
    assert_eq!(
        delta(&before, &redriven, "troupe_durable_tells_delivered_total"),
        1.0
    );

    // One more dead letter (fast this time), dropped.
    app.set_failing(true);
    tell_durable(&mut client, TY, "e", "flaky", 7).await?;
    let letters = poll_until(WAIT, "the second dead letter", || {
        let daemon = &daemon;
        async move {
            let letters = cli_json(daemon, &["dead-letters", "list"]).await?;
            Ok(letters
                .as_array()
                .is_some_and(|l| !l.is_empty())
                .then_some(letters))
        }
    })
    .await?;
    let seq = letters[0]["seq"]
        .as_u64()
        .context("the dead letter has no numeric seq")?
        .to_string();
    cli(&daemon, &["dead-letters", "drop", TY, "e", &seq]).await?;
    let after = scrape(metrics).await?;
    assert_eq!(
        delta(&before, &after, "troupe_dead_letters_dropped_total"),
        1.0
    );
    assert_eq!(
        delta(&before, &after, "troupe_durable_tells_dead_lettered_total"),
        2.0
    );
    let status = delivery(&daemon).await?;
    assert_eq!(
        (status.dead_letters, status.redriven, status.dropped),
        (0, 1, 1),
        "{status:?}"
    );
    Ok(())
}
