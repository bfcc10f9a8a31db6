//! Calendar reminders against the real daemon on its test clock: a cron
//! pattern read in a time zone fires at that zone's wall time each day,
//! reads back (API, CLI table and JSON) as it was set, and what cannot
//! fire is refused with INVALID_ARGUMENT before anything is stored. The
//! counter app runs a reminder named "incr" as its incr method.

use serde_json::Value;
use troupe_proto::v1 as pb;
use troupe_tests::{actor, cli_against, daemon_with_app, expect_code, type_spec, Client};

const HOUR_MS: u64 = 3600 * 1000;
const DAY_MS: u64 = 24 * HOUR_MS;

fn calendar_reminder(id: &str, cron: &str, time_zone: &str) -> pb::SetReminderRequest {
    pb::SetReminderRequest {
        actor: Some(actor("counter", id)),
        name: "incr".into(),
        cron: cron.into(),
        time_zone: time_zone.into(),
        ..Default::default()
    }
}

async fn get(client: &mut Client, id: &str) -> anyhow::Result<pb::Reminder> {
    Ok(client
        .0
        .get_reminder(pb::ReminderRef {
            actor: Some(actor("counter", id)),
            name: "incr".into(),
        })
        .await?
        .into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nine_in_kolkata_fires_at_three_thirty_utc_each_day() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) =
        daemon_with_app(&["--test-clock"], vec![type_spec("counter")]).await?;
    let start = daemon.advance_clock("0s").await?;
    let set = client
        .0
        .set_reminder(calendar_reminder("c1", "0 9 * * *", "Asia/Kolkata"))
        .await?
        .into_inner();
    // India keeps UTC+05:30 all year: 09:00 there is 03:30 UTC.
    assert_eq!(set.next_due_unix_ms % DAY_MS, 3 * HOUR_MS + HOUR_MS / 2);
    assert!(
        set.next_due_unix_ms >= start && set.next_due_unix_ms < start + DAY_MS,
        "first firing {} is not the next 09:00 after {start}",
        set.next_due_unix_ms
    );
    assert_eq!((set.cron.as_str(), set.period_ms), ("0 9 * * *", 0));
    assert_eq!(set.time_zone, "Asia/Kolkata");

    daemon.advance_clock("72h").await?;
    assert_eq!(client.stored_count("counter", "c1").await?, Some(3));
    let after = get(&mut client, "c1").await?;
    assert_eq!(after.fired, 3);
    assert_eq!(after.next_due_unix_ms, set.next_due_unix_ms + 3 * DAY_MS);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_shows_the_pattern_and_its_zone() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) =
        daemon_with_app(&["--test-clock"], vec![type_spec("counter")]).await?;
    client
        .0
        .set_reminder(calendar_reminder(
            "c1",
            "  30 8 * * MON-FRI ",
            "Europe/Berlin",
        ))
        .await?;
    client
        .0
        .set_reminder(calendar_reminder("c2", "@daily", ""))
        .await?;

    let (table, _) = cli_against(&daemon, &["reminders", "list", "--type", "counter"], 0).await?;
    assert!(table.contains("SCHEDULE"), "{table}");
    assert!(
        table.contains("30 8 * * MON-FRI (Europe/Berlin)"),
        "{table}"
    );
    assert!(table.contains("@daily (UTC)"), "{table}");

    let (json, _) = cli_against(
        &daemon,
        &["reminders", "list", "--type", "counter", "--output", "json"],
        0,
    )
    .await?;
    let rows: Value = serde_json::from_str(&json)?;
    let c1 = rows
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["id"] == "c1"))
        .ok_or_else(|| anyhow::anyhow!("no row for c1 in {json}"))?;
    assert_eq!(c1["cron"], "30 8 * * MON-FRI", "{json}");
    assert_eq!(c1["time_zone"], "Europe/Berlin", "{json}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_that_cannot_fire_are_refused_and_nothing_is_stored() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) =
        daemon_with_app(&["--test-clock"], vec![type_spec("counter")]).await?;
    let with_period = pb::SetReminderRequest {
        period: "1h".into(),
        ..calendar_reminder("c1", "@hourly", "")
    };
    let until_first = pb::SetReminderRequest {
        until: "1m".into(),
        ..calendar_reminder("c1", "0 0 1 1 *", "")
    };
    let refused = [
        ("a bad pattern", calendar_reminder("c1", "61 * * * *", "")),
        ("four fields", calendar_reminder("c1", "0 9 * *", "")),
        (
            "an unknown zone",
            calendar_reminder("c1", "0 9 * * *", "Mars/Olympus"),
        ),
        ("a zone alone", calendar_reminder("c1", "", "Europe/Berlin")),
        ("February 30th", calendar_reminder("c1", "0 0 30 2 *", "")),
        ("cron and a period", with_period),
        ("first match after until", until_first),
    ];
    for (what, request) in refused {
        let answer = client.0.set_reminder(request).await;
        let status = expect_code(answer, tonic::Code::InvalidArgument)
            .map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
        assert!(!status.message().is_empty(), "{what}: no message");
    }
    let listed = client
        .0
        .list_reminders(pb::ListRemindersRequest {
            r#type: "counter".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    assert!(listed.reminders.is_empty(), "{:?}", listed.reminders);
    drop(daemon);
    Ok(())
}
