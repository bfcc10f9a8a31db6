//! Pausing and resuming reminders against the real daemon on its test
//! clock: a paused reminder does not fire however long it waits, keeps its
//! schedule and counts, stays paused when set again (as apps do at each
//! activation) and across a restart, and once resumed past its due time
//! fires once or skips, as its missed-firings rule says. The counter app
//! runs a reminder named "incr" as its incr method.

use anyhow::Context;
use troupe_proto::v1 as pb;
use troupe_tests::scrape::{metrics_addr, scrape};
use troupe_tests::{
    actor, cli_against, daemon_with_app, expect_code, poll_until, type_spec, Client, Daemon,
    TestApp, WAIT,
};

const MINUTE_MS: u64 = 60_000;
const HOUR_MS: u64 = 60 * MINUTE_MS;

fn every_ten_minutes(id: &str, missed: pb::MissedFirings) -> pb::SetReminderRequest {
    pb::SetReminderRequest {
        actor: Some(actor("counter", id)),
        name: "incr".into(),
        due: "1m".into(),
        period: "10m".into(),
        missed: missed.into(),
        ..Default::default()
    }
}

fn incr_of(id: &str) -> pb::ReminderRef {
    pb::ReminderRef {
        actor: Some(actor("counter", id)),
        name: "incr".into(),
    }
}

async fn set(client: &mut Client, request: pb::SetReminderRequest) -> anyhow::Result<pb::Reminder> {
    Ok(client.0.set_reminder(request).await?.into_inner())
}

async fn pause(client: &mut Client, id: &str) -> anyhow::Result<pb::Reminder> {
    Ok(client.0.pause_reminder(incr_of(id)).await?.into_inner())
}

async fn resume(client: &mut Client, id: &str) -> anyhow::Result<pb::Reminder> {
    Ok(client.0.resume_reminder(incr_of(id)).await?.into_inner())
}

async fn get(client: &mut Client, id: &str) -> anyhow::Result<pb::Reminder> {
    Ok(client.0.get_reminder(incr_of(id)).await?.into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_reminder_holds_its_firings_until_resumed() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) =
        daemon_with_app(&["--test-clock"], vec![type_spec("counter")]).await?;
    let set_first = set(
        &mut client,
        every_ten_minutes("p1", pb::MissedFirings::FireOnce),
    )
    .await?;
    let first = set_first.next_due_unix_ms;
    let now = daemon.advance_clock_ms(0).await?;
    daemon.advance_clock_ms(first + 1 - now).await?;
    assert_eq!(client.stored_count("counter", "p1").await?, Some(1));

    let paused = pause(&mut client, "p1").await?;
    assert!(paused.paused, "{paused:?}");
    assert_eq!(paused.next_due_unix_ms, first + 10 * MINUTE_MS);
    assert_eq!((paused.fired, paused.period_ms), (1, 10 * MINUTE_MS));
    // Pausing again changes nothing.
    assert_eq!(pause(&mut client, "p1").await?, paused);

    // Six periods pass: nothing fires.
    daemon.advance_clock_ms(HOUR_MS).await?;
    assert_eq!(client.stored_count("counter", "p1").await?, Some(1));
    assert!(get(&mut client, "p1").await?.paused);

    // The app sets it again, as at each activation: the new schedule, still
    // paused.
    let again = set(
        &mut client,
        every_ten_minutes("p1", pb::MissedFirings::FireOnce),
    )
    .await?;
    assert!(again.paused, "{again:?}");
    let now = daemon.advance_clock_ms(0).await?;
    assert!(
        (now..now + 2 * MINUTE_MS).contains(&again.next_due_unix_ms),
        "{again:?}"
    );
    let (table, _) = cli_against(&daemon, &["reminders", "list", "--type", "counter"], 0).await?;
    assert!(table.contains("paused (due "), "{table}");
    daemon.advance_clock_ms(HOUR_MS).await?;
    assert_eq!(client.stored_count("counter", "p1").await?, Some(1));

    // Resumed an hour past its due time: it fires once for the missed
    // firings, then keeps its schedule from now.
    let (json, _) = cli_against(
        &daemon,
        &["reminders", "resume", "counter", "p1", "incr", "-o", "json"],
        0,
    )
    .await?;
    let row: serde_json::Value = serde_json::from_str(&json)?;
    assert_eq!(row["paused"], false, "{json}");
    let now = daemon.advance_clock_ms(0).await?;
    assert_eq!(client.stored_count("counter", "p1").await?, Some(2));
    let resumed = get(&mut client, "p1").await?;
    assert!(!resumed.paused);
    assert!(
        (now..=now + 10 * MINUTE_MS).contains(&resumed.next_due_unix_ms),
        "{resumed:?} at {now}"
    );
    assert_eq!(resume(&mut client, "p1").await?, resumed, "resumed again");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_that_skips_missed_firings_resumes_at_its_next_time() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) =
        daemon_with_app(&["--test-clock"], vec![type_spec("counter")]).await?;
    let r = set(
        &mut client,
        every_ten_minutes("s1", pb::MissedFirings::Skip),
    )
    .await?;
    let (table, _) =
        cli_against(&daemon, &["reminders", "pause", "counter", "s1", "incr"], 0).await?;
    assert!(table.contains("paused (due "), "{table}");
    daemon.advance_clock_ms(2 * HOUR_MS).await?;
    let resumed = resume(&mut client, "s1").await?;
    assert_eq!(resumed.next_due_unix_ms, r.next_due_unix_ms);
    let now = daemon.advance_clock_ms(0).await?;
    assert_eq!(client.stored_count("counter", "s1").await?, None);
    let next = get(&mut client, "s1").await?;
    assert!(
        next.next_due_unix_ms > now
            && (next.next_due_unix_ms - r.next_due_unix_ms).is_multiple_of(10 * MINUTE_MS),
        "{next:?} at {now}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_outlives_a_restart_and_a_set_after_it() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut daemon = Daemon::start(dir.path(), &["--test-clock"]).await?;
    let mut client = daemon.client().await?;
    set(
        &mut client,
        every_ten_minutes("r1", pb::MissedFirings::FireOnce),
    )
    .await?;
    pause(&mut client, "r1").await?;
    daemon.terminate().await?;

    let daemon = Daemon::start(dir.path(), &["--test-clock"]).await?;
    let _app = TestApp::attach(daemon.addr, vec![type_spec("counter")]).await?;
    let mut client = daemon.client().await?;
    // The daemon learns what is paused from the store as it starts.
    let again = set(
        &mut client,
        every_ten_minutes("r1", pb::MissedFirings::FireOnce),
    )
    .await?;
    assert!(again.paused, "{again:?}");
    daemon.advance_clock_ms(HOUR_MS).await?;
    assert_eq!(client.stored_count("counter", "r1").await?, None);
    assert!(!resume(&mut client, "r1").await?.paused);
    daemon.advance_clock_ms(0).await?;
    assert_eq!(client.stored_count("counter", "r1").await?, Some(1));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_what_is_not_there_says_what_is() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) =
        daemon_with_app(&["--test-clock"], vec![type_spec("counter")]).await?;
    let missing = client.0.pause_reminder(incr_of("n1")).await;
    let status = expect_code(missing, tonic::Code::NotFound)?;
    assert!(
        status.message().contains("no reminder \"incr\""),
        "{status:?}"
    );
    expect_code(
        client.0.resume_reminder(incr_of("n1")).await,
        tonic::Code::NotFound,
    )?;

    set(
        &mut client,
        every_ten_minutes("n1", pb::MissedFirings::FireOnce),
    )
    .await?;
    let (_, err) = cli_against(
        &daemon,
        &["reminders", "pause", "counter", "n1", "nightly"],
        4,
    )
    .await?;
    assert!(
        err.contains("has no reminder \"nightly\" (it has: incr)"),
        "{err}"
    );
    let (_, err) = cli_against(
        &daemon,
        &["reminders", "pause", "counter", "n1", "(alarm)"],
        2,
    )
    .await?;
    assert!(err.contains("alarm cannot be paused"), "{err}");
    // Nothing above paused it.
    assert!(!get(&mut client, "n1").await?.paused);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_all_of_a_type_holds_every_one_and_resuming_lets_them_go() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) =
        daemon_with_app(&["--test-clock"], vec![type_spec("counter")]).await?;
    for id in ["a1", "a2", "a3"] {
        set(
            &mut client,
            every_ten_minutes(id, pb::MissedFirings::FireOnce),
        )
        .await?;
    }
    // Another name, and an alarm: --name leaves the first alone, and
    // alarms are never paused.
    set(
        &mut client,
        pb::SetReminderRequest {
            name: "audit".into(),
            ..every_ten_minutes("a1", pb::MissedFirings::FireOnce)
        },
    )
    .await?;
    client
        .0
        .set_alarm(pb::SetAlarmRequest {
            actor: Some(actor("counter", "a2")),
            at: "5m".into(),
            ..Default::default()
        })
        .await?;
    pause(&mut client, "a3").await?;

    let (out, _) = cli_against(
        &daemon,
        &[
            "reminders",
            "pause",
            "--all",
            "--type",
            "counter",
            "--name",
            "incr",
        ],
        0,
    )
    .await?;
    assert!(
        out.contains("paused 2 of 3 reminders of type counter named \"incr\" (1 already paused)"),
        "{out}"
    );
    for id in ["a1", "a2", "a3"] {
        assert!(get(&mut client, id).await?.paused, "{id}");
    }
    let audit = pb::ReminderRef {
        name: "audit".into(),
        ..incr_of("a1")
    };
    assert!(!client.0.get_reminder(audit).await?.into_inner().paused);

    // An hour on: the alarm and "audit" fired, the paused ones did not.
    daemon.advance_clock_ms(HOUR_MS).await?;
    assert_eq!(client.stored_count("counter", "a3").await?, None);

    let (json, _) = cli_against(
        &daemon,
        &[
            "reminders",
            "resume",
            "--all",
            "--type",
            "counter",
            "-o",
            "json",
        ],
        0,
    )
    .await?;
    let summary: serde_json::Value = serde_json::from_str(&json)?;
    assert_eq!(
        (&summary["listed"], &summary["resumed"], &summary["already"]),
        (&4.into(), &3.into(), &1.into()),
        "{json}"
    );
    daemon.advance_clock_ms(0).await?;
    assert_eq!(client.stored_count("counter", "a3").await?, Some(1));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_reminders_are_counted_in_status_and_metrics() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) = daemon_with_app(
        &["--test-clock", "--metrics-listen", "127.0.0.1:0"],
        vec![type_spec("counter")],
    )
    .await?;
    let addr = metrics_addr(&daemon.log()).context("no metrics address logged")?;
    let paused_gauge = |want: f64| {
        poll_until(
            WAIT,
            "troupe_reminders_paused to say so",
            move || async move {
                let s = scrape(addr).await?;
                Ok((s.has("troupe_reminders_paused")
                    && s.sum("troupe_reminders_paused", &[]) == want)
                    .then_some(()))
            },
        )
    };
    // Known from the start: zero, not absent.
    paused_gauge(0.0).await?;
    for id in ["m1", "m2"] {
        set(
            &mut client,
            every_ten_minutes(id, pb::MissedFirings::FireOnce),
        )
        .await?;
    }
    pause(&mut client, "m1").await?;
    paused_gauge(1.0).await?;
    assert_eq!(daemon.status().await?.reminders_paused, Some(1));
    let (table, _) = cli_against(&daemon, &["status"], 0).await?;
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("reminders paused") && l.ends_with(" 1")),
        "{table}"
    );
    resume(&mut client, "m1").await?;
    paused_gauge(0.0).await?;
    Ok(())
}
