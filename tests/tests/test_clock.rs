//! `serve --test-clock` and `Admin.AdvanceClock` against the real daemon:
//! refused where it would be dangerous, FAILED_PRECONDITION without the
//! flag, and with it a month of reminders, alarms and timers fired in well
//! under a second, with their state there as soon as the call returns.
//! The counter app runs a reminder or timer named "incr" as its incr method.

use std::time::{Duration, Instant};

use troupe_proto::v1 as pb;
use troupe_tests::{actor, daemon_with_app, expect_code, run_cli, type_spec, Client, Daemon};

const DAY_MS: u64 = 24 * 3600 * 1000;

async fn advance(daemon: &Daemon, by: &str) -> anyhow::Result<pb::AdvanceClockResponse> {
    let mut admin = daemon.admin().await?;
    Ok(admin
        .advance_clock(pb::AdvanceClockRequest { by: by.into() })
        .await?
        .into_inner())
}

async fn count(client: &mut Client, id: &str) -> anyhow::Result<i64> {
    Ok(client.stored_count("counter", id).await?.unwrap_or(0))
}

#[tokio::test]
async fn the_test_clock_is_refused_beyond_loopback() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().to_string_lossy().into_owned();
    let (status, _, stderr) = run_cli(&[
        "serve",
        "--test-clock",
        "--insecure",
        "--listen",
        "0.0.0.0:0",
        "--data-dir",
        &data,
    ])
    .await?;
    assert!(!status.success(), "a test clock beyond loopback started");
    assert!(stderr.contains("--test-clock is for tests"), "{stderr}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advancing_needs_the_flag() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &[]).await?;
    let mut admin = daemon.admin().await?;
    let refused = admin
        .advance_clock(pb::AdvanceClockRequest { by: "1h".into() })
        .await;
    let status = expect_code(refused, tonic::Code::FailedPrecondition)?;
    assert!(
        status.message().contains("not started with --test-clock"),
        "{}",
        status.message()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_thirty_days_out_fires_on_advance_and_not_before() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) =
        daemon_with_app(&["--test-clock"], vec![type_spec("counter")]).await?;
    let set = client
        .0
        .set_reminder(pb::SetReminderRequest {
            actor: Some(actor("counter", "c1")),
            name: "incr".into(),
            due: "720h".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    let started = Instant::now();
    let start = advance(&daemon, "0s").await?.now_unix_ms;
    assert!(set.next_due_unix_ms >= start + 30 * DAY_MS - 60_000);

    let early = advance(&daemon, "719h").await?;
    assert_eq!(early.reminders_fired, 0);
    assert_eq!(count(&mut client, "c1").await?, 0, "fired before its time");

    let due = advance(&daemon, "1h").await?;
    assert_eq!(due.reminders_fired, 1);
    assert!(due.now_unix_ms >= start + 30 * DAY_MS);
    // No polling: the answer comes after the firing's turn ran.
    assert_eq!(count(&mut client, "c1").await?, 1);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "a month took {:?} of test time",
        started.elapsed()
    );
    let gone = client
        .0
        .get_reminder(pb::ReminderRef {
            actor: Some(actor("counter", "c1")),
            name: "incr".into(),
        })
        .await;
    expect_code(gone, tonic::Code::NotFound)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_firing_on_the_way_runs_in_due_order() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) =
        daemon_with_app(&["--test-clock"], vec![type_spec("counter")]).await?;
    // Daily for a month: stepping fires each day, not one "missed" firing.
    client
        .0
        .set_reminder(pb::SetReminderRequest {
            actor: Some(actor("counter", "daily")),
            name: "incr".into(),
            due: "24h".into(),
            period: "24h".into(),
            ..Default::default()
        })
        .await?;
    client
        .0
        .set_alarm(pb::SetAlarmRequest {
            actor: Some(actor("counter", "alarmed")),
            at: "240h".into(),
            ..Default::default()
        })
        .await?;
    // A timer lives in an activation: activate the actor first.
    client.incr("counter", "ticking", 1).await?;
    client
        .0
        .set_timer(pb::SetTimerRequest {
            actor: Some(actor("counter", "ticking")),
            name: "incr".into(),
            due: "1h".into(),
            period: "1h".into(),
            ..Default::default()
        })
        .await?;

    let advanced = advance(&daemon, "720h").await?;
    assert_eq!(advanced.reminders_fired, 30);
    assert_eq!(advanced.alarms_fired, 1);
    assert_eq!(advanced.timers_fired, 720);
    assert_eq!(count(&mut client, "daily").await?, 30);
    assert_eq!(count(&mut client, "alarmed").await?, 1);
    assert_eq!(count(&mut client, "ticking").await?, 721);
    let next = client
        .0
        .get_reminder(pb::ReminderRef {
            actor: Some(actor("counter", "daily")),
            name: "incr".into(),
        })
        .await?
        .into_inner();
    assert!(next.next_due_unix_ms > advanced.now_unix_ms);
    assert_eq!(next.fired, 30);
    Ok(())
}
