//! Reminders, alarms and timers against the real daemon. The counter app
//! runs a reminder or timer named "incr" as its incr method (and "fail" as a
//! failing one), so firings show up as state.

use std::time::Duration;

use anyhow::Context;
use troupe_proto::v1 as pb;
use troupe_tests::{
    actor, daemon_with_app, json_payload, poll_until, type_spec, Daemon, RawApp, TestApp, TestStore,
};

fn reminder(id: &str, name: &str, due: &str, period: &str) -> pb::SetReminderRequest {
    pb::SetReminderRequest {
        actor: Some(actor("counter", id)),
        name: name.into(),
        due: due.into(),
        period: period.into(),
        ..Default::default()
    }
}

async fn count(client: &mut troupe_tests::Client, id: &str) -> anyhow::Result<i64> {
    Ok(client.stored_count("counter", id).await?.unwrap_or(0))
}

async fn reminder_gone(
    client: &mut troupe_tests::Client,
    id: &str,
    name: &str,
) -> anyhow::Result<bool> {
    let got = client
        .0
        .get_reminder(pb::ReminderRef {
            actor: Some(actor("counter", id)),
            name: name.into(),
        })
        .await;
    Ok(matches!(got, Err(s) if s.code() == tonic::Code::NotFound))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_activates_an_inactive_actor_and_then_is_gone() -> anyhow::Result<()> {
    let (_dir, _daemon, app, mut client) = daemon_with_app(&[], vec![type_spec("counter")]).await?;
    assert!(app.events().activations.is_empty());
    client
        .0
        .set_reminder(reminder("r1", "incr", "100ms", ""))
        .await?;
    poll_until(Duration::from_secs(10), "the reminder to fire", || {
        let mut c = client.clone();
        async move { Ok((count(&mut c, "r1").await? == 1).then_some(())) }
    })
    .await?;
    assert_eq!(
        app.events().activations.len(),
        1,
        "the firing activated the actor"
    );
    poll_until(
        Duration::from_secs(10),
        "the one-shot reminder to be removed",
        || {
            let mut c = client.clone();
            async move { Ok(reminder_gone(&mut c, "r1", "incr").await?.then_some(())) }
        },
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_periodic_reminder_fires_exactly_its_repetitions() -> anyhow::Result<()> {
    let (_dir, _daemon, _app, mut client) =
        daemon_with_app(&[], vec![type_spec("counter")]).await?;
    let set = client
        .0
        .set_reminder(reminder("p1", "incr", "50ms", "R3/PT0.1S"))
        .await?
        .into_inner();
    assert_eq!((set.period_ms, set.remaining), (100, 3));
    // Once it is gone it cannot fire again: the count is final.
    poll_until(Duration::from_secs(10), "three firings", || {
        let mut c = client.clone();
        async move { Ok(reminder_gone(&mut c, "p1", "incr").await?.then_some(())) }
    })
    .await?;
    assert_eq!(count(&mut client, "p1").await?, 3);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_periodic_reminder_stops_it() -> anyhow::Result<()> {
    let (_dir, _daemon, _app, mut client) =
        daemon_with_app(&[], vec![type_spec("counter")]).await?;
    client
        .0
        .set_reminder(reminder("d1", "incr", "0s", "50ms"))
        .await?;
    poll_until(Duration::from_secs(10), "two firings", || {
        let mut c = client.clone();
        async move { Ok((count(&mut c, "d1").await? >= 2).then_some(())) }
    })
    .await?;
    let deleted = client
        .0
        .delete_reminder(pb::ReminderRef {
            actor: Some(actor("counter", "d1")),
            name: "incr".into(),
        })
        .await?
        .into_inner();
    assert!(deleted.deleted);
    let after_delete = count(&mut client, "d1").await?;
    // A window several periods long in which it must not fire again (one
    // firing may have been in flight while we deleted).
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(count(&mut client, "d1").await? <= after_delete + 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_firing_is_retried_with_backoff_then_dropped() -> anyhow::Result<()> {
    let (_dir, _daemon, app, mut client) = daemon_with_app(&[], vec![type_spec("counter")]).await?;
    let mut request = reminder("f1", "fail", "0s", "");
    request.retry = Some(pb::RetryPolicy {
        max_attempts: 3,
        initial_backoff_ms: 50,
        max_backoff_ms: 1000,
    });
    client.0.set_reminder(request).await?;
    app.wait_for("three attempts", Duration::from_secs(10), |e| e.turns >= 3)
        .await?;
    poll_until(Duration::from_secs(10), "the firing to be dropped", || {
        let mut c = client.clone();
        async move { Ok(reminder_gone(&mut c, "f1", "fail").await?.then_some(())) }
    })
    .await?;
    assert_eq!(app.events().turns, 3, "three attempts, then no more");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reminders_survive_graceful_and_hard_restarts() -> anyhow::Result<()> {
    let mut stores = vec![TestStore::Sled];
    if let Some(pg) = TestStore::postgres("reminders on PostgreSQL survive restarts").await? {
        stores.push(pg);
    }
    for store in &stores {
        let on_postgres = matches!(store, TestStore::Postgres(_));
        let args: Vec<String> = store.args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        for hard in [false, true] {
            let dir = tempfile::tempdir()?;
            let mut daemon = Daemon::start(dir.path(), &args).await?;
            let mut client = daemon.client().await?;
            let id = format!("s-{hard}");
            // Due after the restart: only the stored copy can fire it.
            client
                .0
                .set_reminder(reminder(&id, "incr", "1500ms", ""))
                .await?;
            if hard {
                daemon.kill9().await?;
            } else {
                daemon.terminate().await?;
            }
            // On PostgreSQL the new daemon gets an empty data dir: the
            // reminder must come from the shared database.
            let second = tempfile::tempdir()?;
            let restart_dir = if on_postgres {
                second.path()
            } else {
                dir.path()
            };
            let daemon = Daemon::start(restart_dir, &args).await?;
            let _app = TestApp::attach(daemon.addr, vec![type_spec("counter")]).await?;
            let client = daemon.client().await?;
            poll_until(
                Duration::from_secs(15),
                "the reminder to fire after the restart",
                || {
                    let (mut c, id) = (client.clone(), id.clone());
                    async move { Ok((count(&mut c, &id).await? == 1).then_some(())) }
                },
            )
            .await
            .with_context(|| format!("store {store:?}, restart hard={hard}"))?;
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_set_alarm_replaces_the_first() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &[]).await?;
    let (mut app, _) = RawApp::register(daemon.addr, vec![type_spec("counter")]).await?;
    let mut client = daemon.client().await?;
    let alarm = |at: &str, data: &str| pb::SetAlarmRequest {
        actor: Some(actor("counter", "a1")),
        at: at.into(),
        payload: Some(json_payload(data.to_owned())),
        retry: None,
    };
    client.0.set_alarm(alarm("1h", "\"first\"")).await?;
    let set = client
        .0
        .set_alarm(alarm("100ms", "\"second\""))
        .await?
        .into_inner();
    assert!(set.alarm);
    let turn = app.next_turn().await?;
    assert_eq!(turn.kind, pb::TurnKind::Alarm as i32);
    assert_eq!(
        turn.payload.map(|p| p.data).unwrap_or_default(),
        "\"second\""
    );
    app.reply(turn.call_id, "null")?;
    poll_until(Duration::from_secs(10), "the alarm to be done", || {
        let mut c = client.clone();
        async move {
            let got =
                c.0.get_alarm(pb::AlarmRef {
                    actor: Some(actor("counter", "a1")),
                })
                .await;
            Ok(matches!(got, Err(s) if s.code() == tonic::Code::NotFound).then_some(()))
        }
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_fire_while_active_and_die_with_the_activation() -> anyhow::Result<()> {
    let mut spec = type_spec("counter");
    spec.idle_timeout_ms = 300;
    let (_dir, _daemon, app, mut client) = daemon_with_app(&[], vec![spec]).await?;
    // Timers live in an activation: refused for an inactive actor.
    let timer = pb::SetTimerRequest {
        actor: Some(actor("counter", "t1")),
        name: "incr".into(),
        due: "20ms".into(),
        period: "50ms".into(),
        payload: None,
        keep_alive: false,
    };
    let refused = client.0.set_timer(timer.clone()).await;
    assert_eq!(
        refused.err().map(|s| s.code()),
        Some(tonic::Code::FailedPrecondition)
    );
    client.incr("counter", "t1", 1).await?;
    client.0.set_timer(timer).await?;
    poll_until(Duration::from_secs(10), "timer firings", || {
        let mut c = client.clone();
        async move { Ok((count(&mut c, "t1").await? >= 3).then_some(())) }
    })
    .await?;
    // Timer turns without keep-alive do not count as activity: it idles out.
    app.wait_for("idle deactivation", Duration::from_secs(10), |e| {
        e.deactivated("counter", "t1", pb::deactivate::Reason::Idle)
    })
    .await?;
    let at_deactivation = count(&mut client, "t1").await?;
    let activations = app.events().activations.len();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        count(&mut client, "t1").await?,
        at_deactivation,
        "the timer died with the activation"
    );
    assert_eq!(
        app.events().activations.len(),
        activations,
        "a timer never re-activates"
    );
    Ok(())
}
