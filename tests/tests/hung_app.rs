//! An app that never answers its turns cannot hold the daemon: its turns
//! time out (the caller gets DEADLINE_EXCEEDED, the place under the pending
//! bounds is freed, the actor is deactivated with reason TURN_TIMEOUT and a
//! late answer is ignored), and one type's calls can take at most its own
//! share of the daemon-wide bound.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tonic::Code;
use troupe_tests::{expect_code, pb, poll_until, type_spec, Daemon, RawApp, Reason, TestApp, WAIT};

/// What the hung app saw.
#[derive(Debug, Default)]
struct Seen {
    /// Turns it was sent (and never answered).
    turns: Vec<pb::Turn>,
    deactivations: Vec<(String, i32)>,
}

/// Answers activations and deactivations, never a turn; until `stop`.
fn hung_app(mut app: RawApp, seen: Arc<Mutex<Seen>>, changed: Arc<Notify>) {
    tokio::spawn(async move {
        loop {
            let Ok(Some(message)) = app.recv().await else {
                return;
            };
            let answer = match message.kind {
                Some(pb::daemon_message::Kind::Activate(a)) => {
                    pb::app_message::Kind::Activated(pb::ActivateResult {
                        call_id: a.call_id,
                        error: None,
                        changes: Vec::new(),
                        ..Default::default()
                    })
                }
                Some(pb::daemon_message::Kind::Deactivate(d)) => {
                    let id = d.actor.map(|a| a.id).unwrap_or_default();
                    if let Ok(mut seen) = seen.lock() {
                        seen.deactivations.push((id, d.reason));
                    }
                    changed.notify_waiters();
                    pb::app_message::Kind::Deactivated(pb::DeactivateResult {
                        call_id: d.call_id,
                        changes: Vec::new(),
                    })
                }
                Some(pb::daemon_message::Kind::Turn(t)) => {
                    if let Ok(mut seen) = seen.lock() {
                        seen.turns.push(t);
                    }
                    changed.notify_waiters();
                    continue;
                }
                _ => continue,
            };
            if app.send(pb::AppMessage { kind: Some(answer) }).is_err() {
                return;
            }
        }
    });
}

fn hung_type(turn_timeout_ms: u64) -> pb::ActorTypeSpec {
    pb::ActorTypeSpec {
        name: "hung".into(),
        turn_timeout_ms,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_turn_times_out_frees_its_place_and_retires_its_actor() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(
        dir.path(),
        &["--max-pending-calls", "50", "--max-pending-per-type", "50"],
    )
    .await?;
    let (raw, _) = RawApp::register(daemon.addr, vec![hung_type(300)]).await?;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let changed = Arc::new(Notify::new());
    hung_app(raw, seen.clone(), changed.clone());
    let _counter = TestApp::attach(daemon.addr, vec![type_spec("counter")]).await?;
    let client = daemon.client().await?;

    // Fifty calls take every place the daemon has, and their turns hang.
    let calls: Vec<_> = (0..50)
        .map(|i| {
            let mut c = client.clone();
            tokio::spawn(async move { c.invoke_raw("hung", &format!("h{i}"), "work", "1").await })
        })
        .collect();
    for call in calls {
        let status = expect_code(call.await?, Code::DeadlineExceeded)?;
        assert!(
            status.message().contains("turn timeout"),
            "{}",
            status.message()
        );
    }
    // Their places are free again: another type is served at once.
    let mut counter = client.clone();
    assert_eq!(counter.incr("counter", "c1", 1).await?, 1);
    // Each hung actor was deactivated through its app, saying why.
    poll_until(WAIT, "50 TURN_TIMEOUT deactivations", || {
        let seen = seen.clone();
        async move {
            let seen = seen.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
            let retired = seen
                .deactivations
                .iter()
                .filter(|(_, r)| *r == Reason::TurnTimeout as i32)
                .count();
            Ok((retired == 50).then_some(()))
        }
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_answer_to_a_timed_out_turn_is_ignored() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &[]).await?;
    let (mut app, _) = RawApp::register(daemon.addr, vec![hung_type(200)]).await?;
    let mut client = daemon.client().await?;
    let mut caller = client.clone();
    let call = tokio::spawn(async move { caller.invoke_raw("hung", "late", "work", "1").await });
    let turn = app.next_turn().await?;
    expect_code(call.await?, Code::DeadlineExceeded)?;
    // The daemon retires the actor; then the app answers the old turn.
    let deactivate = app.recv().await?.and_then(|m| m.kind);
    let Some(pb::daemon_message::Kind::Deactivate(d)) = deactivate else {
        anyhow::bail!("expected a Deactivate, got {deactivate:?}");
    };
    assert_eq!(d.reason, Reason::TurnTimeout as i32);
    app.reply(turn.call_id, "\"too late\"")?;
    app.send(pb::AppMessage {
        kind: Some(pb::app_message::Kind::Deactivated(pb::DeactivateResult {
            call_id: d.call_id,
            changes: Vec::new(),
        })),
    })?;
    // The stream is still up: the next call activates the actor anew and
    // its turn reaches the same app.
    let next = tokio::spawn(async move { client.invoke_raw("hung", "late", "work", "2").await });
    let turn = app.next_turn().await?;
    app.reply(turn.call_id, "\"fresh\"")?;
    assert_eq!(&next.await??[..], b"\"fresh\"");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_stuck_type_takes_at_most_its_share_of_the_daemon() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    // Per type: half of the daemon's 50, by default.
    let daemon = Daemon::start(dir.path(), &["--max-pending-calls", "50"]).await?;
    let (raw, _) = RawApp::register(daemon.addr, vec![hung_type(60_000)]).await?;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let changed = Arc::new(Notify::new());
    hung_app(raw, seen.clone(), changed.clone());
    let _counter = TestApp::attach(daemon.addr, vec![type_spec("counter")]).await?;
    let client = daemon.client().await?;
    let calls: Vec<_> = (0..30)
        .map(|i| {
            let mut c = client.clone();
            tokio::spawn(async move {
                let id = format!("s{i}");
                let call = c.invoke_raw("hung", &id, "work", "1");
                tokio::time::timeout(Duration::from_secs(5), call).await
            })
        })
        .collect();
    poll_until(WAIT, "25 turns held by the stuck app", || {
        let seen = seen.clone();
        async move {
            let seen = seen.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
            Ok((seen.turns.len() == 25).then_some(()))
        }
    })
    .await?;
    let mut counter = client.clone();
    assert_eq!(counter.incr("counter", "c1", 1).await?, 1);
    let mut refused = 0;
    for call in calls {
        match call.await? {
            Ok(Err(status)) if status.code() == Code::ResourceExhausted => {
                assert!(status.message().contains("'hung'"), "{}", status.message());
                refused += 1;
            }
            Ok(other) => anyhow::bail!("a call past the type's share: {other:?}"),
            Err(_) => {} // still held by the stuck app
        }
    }
    assert_eq!(refused, 5);
    Ok(())
}
