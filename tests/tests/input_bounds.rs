//! Absurd times and names get INVALID_ARGUMENT naming the field and what is
//! allowed: never a wrapped due time, a hot retry loop, a panicked worker or
//! an answer too large to send. The daemon keeps serving after each.

use tonic::Code;
use troupe_tests::{
    actor, daemon_with_app, expect_code, json_payload, pb, run_cli, type_spec, Client,
};

fn reminder(id: &str, due: &str, period: &str) -> pb::SetReminderRequest {
    pb::SetReminderRequest {
        actor: Some(actor("counter", id)),
        name: "incr".into(),
        due: due.into(),
        period: period.into(),
        ..Default::default()
    }
}

/// INVALID_ARGUMENT whose message names `field`.
async fn refused<T: std::fmt::Debug>(
    result: Result<tonic::Response<T>, tonic::Status>,
    field: &str,
) -> anyhow::Result<String> {
    let status = expect_code(result, Code::InvalidArgument)?;
    let message = status.message().to_owned();
    assert!(message.contains(field), "{field} not named: {message}");
    Ok(message)
}

async fn still_serves(client: &mut Client, id: &str) -> anyhow::Result<()> {
    let before = client.incr("counter", id, 1).await?;
    assert_eq!(client.incr("counter", id, 1).await?, before + 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_times_are_refused_naming_the_field_and_the_range() -> anyhow::Result<()> {
    let (_dir, _daemon, _app, mut client) =
        daemon_with_app(&[], vec![type_spec("counter")]).await?;

    // A due time so far off that adding it to now wrapped into the past.
    let message = refused(
        client
            .0
            .set_reminder(reminder("r1", "584542046090y", ""))
            .await,
        "due",
    )
    .await?;
    assert!(message.contains("100y"), "the allowed range: {message}");
    let stored = client
        .0
        .get_reminder(pb::ReminderRef {
            actor: Some(actor("counter", "r1")),
            name: "incr".into(),
        })
        .await;
    expect_code(stored, Code::NotFound)?;

    // Negative, spelled the ISO way; zero repetitions, which the wire reads
    // as unbounded.
    refused(
        client.0.set_reminder(reminder("r2", "PT-5S", "")).await,
        "due",
    )
    .await?;
    refused(
        client.0.set_reminder(reminder("r3", "1s", "R0/PT1S")).await,
        "period",
    )
    .await?;

    // Backoffs near 2^64 ms turned a failing handler into a hot loop.
    let mut hot = reminder("r4", "0s", "");
    hot.retry = Some(pb::RetryPolicy {
        max_attempts: 3,
        initial_backoff_ms: u64::MAX - 1,
        max_backoff_ms: u64::MAX,
    });
    refused(client.0.set_reminder(hot).await, "backoff").await?;

    // A timer due in 3e11 years panicked the worker adding it to now.
    client.incr("counter", "t1", 1).await?;
    let timer = pb::SetTimerRequest {
        actor: Some(actor("counter", "t1")),
        name: "incr".into(),
        due: "300000000000y".into(),
        ..Default::default()
    };
    refused(client.0.set_timer(timer).await, "due").await?;

    let alarm = pb::SetAlarmRequest {
        actor: Some(actor("counter", "a1")),
        at: "10000-01-01T00:00:00Z".into(),
        payload: Some(json_payload("null")),
        retry: None,
    };
    refused(client.0.set_alarm(alarm).await, "at").await?;
    still_serves(&mut client, "after-times").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_name_is_checked_and_never_echoed_whole() -> anyhow::Result<()> {
    let (_dir, _daemon, _app, mut client) =
        daemon_with_app(&[], vec![type_spec("counter")]).await?;
    let long = "x".repeat(1 << 20);
    for (ty, id) in [
        ("", "t"),
        ("counter", ""),
        ("counter", long.as_str()),
        ("coun\u{7}ter", "t"),
    ] {
        let deleted = client
            .0
            .delete_timer(pb::TimerRef {
                actor: Some(actor(ty, id)),
                name: "tick".into(),
            })
            .await;
        expect_code(deleted, Code::InvalidArgument)?;
    }
    // A 100 KB reminder name was echoed into the status and broke the answer.
    let big = "n".repeat(100 * 1024);
    let got = client
        .0
        .get_reminder(pb::ReminderRef {
            actor: Some(actor("counter", "c1")),
            name: big,
        })
        .await;
    let message = refused(got, "reminder name").await?;
    assert!(message.len() < 1024, "{} bytes of message", message.len());
    let keys = client
        .0
        .get_state(pb::GetStateRequest {
            actor: Some(actor("counter", "c1")),
            keys: vec!["ok".into(), "bad\nkey".into()],
        })
        .await;
    refused(keys, "state key").await?;
    still_serves(&mut client, "after-names").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absurd_flag_stops_the_daemon_before_it_starts() -> anyhow::Result<()> {
    // Accepted before, it panicked at SIGTERM (no drain, exit 101).
    let dir = tempfile::tempdir()?;
    let data = dir.path().to_string_lossy().into_owned();
    let (status, _, stderr) = run_cli(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        &data,
        "--shutdown-grace",
        "300000000000y",
    ])
    .await?;
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--shutdown-grace"), "{stderr}");
    assert!(stderr.contains("24h"), "the allowed range: {stderr}");
    // Same rule for the config file's spelling.
    let config = dir.path().join("troupe.toml");
    std::fs::write(&config, "flush_interval = \"0s\"\n")?;
    let config = config.to_string_lossy().into_owned();
    let (status, _, stderr) = run_cli(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        &data,
        "--config",
        &config,
    ])
    .await?;
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("flush_interval"), "{stderr}");
    Ok(())
}
