//! Delayed tells (`TellRequest.delay_ms` and `deliver_at`, `troupe tell
//! --delay` and `--at`) against the real daemon on its test clock: one
//! waits, stored, as a `$tell:` reminder of its actor until its time (a
//! `deliver_at` read by the daemon's clock) and then arrives once; a retry
//! with its key schedules nothing more, and one retried after it arrived is
//! not applied again; deleting its reminder cancels it; it survives kill -9
//! (on sled and PostgreSQL); best effort is refused. On a test clock an
//! advance returns once the tells that came due have run.
//!
//! The actors log the numbers told to them (`troupe_tests::log_app`), so a
//! duplicate, a loss or an early delivery shows in their stored state.

use troupe_tests::cluster_harness::unix_now_ms;
use troupe_tests::log_app::{log_of, settled_log, start, LOG_TYPE};
use troupe_tests::*;

const TY: &str = LOG_TYPE;
const HOUR_MS: u64 = 3_600_000;

/// `append(n)` to `TY/id`, delivered `delay_ms` from now; with `key` as its
/// idempotency key. Answers the reminder it waits as and when it is due.
async fn tell_later(
    client: &mut Client,
    id: &str,
    n: i64,
    delay_ms: u64,
    key: &str,
) -> Result<pb::TellResponse, tonic::Status> {
    let request = pb::TellRequest {
        actor: Some(actor(TY, id)),
        method: "append".into(),
        payload: Some(json_payload(format!(
            "{{\"args\":[],\"kwargs\":{{\"n\":{n}}}}}"
        ))),
        idempotency_key: key.into(),
        delay_ms,
        ..Default::default()
    };
    Ok(client.0.tell(request).await?.into_inner())
}

fn reminder_ref(id: &str, name: &str) -> pb::ReminderRef {
    pb::ReminderRef {
        actor: Some(actor(TY, id)),
        name: name.into(),
    }
}

async fn stored_log(client: &mut Client, id: &str) -> anyhow::Result<Vec<i64>> {
    let (entries, _) = client.state(TY, id).await?;
    log_of(&entries)
}

fn with_test_clock(store: &TestStore) -> Vec<String> {
    let mut args = store.args();
    args.push("--test-clock".into());
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_tell_arrives_once_when_due_and_not_before() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (daemon, _app) = start(dir.path(), &with_test_clock(&TestStore::Sled)).await?;
    let mut client = daemon.client().await?;

    // Due by the daemon's clock (its test clock, far from ours).
    let start = daemon.advance_clock_ms(0).await?;
    let made = tell_later(&mut client, "a", 1, HOUR_MS, "").await?;
    assert!(
        made.reminder.starts_with("$tell:") && made.reminder.len() > 6,
        "{made:?}: a key is made"
    );
    let named = tell_later(&mut client, "a", 2, 2 * HOUR_MS, "order-2").await?;
    let end = daemon.advance_clock_ms(0).await?;
    assert!(
        (start + HOUR_MS..=end + HOUR_MS).contains(&made.due_unix_ms),
        "{made:?} between {start} and {end}"
    );
    assert_eq!(named.reminder, "$tell:order-2");
    // A retry of the same tell (same key) keeps the one that waits, and
    // says when that one is due.
    let again = tell_later(&mut client, "a", 2, 5 * HOUR_MS, "order-2").await?;
    assert_eq!(again, named);
    assert!(again.due_unix_ms <= end + 2 * HOUR_MS, "{again:?}");
    let named = named.reminder;
    let waiting = client
        .0
        .get_reminder(reminder_ref("a", &named))
        .await?
        .into_inner();
    assert_eq!(waiting.tell_method, "append", "{waiting:?}");
    let now = daemon.advance_clock_ms(0).await?;
    assert!(
        waiting.next_due_unix_ms <= now + 2 * HOUR_MS,
        "the retry moved it later: {waiting:?} at {now}"
    );
    let (table, _) = cli_against(&daemon, &["reminders", "list", "--type", TY], 0).await?;
    assert!(
        table.contains("tell append") && table.contains("$tell:order-2"),
        "{table}"
    );

    // Not before its time: nothing due has run, nothing arrived.
    daemon.advance_clock_ms(HOUR_MS - 60_000).await?;
    assert_eq!(stored_log(&mut client, "a").await?, Vec::<i64>::new());
    daemon.advance_clock_ms(2 * 60_000).await?;
    assert_eq!(settled_log(&daemon, "a", 1).await?, [1]);
    daemon.advance_clock_ms(HOUR_MS).await?;
    assert_eq!(settled_log(&daemon, "a", 2).await?, [1, 2]);
    let gone = client.0.get_reminder(reminder_ref("a", &named)).await;
    assert_eq!(
        gone.map(drop).map_err(|s| s.code()),
        Err(tonic::Code::NotFound)
    );

    // Sent again after it arrived (a caller retrying late): scheduled anew,
    // but its key is recorded with the actor, so it is not applied twice.
    tell_later(&mut client, "a", 2, 60_000, "order-2").await?;
    daemon.advance_clock_ms(2 * 60_000).await?;
    tell_later(&mut client, "a", 3, 60_000, "order-3").await?;
    daemon.advance_clock_ms(2 * 60_000).await?;
    assert_eq!(settled_log(&daemon, "a", 3).await?, [1, 2, 3]);
    Ok(())
}

/// On a test clock an advance returns once the tells that came due have
/// run, as it does for reminders: a test asserts their effects at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_advance_returns_once_due_tells_ran() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (daemon, _app) = start(dir.path(), &with_test_clock(&TestStore::Sled)).await?;
    let mut client = daemon.client().await?;
    // A turn that takes 400 ms before it appends.
    let request = pb::TellRequest {
        actor: Some(actor(TY, "s")),
        method: "slow_flaky".into(),
        payload: Some(json_payload(r#"{"kwargs":{"n":5,"ms":400}}"#)),
        delay_ms: HOUR_MS,
        ..Default::default()
    };
    client.0.tell(request).await?;
    daemon.advance_clock_ms(HOUR_MS).await?;
    assert_eq!(stored_log(&mut client, "s").await?, [5]);
    Ok(())
}

/// `troupe tell TY c append(n) --delay DELAY` with `extra` flags; its output.
async fn cli_tell_later(
    daemon: &Daemon,
    n: i64,
    delay: &str,
    extra: &[&str],
) -> anyhow::Result<String> {
    let payload = format!("{{\"kwargs\":{{\"n\":{n}}}}}");
    let mut args = vec![
        "tell",
        TY,
        "c",
        "append",
        "--payload",
        &payload,
        "--delay",
        delay,
    ];
    args.extend_from_slice(extra);
    Ok(cli_against(daemon, &args, 0).await?.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_schedules_lists_and_cancels_delayed_tells() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (daemon, _app) = start(dir.path(), &with_test_clock(&TestStore::Sled)).await?;
    let start = daemon.advance_clock_ms(0).await?;
    let out = cli_tell_later(&daemon, 7, "2h", &["-o", "json"]).await?;
    let end = daemon.advance_clock_ms(0).await?;
    let sent: serde_json::Value = serde_json::from_str(&out)?;
    assert_eq!(sent["delivery"], "delayed", "{out}");
    assert_eq!(sent["delay_ms"], 2 * HOUR_MS, "{out}");
    // When it is due by the daemon's clock (its test clock here, not ours).
    let due_ms = sent["due_unix_ms"].as_u64().unwrap_or_default();
    assert!(
        (start + 2 * HOUR_MS..=end + 2 * HOUR_MS).contains(&due_ms),
        "{out}"
    );
    let due = time::OffsetDateTime::parse(
        sent["due"].as_str().unwrap_or_default(),
        &time::format_description::well_known::Rfc3339,
    )?;
    assert_eq!(
        due.unix_timestamp_nanos() / 1_000_000,
        i128::from(due_ms),
        "{out}"
    );
    let first = sent["reminder"].as_str().unwrap_or_default().to_owned();
    assert!(first.starts_with("$tell:"), "{out}");

    let said = cli_tell_later(&daemon, 8, "3h", &["--idempotency-key", "cancel-me"]).await?;
    // The message prints the command that cancels it, quoted for a shell.
    assert!(
        said.contains("troupe reminders delete log c '$tell:cancel-me'"),
        "{said}"
    );
    let (json, _) = cli_against(
        &daemon,
        &["reminders", "list", "--type", TY, "-o", "json"],
        0,
    )
    .await?;
    let rows: serde_json::Value = serde_json::from_str(&json)?;
    let methods: Vec<_> = rows
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| r["tell_method"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(methods, ["append", "append"], "{json}");
    cli_against(
        &daemon,
        &["reminders", "delete", TY, "c", "$tell:cancel-me"],
        0,
    )
    .await?;
    daemon.advance_clock_ms(4 * HOUR_MS).await?;
    assert_eq!(settled_log(&daemon, "c", 1).await?, [7]);

    // Refused before anything is stored: best effort cannot wait.
    let (_, err) = cli_against(
        &daemon,
        &["tell", TY, "c", "append", "--delay", "1h", "--best-effort"],
        2,
    )
    .await?;
    assert!(err.contains("--best-effort"), "{err}");
    let mut client = daemon.client().await?;
    let refused = client
        .0
        .tell(pb::TellRequest {
            actor: Some(actor(TY, "c")),
            method: "append".into(),
            payload: Some(json_payload(r#"{"kwargs":{"n":7}}"#)),
            delivery: pb::Delivery::BestEffort.into(),
            delay_ms: 1_000,
            ..Default::default()
        })
        .await;
    let code = refused.map(drop).map_err(|s| s.code());
    assert_eq!(code, Err(tonic::Code::InvalidArgument));
    Ok(())
}

fn rfc3339(unix_ms: u64) -> anyhow::Result<String> {
    let nanos = i128::from(unix_ms) * 1_000_000;
    let at = time::OffsetDateTime::from_unix_timestamp_nanos(nanos)?;
    Ok(at.format(&time::format_description::well_known::Rfc3339)?)
}

/// `deliver_at` is read against the daemon's clock, which a caller cannot
/// compute a delay from: here it runs 30 days ahead of the wall clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tell_at_a_time_waits_for_it_on_the_daemons_clock() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (daemon, _app) = start(dir.path(), &with_test_clock(&TestStore::Sled)).await?;
    let mut client = daemon.client().await?;
    let now = daemon.advance_clock_ms(30 * 24 * HOUR_MS).await?;
    let at = |id: &str, deliver_at: String| pb::TellRequest {
        actor: Some(actor(TY, id)),
        method: "append".into(),
        payload: Some(json_payload(r#"{"kwargs":{"n":1}}"#)),
        deliver_at,
        ..Default::default()
    };
    let due = now + 2 * HOUR_MS;
    let named = client.0.tell(at("a", rfc3339(due)?)).await?.into_inner();
    let waiting = client
        .0
        .get_reminder(reminder_ref("a", &named.reminder))
        .await?
        .into_inner();
    // Read a few milliseconds after `now`, by the same clock.
    assert!(
        waiting.next_due_unix_ms.abs_diff(due) < 5_000,
        "{waiting:?}, due {due}"
    );
    daemon.advance_clock_ms(HOUR_MS).await?;
    assert_eq!(stored_log(&mut client, "a").await?, [0_i64; 0]);
    daemon.advance_clock_ms(2 * HOUR_MS).await?;
    assert_eq!(settled_log(&daemon, "a", 1).await?, [1]);

    // A time the daemon's clock has passed is delivered at once, stored.
    let wall_in_an_hour = unix_now_ms() + HOUR_MS;
    let past = client.0.tell(at("b", rfc3339(wall_in_an_hour)?)).await?;
    assert!(past.into_inner().reminder.starts_with("$tell:"));
    daemon.advance_clock_ms(1_000).await?;
    assert_eq!(settled_log(&daemon, "b", 1).await?, [1]);

    // Far out but within the limit from the daemon's now (80 years): taken
    // (it was once read again against 1970 and refused past 2070).
    let far = client
        .0
        .tell(at("e", rfc3339(now + 80 * 365 * 24 * HOUR_MS)?))
        .await?;
    let far = far.into_inner().reminder;
    let kept = client.0.get_reminder(reminder_ref("e", &far)).await?;
    assert!(kept.into_inner().next_due_unix_ms > now + 79 * 365 * 24 * HOUR_MS);
    client.0.delete_reminder(reminder_ref("e", &far)).await?;

    // The CLI sends the time as given.
    let (out, _) = cli_against(
        &daemon,
        &[
            "tell",
            TY,
            "c",
            "append",
            "--payload",
            r#"{"kwargs":{"n":3}}"#,
            "--at",
            &rfc3339(now + 10 * HOUR_MS)?,
            "-o",
            "json",
        ],
        0,
    )
    .await?;
    let sent: serde_json::Value = serde_json::from_str(&out)?;
    assert_eq!(sent["delivery"], "delayed", "{out}");
    assert!(sent["delay_ms"].is_null(), "{out}");
    daemon.advance_clock_ms(10 * HOUR_MS).await?;
    assert_eq!(settled_log(&daemon, "c", 1).await?, [3]);
    let (_, err) = cli_against(
        &daemon,
        &[
            "tell",
            TY,
            "c",
            "append",
            "--at",
            "2030-01-01T00:00:00Z",
            "--delay",
            "1h",
        ],
        2,
    )
    .await?;
    assert!(err.contains("--delay"), "{err}");
    // Empty would read as "no time" and deliver at once.
    let (_, err) = cli_against(&daemon, &["tell", TY, "c", "append", "--at", ""], 2).await?;
    assert!(err.contains("--at"), "{err}");

    // Refused with the field named, nothing stored.
    let both = pb::TellRequest {
        delay_ms: 1_000,
        ..at("d", rfc3339(due)?)
    };
    let best_effort = pb::TellRequest {
        delivery: pb::Delivery::BestEffort.into(),
        ..at("d", rfc3339(due)?)
    };
    for (request, says) in [
        (both, "both"),
        (best_effort, "best effort"),
        (at("d", "2026-13-01T00:00:00Z".into()), "deliver_at"),
        (at("d", "tomorrow".into()), "deliver_at"),
        (at("d", "2200-01-01T00:00:00Z".into()), "deliver_at"),
    ] {
        let Err(status) = client.0.tell(request).await else {
            anyhow::bail!("a tell that {says} was taken");
        };
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(says), "{status:?}");
    }
    Ok(())
}

/// A delayed tell acknowledged before kill -9 is delivered by the daemon
/// that comes back on the same store, once.
async fn a_delayed_tell_survives_kill9(store: TestStore) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let args = with_test_clock(&store);
    let (mut daemon, app) = start(dir.path(), &args).await?;
    let mut client = daemon.client().await?;
    tell_later(&mut client, "k", 1, HOUR_MS, "k-1").await?;
    tell_later(&mut client, "k", 2, 2 * HOUR_MS, "k-2").await?;
    daemon.kill9().await?;
    drop(app);

    // The test clock starts again from the wall clock: the tells are still
    // an hour and two away.
    let (daemon, _app) = start(dir.path(), &args).await?;
    let mut client = daemon.client().await?;
    assert_eq!(stored_log(&mut client, "k").await?, Vec::<i64>::new());
    daemon.advance_clock_ms(3 * HOUR_MS).await?;
    assert_eq!(settled_log(&daemon, "k", 2).await?, [1, 2]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sled_a_delayed_tell_survives_kill9() -> anyhow::Result<()> {
    a_delayed_tell_survives_kill9(TestStore::Sled).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_delayed_tell_survives_kill9() -> anyhow::Result<()> {
    match TestStore::postgres("postgres_a_delayed_tell_survives_kill9").await? {
        Some(store) => a_delayed_tell_survives_kill9(store).await,
        None => Ok(()),
    }
}
