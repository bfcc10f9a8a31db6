//! A graceful stop drops nothing: work that comes due while a SIGTERM drain
//! is held open by a slow turn is done after the restart, exactly once.

use std::time::Duration;

use troupe_tests::{actor, json_payload, pb, poll_until, type_spec, Daemon, TestApp, WAIT};

/// Retries close together, so a firing that the drain refuses would use up
/// its attempts (and be dropped) within ~150 ms of coming due, well inside
/// the drain.
fn quick_retries() -> Option<pb::RetryPolicy> {
    Some(pb::RetryPolicy {
        max_attempts: 3,
        initial_backoff_ms: 50,
        max_backoff_ms: 100,
    })
}

async fn count(client: &mut troupe_tests::Client, id: &str) -> anyhow::Result<i64> {
    Ok(client.stored_count("counter", id).await?.unwrap_or(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_and_an_alarm_due_during_a_slow_drain_fire_once_after_the_restart(
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut daemon = Daemon::start(dir.path(), &[]).await?;
    let app = TestApp::attach(daemon.addr, vec![type_spec("counter")]).await?;
    let mut client = daemon.client().await?;

    // Both come due 1.5 s from now, which is inside the drain below.
    client
        .0
        .set_reminder(pb::SetReminderRequest {
            actor: Some(actor("counter", "reminded")),
            name: "incr".into(),
            due: "1500ms".into(),
            retry: quick_retries(),
            ..Default::default()
        })
        .await?;
    client
        .0
        .set_alarm(pb::SetAlarmRequest {
            actor: Some(actor("counter", "alarmed")),
            at: "1500ms".into(),
            payload: Some(json_payload("null")),
            retry: quick_retries(),
        })
        .await?;

    // A turn that holds the drain open for 4 s after SIGTERM.
    let mut slow_client = client.clone();
    let slow = tokio::spawn(async move {
        slow_client
            .invoke("counter", "slow", "sleep", r#"{"kwargs":{"ms":4000}}"#)
            .await
    });
    let slow_key = ("counter".to_owned(), "slow".to_owned());
    app.wait_for("the slow turn to start", WAIT, |e| {
        e.in_flight.get(&slow_key).copied() == Some(1)
    })
    .await?;
    let exit = daemon.terminate().await?;
    assert!(exit.success(), "graceful stop exits 0: {exit}");
    // The running turn finished and its caller got the answer.
    assert_eq!(slow.await??, serde_json::Value::Null);
    drop(app);

    let daemon = Daemon::start(dir.path(), &[]).await?;
    let _app = TestApp::attach(daemon.addr, vec![type_spec("counter")]).await?;
    let client = daemon.client().await?;
    poll_until(
        Duration::from_secs(15),
        "the reminder and the alarm to fire after the restart",
        || {
            let mut c = client.clone();
            async move {
                let fired = (
                    count(&mut c, "reminded").await?,
                    count(&mut c, "alarmed").await?,
                );
                Ok((fired == (1, 1)).then_some(()))
            }
        },
    )
    .await
    .map_err(|e| e.context(daemon.log()))?;
    // Both are one-shot: once their firing is recorded they are gone, so
    // nothing can fire them again.
    poll_until(Duration::from_secs(10), "both to be done", || {
        let mut c = client.clone();
        async move {
            let reminder = c
                .0
                .get_reminder(pb::ReminderRef {
                    actor: Some(actor("counter", "reminded")),
                    name: "incr".into(),
                })
                .await;
            let alarm = c
                .0
                .get_alarm(pb::AlarmRef {
                    actor: Some(actor("counter", "alarmed")),
                })
                .await;
            let gone = |r: Result<_, tonic::Status>| {
                matches!(r, Err(s) if s.code() == tonic::Code::NotFound)
            };
            Ok((gone(reminder) && gone(alarm)).then_some(()))
        }
    })
    .await?;
    let mut client = client;
    assert_eq!(
        count(&mut client, "reminded").await?,
        1,
        "fired exactly once"
    );
    assert_eq!(
        count(&mut client, "alarmed").await?,
        1,
        "fired exactly once"
    );
    Ok(())
}

/// Threads that keep every core busy while it lives, so the daemon's main
/// task is as late as on a loaded host.
struct Busy {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Busy {
    fn start(threads: usize) -> Busy {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        for _ in 0..threads {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
        }
        Busy { stop }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_right_after_the_listening_line_is_a_graceful_stop() -> anyhow::Result<()> {
    // The handler must be in place before the daemon announces itself: a
    // supervisor may stop it the moment it is up, on a busy host too.
    let _busy = Busy::start(4);
    for _ in 0..10 {
        let dir = tempfile::tempdir()?;
        let mut daemon = Daemon::start(dir.path(), &[]).await?;
        let exit = daemon.terminate().await?;
        assert!(exit.success(), "exit {exit}: {}", daemon.log());
    }
    Ok(())
}

/// An actor whose app left while it was activating waits for an app to
/// come back, but not through a shutdown: no app comes back to a stopping
/// daemon, so its calls fail and the drain goes on instead of waiting out
/// the grace period (found with the TypeScript test kit, whose env stops
/// its app, then its daemon, right after a tell).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_does_not_wait_for_an_app_that_left_mid_activation() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut daemon = Daemon::start(
        dir.path(),
        &["--host-wait", "10m", "--shutdown-grace", "60s"],
    )
    .await?;
    let (mut app, _) =
        troupe_tests::RawApp::register(daemon.addr, vec![type_spec("counter")]).await?;
    let mut client = daemon.client().await?;
    client
        .0
        .tell(pb::TellRequest {
            actor: Some(actor("counter", "w1")),
            method: "incr".into(),
            delivery: pb::Delivery::BestEffort.into(),
            ..Default::default()
        })
        .await?;
    // The app sees the activation, then leaves without answering it.
    match app.recv().await?.and_then(|m| m.kind) {
        Some(pb::daemon_message::Kind::Activate(_)) => {}
        other => anyhow::bail!("expected Activate, got {other:?}"),
    }
    drop(app);
    // Bounded at 30 s, half the grace: a drain that waits for the app fails.
    let exit = daemon.terminate().await?;
    assert!(exit.success(), "exit {exit}: {}", daemon.log());
    assert!(
        !daemon.log().contains("grace period over"),
        "{}",
        daemon.log()
    );
    Ok(())
}
