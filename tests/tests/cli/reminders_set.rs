//! `troupe reminders set` against a daemon on its test clock: what it sets
//! fires as its flags say (a jittered calendar in a zone, a bounded period,
//! the alarm), with `--data` reaching the handler, and contradicting flags or a
//! schedule the daemon refuses exit 2 with nothing set. The counter app runs
//! a reminder named "incr" (and the alarm) as its incr method.

use serde_json::json;
use troupe_tests::{actor, cli_against, daemon_with_app, pb, type_spec};

/// Moves the test clock on; answers the time it shows then.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_cli_sets_fires_as_its_flags_say() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) =
        daemon_with_app(&["--test-clock"], vec![type_spec("counter")]).await?;
    let by = |n: i64| json!({"kwargs": {"by": n}}).to_string();

    // 09:00 in Kolkata, each day: 03:30 UTC.
    let data = by(2);
    let cron = [
        "reminders",
        "set",
        "counter",
        "k1",
        "incr",
        "--cron",
        "0 9 * * *",
        "--time-zone",
        "Asia/Kolkata",
        "--jitter",
        "30m",
        "--data",
        &data,
    ];
    let (json_out, _) = cli_against(&daemon, &[&cron[..], &["-o", "json"]].concat(), 0).await?;
    let row: serde_json::Value = serde_json::from_str(&json_out)?;
    assert_eq!(row["cron"], "0 9 * * *", "{json_out}");
    assert_eq!(row["time_zone"], "Asia/Kolkata", "{json_out}");
    assert_eq!(row["payload"], json!({"kwargs": {"by": 2}}), "{json_out}");
    assert_eq!(row["jitter_ms"], 1_800_000, "{json_out}");
    let due = row["next_due_unix_ms"].as_u64().unwrap_or_default();
    let delay = row["jitter_delay_ms"].as_u64().unwrap_or(u64::MAX);
    assert!(delay < 1_800_000, "{json_out}");
    let scheduled = due.saturating_sub(delay);
    assert_eq!(scheduled % 86_400_000, 12_600_000, "03:30 UTC: {json_out}");

    // Every ten minutes, three times, from the table output.
    let data = by(5);
    let (table, _) = cli_against(
        &daemon,
        &[
            "reminders",
            "set",
            "counter",
            "p1",
            "incr",
            "--every",
            "10m",
            "--times",
            "3",
            "--due",
            "1m",
            "--data",
            &data,
            "--max-attempts",
            "5",
        ],
        0,
    )
    .await?;
    assert!(table.starts_with("TYPE "), "{table}");
    assert!(table.contains("counter  p1  incr"), "{table}");

    // The alarm, in an hour.
    let (alarm, _) = cli_against(
        &daemon,
        &[
            "reminders",
            "set",
            "counter",
            "a1",
            "--alarm",
            "--due",
            "1h",
        ],
        0,
    )
    .await?;
    assert!(alarm.contains("(alarm)"), "{alarm}");

    // Past the period's and the alarm's firings, then past the calendar's
    // first (up to a day and its jitter away), not its second.
    let now = daemon.advance_clock("2h").await?;
    if due >= now {
        daemon
            .advance_clock(&format!("{}ms", due + 1 - now))
            .await?;
    }
    assert_eq!(client.stored_count("counter", "k1").await?, Some(2));
    assert_eq!(client.stored_count("counter", "p1").await?, Some(15));
    assert_eq!(client.stored_count("counter", "a1").await?, Some(1));
    let gone = client
        .0
        .get_reminder(pb::ReminderRef {
            actor: Some(actor("counter", "p1")),
            name: "incr".into(),
        })
        .await;
    assert!(
        matches!(&gone, Err(s) if s.code() == tonic::Code::NotFound),
        "three firings in all, then gone: {gone:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_that_cannot_make_a_schedule_exit_2_and_set_nothing() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) =
        daemon_with_app(&["--test-clock"], vec![type_spec("counter")]).await?;
    let set = ["reminders", "set", "counter", "c1"];
    let cases: [(&[&str], &str); 8] = [
        (&["incr", "--time-zone", "Europe/Berlin"], "--cron"),
        (&["incr", "--every", "1h", "--cron", "@daily"], "--cron"),
        (&["incr", "--data", "{by: 1}"], "--data is not JSON"),
        (&["incr", "--times", "0"], "--times"),
        (&["--alarm", "--every", "1h"], "--every"),
        (
            &["(alarm)", "--cron", "@daily"],
            "--until, --times and --skip-missed are for named reminders",
        ),
        (
            &["incr", "--cron", "0 9 * * *", "--time-zone", "Mars/Olympus"],
            "Mars/Olympus",
        ),
        (&["incr", "--every", "soon"], "soon"),
    ];
    for (args, says) in cases {
        let (_, err) = cli_against(&daemon, &[&set[..], args].concat(), 2).await?;
        assert!(
            err.contains(says),
            "{args:?}: stderr lacks {says:?}:\n{err}"
        );
    }
    // Neither a name nor --alarm: nothing to set.
    let (_, err) = cli_against(&daemon, &set, 2).await?;
    assert!(err.contains("--alarm"), "{err}");
    let left = client
        .0
        .list_reminders(pb::ListRemindersRequest {
            r#type: "counter".into(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .reminders;
    assert!(left.is_empty(), "refused flags set {left:?}");
    Ok(())
}
