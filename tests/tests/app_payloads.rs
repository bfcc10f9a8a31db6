//! A turn or an activation too large for an app fails that work, never the
//! app's stream: the real binary on 127.0.0.1 and raw app streams.

use std::time::Duration;

use anyhow::bail;
use troupe_tests::*;

/// A JSON string of exactly `len` bytes, quotes included.
fn json_string(len: usize) -> Vec<u8> {
    let mut data = vec![b'x'; len];
    data[0] = b'"';
    data[len - 1] = b'"';
    data
}

/// RESOURCE_EXHAUSTED whose message names every one of `words`.
fn exhausted<T: std::fmt::Debug>(
    result: Result<T, tonic::Status>,
    words: &[&str],
) -> anyhow::Result<String> {
    let status = expect_code(result, tonic::Code::ResourceExhausted)?;
    let message = status.message().to_owned();
    for word in words {
        assert!(message.contains(word), "{word:?} not in: {message}");
    }
    Ok(message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_activation_too_large_to_send_fails_its_calls_not_the_stream() -> anyhow::Result<()> {
    // The app declares no limit, so the daemon's own applies: twice
    // --max-payload-bytes plus 64 KiB. Stored state has no such bound (each
    // value is under --max-payload-bytes, their number is not), so an
    // activation can outgrow it; sending it would end the stream.
    const VALUE: usize = 1000;
    const KEYS: usize = 100;
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &["--max-payload-bytes", "1024"]).await?;
    let (mut app, _) = RawApp::register(daemon.addr, vec![type_spec("big")]).await?;
    let client = daemon.client().await?;

    let mut caller = client.clone();
    let call = tokio::spawn(async move { caller.invoke_raw("big", "a", "fill", "{}").await });
    let turn = app.next_turn().await?;
    app.send(pb::AppMessage {
        kind: Some(pb::app_message::Kind::TurnResult(pb::TurnResult {
            call_id: turn.call_id,
            outcome: Some(pb::turn_result::Outcome::Reply(json_payload("null"))),
            changes: (0..KEYS)
                .map(|i| pb::StateChange {
                    key: format!("k{i}"),
                    op: Some(pb::state_change::Op::Set(vec![b'v'; VALUE].into())),
                })
                .collect(),
            ..Default::default()
        })),
    })?;
    within(WAIT, "the filling call", call).await???;

    let mut admin = daemon.admin().await?;
    let deactivate = tokio::spawn(async move {
        admin
            .deactivate_actor(pb::DeactivateActorRequest {
                actor: Some(actor("big", "a")),
            })
            .await
    });
    match app.recv().await?.and_then(|m| m.kind) {
        Some(pb::daemon_message::Kind::Deactivate(d)) => app.send(pb::AppMessage {
            kind: Some(pb::app_message::Kind::Deactivated(pb::DeactivateResult {
                call_id: d.call_id,
                changes: Vec::new(),
            })),
        })?,
        other => bail!("expected Deactivate, got {other:?}"),
    }
    within(WAIT, "the deactivation", deactivate).await???;

    // Activating it again would send all of its state in one message.
    let result = within(
        WAIT,
        "the call that needs the large activation",
        client.clone().invoke_raw("big", "a", "get", "{}"),
    )
    .await?;
    exhausted(result, &["activating big/a", "--max-payload-bytes"])?;

    // The stream goes on: another actor of the same app is served.
    let mut caller = client.clone();
    let call = tokio::spawn(async move { caller.invoke_raw("big", "b", "get", "{}").await });
    let turn = app.next_turn().await?;
    app.reply(turn.call_id, "7")?;
    let reply = within(WAIT, "the next call", call).await???;
    assert_eq!(reply, bytes::Bytes::from("7"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_to_an_app_stay_under_its_declared_limit() -> anyhow::Result<()> {
    use prost::Message as _;
    const LIMIT: usize = 128 * 1024;
    // Small enough to batch (under 64 KiB), together more than the app's
    // HTTP/2 stream window, so that turns queue while it does not read.
    const CALLS: usize = 150;
    const PAYLOAD: usize = 30 * 1024;
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &[]).await?;
    let mut register = register_message("limited-app", vec![type_spec("b")]);
    if let Some(pb::app_message::Kind::Register(r)) = register.kind.as_mut() {
        r.accepts_batches = true;
        r.max_receive_bytes = LIMIT as u64;
    }
    let mut app = RawApp::open(daemon.addr, register.encode_to_vec().into()).await?;
    let client = daemon.client().await?;
    let calls: Vec<_> = (0..CALLS)
        .map(|i| {
            let mut caller = client.clone();
            tokio::spawn(async move {
                caller
                    .invoke_raw("b", &i.to_string(), "echo", json_string(PAYLOAD))
                    .await
            })
        })
        .collect();

    let (mut activated, mut turns, mut largest, mut widest) = (0, Vec::new(), 0, 0);
    while turns.len() < CALLS {
        let Some(message) = app.recv().await? else {
            bail!("the daemon ended the stream");
        };
        largest = largest.max(message.encoded_len());
        let work = match message.kind {
            Some(pb::daemon_message::Kind::Batch(batch)) => batch.messages,
            Some(pb::daemon_message::Kind::Registered(_)) => continue,
            kind => vec![pb::DaemonMessage { kind }],
        };
        widest = widest.max(work.len());
        let mut answers = Vec::new();
        for m in work {
            match m.kind {
                Some(pb::daemon_message::Kind::Activate(a)) => {
                    activated += 1;
                    answers.push(pb::AppMessage {
                        kind: Some(pb::app_message::Kind::Activated(pb::ActivateResult {
                            call_id: a.call_id,
                            ..Default::default()
                        })),
                    });
                }
                Some(pb::daemon_message::Kind::Turn(t)) => turns.push(t.call_id),
                other => bail!("unexpected {other:?}"),
            }
        }
        for answer in answers {
            app.send(answer)?;
        }
        if activated == CALLS && turns.is_empty() {
            // Let the turns pile up behind the app's full stream window.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    assert!(largest <= LIMIT, "a message of {largest} bytes");
    assert!(
        widest > 1,
        "no batch was sent; the test did not test batching"
    );
    for call_id in turns {
        app.send(pb::AppMessage {
            kind: Some(pb::app_message::Kind::TurnResult(pb::TurnResult {
                call_id,
                outcome: Some(pb::turn_result::Outcome::Reply(json_payload("1"))),
                ..Default::default()
            })),
        })?;
    }
    for call in calls {
        within(WAIT, "a call", call).await???;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_limit_too_small_for_any_message_is_refused_at_registration() -> anyhow::Result<()>
{
    use prost::Message as _;
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &[]).await?;
    let mut register = register_message("tiny-app", vec![type_spec("t")]);
    if let Some(pb::app_message::Kind::Register(r)) = register.kind.as_mut() {
        r.max_receive_bytes = 1000;
    }
    let refused = RawApp::open(daemon.addr, register.encode_to_vec().into()).await;
    let status = expect_code(refused, tonic::Code::InvalidArgument)?;
    assert!(
        status.message().contains("max_receive_bytes") && status.message().contains("65536"),
        "{}",
        status.message()
    );
    Ok(())
}
