//! A turn whose caller stops waiting (its deadline passed, or it cancelled
//! the call) is cancelled: an app that set `Register.accepts_cancel` gets
//! one `CancelTurn` for it, the failure it answers is not recorded under the
//! call's idempotency key (a retry runs the method again), and the actor's
//! next turn runs at once instead of after the turn timeout. An app that did
//! not ask gets no `CancelTurn`.

use std::time::Duration;

use tonic::Code;
use troupe_tests::scrape::{metrics_addr, scrape};
use troupe_tests::*;

const TY: &str = "slow";

/// A raw app hosting `TY` that asked for `CancelTurn` or not.
async fn app(daemon: &Daemon, accepts_cancel: bool) -> anyhow::Result<RawApp> {
    let register = if accepts_cancel {
        register_cancelling
    } else {
        register_message
    };
    let channel = daemon.channel().await?;
    Ok(
        RawApp::register_as(channel, register("cancel-test", vec![type_spec(TY)]))
            .await?
            .0,
    )
}

/// Invokes `method` of `TY/id`, giving up after `timeout`.
async fn call_within(
    client: &mut Client,
    id: &str,
    key: &str,
    timeout: Duration,
) -> Result<pb::InvokeResponse, tonic::Status> {
    let mut request = tonic::Request::new(pb::InvokeRequest {
        actor: Some(actor(TY, id)),
        method: "work".into(),
        payload: Some(json_payload("[]")),
        idempotency_key: key.into(),
        ..Default::default()
    });
    request.set_timeout(timeout);
    Ok(client.0.invoke(request).await?.into_inner())
}

/// Answers turn `call_id` as an SDK does when its handler was stopped.
fn answer_cancelled(app: &RawApp, call_id: u64) -> anyhow::Result<()> {
    app.send(pb::AppMessage {
        kind: Some(pb::app_message::Kind::TurnResult(pb::TurnResult {
            call_id,
            outcome: Some(pb::turn_result::Outcome::Error(pb::ActorFailure {
                r#type: "CancelledError".into(),
                message: "the caller stopped waiting".into(),
                ..Default::default()
            })),
            ..Default::default()
        })),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_whose_caller_left_is_cancelled_once_and_its_key_stays_unanswered(
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &["--metrics-listen", "127.0.0.1:0"]).await?;
    let mut app = app(&daemon, true).await?;
    let client = daemon.client().await?;

    // The daemon answers DEADLINE_EXCEEDED 1% ahead of the deadline
    // (`call_deadline`), but this tonic client cuts the call off itself at
    // the full deadline with CANCELLED ("Timeout expired"). Which comes
    // first is a race the daemon's 10 ms lost once in CI at 1 s; either is
    // the caller's deadline passing, as the SDKs' core reads it too.
    let left = {
        let mut client = client.clone();
        tokio::spawn(
            async move { call_within(&mut client, "a", "job-1", Duration::from_secs(1)).await },
        )
    };
    let turn = app.next_turn().await?;
    let status = within(WAIT, "the caller's deadline", left)
        .await??
        .err()
        .map(|s| (s.code(), s.message().to_owned()));
    let deadline_passed = match &status {
        Some((Code::DeadlineExceeded, _)) => true,
        Some((Code::Cancelled, message)) => message == "Timeout expired",
        _ => false,
    };
    assert!(deadline_passed, "{status:?}");
    match app.recv().await?.and_then(|m| m.kind) {
        Some(pb::daemon_message::Kind::Cancel(cancel)) => assert_eq!(cancel.call_id, turn.call_id),
        other => anyhow::bail!("expected CancelTurn for the turn, got {other:?}"),
    }
    answer_cancelled(&app, turn.call_id)?;

    // The retry with the same key runs the method: the cancelled turn's
    // failure was not its answer. It is also the next message: one cancel.
    let retry = {
        let mut client = client.clone();
        tokio::spawn(async move { call_within(&mut client, "a", "job-1", WAIT).await })
    };
    let again = app.next_turn().await?;
    assert_eq!(again.name, "work");
    app.reply(again.call_id, "\"done\"")?;
    let reply = within(WAIT, "the retry", retry).await??;
    assert_eq!(
        reply.map(|r| r.payload.map(|p| p.data))?,
        Some("\"done\"".into())
    );

    let addr = metrics_addr(&daemon.log()).ok_or_else(|| anyhow::anyhow!("no metrics address"))?;
    let metrics = scrape(addr).await?;
    assert_eq!(
        metrics.sum("troupe_turns_cancelled_total", &[("actor_type", TY)]),
        1.0,
        "{}",
        metrics.text
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_that_did_not_ask_gets_no_cancel() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &[]).await?;
    let mut app = app(&daemon, false).await?;
    let client = daemon.client().await?;

    let left = {
        let mut client = client.clone();
        tokio::spawn(
            async move { call_within(&mut client, "a", "", Duration::from_millis(100)).await },
        )
    };
    let turn = app.next_turn().await?;
    let _ = within(WAIT, "the caller's deadline", left).await??;
    // Not a wait for anything: long enough for several sweeps (every 100 ms
    // to 1 s) to have found the caller gone, had they been looking.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let other = {
        let mut client = client.clone();
        tokio::spawn(async move { call_within(&mut client, "b", "", WAIT).await })
    };
    let next = app.next_turn().await?;
    assert_eq!(
        next.actor.map(|a| a.id).as_deref(),
        Some("b"),
        "no CancelTurn came first"
    );
    app.reply(next.call_id, "1")?;
    within(WAIT, "the other call", other)
        .await??
        .map_err(anyhow::Error::new)?;
    app.reply(turn.call_id, "1")?;
    Ok(())
}

/// A call forwarded to the daemon that owns the actor: when its caller
/// cancels it, the non-owner tells the owner over their link
/// (`LinkCancel`), and the owner's app gets `CancelTurn`. Needs PostgreSQL
/// (`TROUPE_TEST_POSTGRES`), as tests/tests/cluster.rs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forwarded_call_whose_caller_left_is_cancelled_on_its_owner() -> anyhow::Result<()> {
    let Some(mut cluster) = cluster_fixture::Cluster::start("forwarded_cancel", 2).await? else {
        return Ok(());
    };
    let [mut app1, mut app2] = cluster
        .raw_apps_on_two_as(type_spec(TY), register_cancelling)
        .await?;
    let client = cluster.member("d1")?.client.clone();
    // An actor d2 owns, called through d1.
    let mut owned_by_d2 = None;
    for i in 0..200 {
        let id = format!("f{i}");
        let call = {
            let (mut client, id) = (client.clone(), id.clone());
            tokio::spawn(async move { call_within(&mut client, &id, "", WAIT).await })
        };
        let (app, turn) = tokio::select! {
            turn = app1.next_turn() => (&app1, turn?),
            turn = app2.next_turn() => (&app2, turn?),
        };
        app.reply(turn.call_id, "null")?;
        within(WAIT, "the call", call)
            .await??
            .map_err(anyhow::Error::new)?;
        if std::ptr::eq(app, &app2) {
            owned_by_d2 = Some(id);
            break;
        }
    }
    let Some(id) = owned_by_d2 else {
        anyhow::bail!("200 actors and none owned by d2");
    };
    // No deadline (the owner would see that pass itself): the caller
    // cancels, which only d1 sees.
    let left = {
        let mut client = client.clone();
        tokio::spawn(async move { call_within(&mut client, &id, "", WAIT).await })
    };
    let turn = app2.next_turn().await?;
    left.abort();
    match app2.recv().await?.and_then(|m| m.kind) {
        Some(pb::daemon_message::Kind::Cancel(cancel)) => assert_eq!(cancel.call_id, turn.call_id),
        other => anyhow::bail!("expected CancelTurn on the owner, got {other:?}"),
    }
    answer_cancelled(&app2, turn.call_id)?;
    Ok(())
}
