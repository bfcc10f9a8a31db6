//! Jittered reminders against the real daemon on its test clock: reminders
//! set alike spread over their jitter instead of firing in one instant,
//! each keeps its delay at every firing and when set again, the delay never
//! pushes the first firing past `until`, and a jitter that is no duration is
//! refused. The counter app runs a reminder named "incr" as its incr method.

use std::collections::HashSet;

use troupe_proto::v1 as pb;
use troupe_tests::{actor, cli_against, daemon_with_app, expect_code, type_spec, Client};

const HOUR_MS: u64 = 3600 * 1000;
const DAY_MS: u64 = 24 * HOUR_MS;

fn jittered(id: &str, jitter: &str) -> pb::SetReminderRequest {
    pb::SetReminderRequest {
        actor: Some(actor("counter", id)),
        name: "incr".into(),
        jitter: jitter.into(),
        ..Default::default()
    }
}

async fn set(client: &mut Client, request: pb::SetReminderRequest) -> anyhow::Result<pb::Reminder> {
    Ok(client.0.set_reminder(request).await?.into_inner())
}

async fn get(client: &mut Client, id: &str) -> anyhow::Result<pb::Reminder> {
    let key = pb::ReminderRef {
        actor: Some(actor("counter", id)),
        name: "incr".into(),
    };
    Ok(client.0.get_reminder(key).await?.into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daily_reminders_spread_over_their_jitter_and_keep_their_delay() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) =
        daemon_with_app(&["--test-clock"], vec![type_spec("counter")]).await?;
    let start = daemon.advance_clock_ms(0).await?;
    let midnight = (start / DAY_MS + 1) * DAY_MS;
    let mut dues = Vec::new();
    for i in 0..20 {
        let r = set(
            &mut client,
            pb::SetReminderRequest {
                cron: "@daily".into(),
                ..jittered(&format!("u{i}"), "1h")
            },
        )
        .await?;
        assert_eq!(r.jitter_ms, HOUR_MS);
        assert_eq!(r.next_due_unix_ms, midnight + r.jitter_delay_ms, "{r:?}");
        assert!(r.jitter_delay_ms < HOUR_MS, "{r:?}");
        dues.push(r.next_due_unix_ms);
    }
    let distinct: HashSet<u64> = dues.iter().copied().collect();
    assert!(
        distinct.len() >= 15,
        "20 reminders set alike fire at {} instants: {dues:?}",
        distinct.len()
    );
    // Set again (as an app does at each activation): the same time.
    let again = set(
        &mut client,
        pb::SetReminderRequest {
            cron: "@daily".into(),
            ..jittered("u0", "1h")
        },
    )
    .await?;
    assert_eq!(again.next_due_unix_ms, dues[0]);

    let (table, _) = cli_against(&daemon, &["reminders", "list", "--type", "counter"], 0).await?;
    assert!(table.contains("@daily (UTC) +"), "{table}");

    // Up to the end of the jitter after midnight: each fired once, and its
    // next firing is a day later with the same delay.
    daemon.advance_clock_ms(midnight + HOUR_MS - start).await?;
    for (i, due) in dues.iter().enumerate() {
        let id = format!("u{i}");
        assert_eq!(client.stored_count("counter", &id).await?, Some(1), "{id}");
        let r = get(&mut client, &id).await?;
        assert_eq!(r.next_due_unix_ms, due + DAY_MS, "{id}: {r:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_period_keeps_its_delay_and_until_bounds_it() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) =
        daemon_with_app(&["--test-clock"], vec![type_spec("counter")]).await?;
    let start = daemon.advance_clock_ms(0).await?;
    let minute = 60_000;
    let r = set(
        &mut client,
        pb::SetReminderRequest {
            due: "1m".into(),
            period: "10m".into(),
            ..jittered("p1", "10m")
        },
    )
    .await?;
    // Due a minute after the set (the test clock also runs on its own).
    let scheduled = r.next_due_unix_ms - r.jitter_delay_ms;
    assert!(
        (start + minute..start + minute + 10_000).contains(&scheduled),
        "{r:?}"
    );
    assert!(r.jitter_delay_ms < 10 * minute, "{r:?}");
    // Just past the third firing.
    let first = r.next_due_unix_ms;
    let now = daemon.advance_clock_ms(0).await?;
    daemon
        .advance_clock_ms(first + 20 * minute + 1 - now)
        .await?;
    assert_eq!(client.stored_count("counter", "p1").await?, Some(3));
    let after = get(&mut client, "p1").await?;
    assert_eq!(after.next_due_unix_ms, first + 30 * minute);

    // An hour's jitter with 30 s to `until`: the first firing stays inside.
    for i in 0..10 {
        let r = set(
            &mut client,
            pb::SetReminderRequest {
                until: "30s".into(),
                ..jittered(&format!("b{i}"), "1h")
            },
        )
        .await?;
        let now = daemon.advance_clock_ms(0).await?;
        assert!(
            r.next_due_unix_ms <= now + 30_000,
            "b{i} due {} after its until",
            r.next_due_unix_ms - now
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jitter_that_is_no_positive_duration_is_refused() -> anyhow::Result<()> {
    let (_dir, _daemon, _app, mut client) =
        daemon_with_app(&["--test-clock"], vec![type_spec("counter")]).await?;
    for jitter in ["soon", "0s", "-5m"] {
        let refused = client.0.set_reminder(jittered("c1", jitter)).await;
        let status = expect_code(refused, tonic::Code::InvalidArgument)?;
        assert!(status.message().contains("jitter"), "{jitter}: {status:?}");
    }
    Ok(())
}
