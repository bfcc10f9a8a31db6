//! The app stream survives what the daemon and a careless app throw at it:
//! a reply too large for the daemon fails only its turn; answers come in
//! batches; thousands of actors idling out together leave the stream up.

use std::time::Duration;

use prost::Message as _;
use tonic::Code;
use troupe_tests::*;

/// A reply over `--max-payload-bytes` (4 MiB by default) and over what the
/// daemon's message limit used to be (twice that).
const OVERSIZE_REPLY: usize = 9 * 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reply_too_large_for_the_daemon_fails_its_turn_not_the_stream() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &[]).await?;
    let (mut app, _) = RawApp::register(daemon.addr, vec![type_spec("big")]).await?;
    let client = daemon.client().await?;

    let mut caller = client.clone();
    let call = tokio::spawn(async move { caller.invoke_raw("big", "a", "get", "{}").await });
    let turn = app.next_turn().await?;
    app.send(pb::AppMessage {
        kind: Some(pb::app_message::Kind::TurnResult(pb::TurnResult {
            call_id: turn.call_id,
            outcome: Some(pb::turn_result::Outcome::Reply(pb::Payload {
                data: vec![b'x'; OVERSIZE_REPLY].into(),
                content_type: pb::ContentType::Bytes as i32,
            })),
            ..Default::default()
        })),
    })?;
    let status = expect_code(
        within(WAIT, "the oversize call", call).await??,
        Code::ResourceExhausted,
    )?;
    assert!(
        status.message().contains("--max-payload-bytes"),
        "{}",
        status.message()
    );
    // The turn ran: no retry pushback, so no SDK resends the call and runs
    // it again.
    assert!(
        status.metadata().get("grpc-retry-pushback-ms").is_none(),
        "{status:?}"
    );

    // The same stream serves the next call.
    let mut caller = client.clone();
    let call = tokio::spawn(async move { caller.invoke_raw("big", "b", "get", "{}").await });
    let turn = app.next_turn().await?;
    app.reply(turn.call_id, "7")?;
    let reply = within(WAIT, "the next call", call).await???;
    assert_eq!(reply, bytes::Bytes::from("7"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn answers_sent_as_one_batch_each_reach_their_caller() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &[]).await?;
    let mut register = register_message("batching-app", vec![type_spec("b")]);
    if let Some(pb::app_message::Kind::Register(r)) = register.kind.as_mut() {
        r.accepts_batches = true;
    }
    let mut app = RawApp::open(daemon.addr, register.encode_to_vec().into()).await?;
    let client = daemon.client().await?;
    const CALLS: usize = 50;
    let calls: Vec<_> = (0..CALLS)
        .map(|i| {
            let mut caller = client.clone();
            tokio::spawn(async move { caller.invoke_raw("b", &i.to_string(), "get", "{}").await })
        })
        .collect();

    // Whatever the daemon sends, alone or batched, is answered in batches:
    // the activations together, then the turns together.
    let (mut activations, mut turns) = (Vec::new(), Vec::new());
    while turns.len() < CALLS {
        let message = app.recv().await?.and_then(|m| m.kind);
        let work = match message {
            Some(pb::daemon_message::Kind::Batch(batch)) => batch.messages,
            Some(pb::daemon_message::Kind::Registered(_)) => continue,
            kind => vec![pb::DaemonMessage { kind }],
        };
        for m in work {
            match m.kind {
                Some(pb::daemon_message::Kind::Activate(a)) => activations.push(a.call_id),
                Some(pb::daemon_message::Kind::Turn(t)) => turns.push((t.call_id, t.actor)),
                other => anyhow::bail!("unexpected {other:?}"),
            }
        }
        if activations.len() == CALLS {
            let answers = activations
                .drain(..)
                .map(|call_id| pb::AppMessage {
                    kind: Some(pb::app_message::Kind::Activated(pb::ActivateResult {
                        call_id,
                        ..Default::default()
                    })),
                })
                .collect();
            app.send(batch(answers))?;
        }
    }
    let answers = turns
        .iter()
        .map(|(call_id, actor)| pb::AppMessage {
            kind: Some(pb::app_message::Kind::TurnResult(pb::TurnResult {
                call_id: *call_id,
                outcome: Some(pb::turn_result::Outcome::Reply(json_payload(format!(
                    "\"{}\"",
                    actor.as_ref().map(|a| a.id.as_str()).unwrap_or_default()
                )))),
                ..Default::default()
            })),
        })
        .collect();
    app.send(batch(answers))?;
    for (i, call) in calls.into_iter().enumerate() {
        let reply = within(WAIT, "a batched answer", call).await???;
        assert_eq!(reply, bytes::Bytes::from(format!("\"{i}\"")));
    }
    Ok(())
}

fn batch(messages: Vec<pb::AppMessage>) -> pb::AppMessage {
    pb::AppMessage {
        kind: Some(pb::app_message::Kind::Batch(pb::AppBatch { messages })),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thousands_of_actors_idling_out_together_keep_the_app_stream_up() -> anyhow::Result<()> {
    const ACTORS: usize = 20_000;
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &["--idle-timeout", "1s", "--store", "memory"]).await?;
    // Answers every message alone: the case batching cannot help.
    let app = TestApp::attach(daemon.addr, vec![type_spec("counter")]).await?;
    let client = daemon.client().await?;
    let mut telling = tokio::task::JoinSet::new();
    for chunk in 0..64 {
        let mut client = client.clone();
        telling.spawn(async move {
            for i in (chunk..ACTORS).step_by(64) {
                client
                    .0
                    .tell(pb::TellRequest {
                        actor: Some(actor("counter", &format!("a-{i}"))),
                        method: "incr".into(),
                        ..Default::default()
                    })
                    .await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(told) = telling.join_next().await {
        told??;
    }
    // They all go idle within a second of each other.
    app.wait_for("every actor to idle out", Duration::from_secs(120), |e| {
        e.deactivations.len() >= ACTORS || e.stream_end.is_some()
    })
    .await?;
    let events = app.events();
    assert_eq!(
        events.stream_end, None,
        "the app stream ended: {:?}",
        events.stream_end
    );
    let not_idle = events
        .deactivations
        .iter()
        .filter(|(_, reason)| *reason != Reason::Idle)
        .count();
    assert_eq!(not_idle, 0, "actors deactivated other than by idling out");
    Ok(())
}
