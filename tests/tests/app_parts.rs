//! A large message of the app stream goes in pieces (`MessagePart`) to an
//! app that takes them, with other actors' work between the pieces, and a
//! large answer may come back in pieces: the real binary on 127.0.0.1 and a
//! raw app stream that reads only when the test says so.

use std::time::Duration;

use prost::Message as _;
use tonic::transport::Endpoint;
use troupe_proto::parts::{Parts, Reassembly};
use troupe_tests::*;

/// Under the daemon's default --max-payload-bytes (4 MiB), and well over
/// what the app's stream window below lets the daemon send unread.
const LARGE: usize = 3 * 1024 * 1024;

/// The name of a message's kind, for messages that must not print a
/// payload of megabytes.
fn kind(kind: Option<pb::daemon_message::Kind>) -> &'static str {
    troupe_sdk_core::app::kind_name(&pb::DaemonMessage { kind })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_turns_go_between_the_pieces_of_a_large_one_and_answers_come_back_in_pieces(
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &[]).await?;
    // Small windows, so that the daemon can send little of the large turn
    // before the app reads it.
    let channel = Endpoint::from_shared(daemon.url())?
        .initial_stream_window_size(256 * 1024)
        .initial_connection_window_size(512 * 1024)
        .connect()
        .await?;
    let mut register = register_message("parts-app", vec![type_spec("t")]);
    if let Some(pb::app_message::Kind::Register(r)) = register.kind.as_mut() {
        r.accepts_parts = true;
    }
    let mut app = RawApp::open_over(channel, register.encode_to_vec().into()).await?;
    match app.recv().await?.and_then(|m| m.kind) {
        Some(pb::daemon_message::Kind::Registered(r)) => {
            anyhow::ensure!(
                r.accepts_parts,
                "the daemon does not read answers in pieces"
            )
        }
        other => anyhow::bail!("expected Registered, got {other:?}"),
    }
    let client = daemon.client().await?;
    // Both actors active, so that a call to either is one turn.
    for id in ["small", "bulk"] {
        let mut caller = client.clone();
        let call = tokio::spawn(async move { caller.invoke_raw("t", id, "get", "{}").await });
        let turn = app.next_turn().await?;
        app.reply(turn.call_id, "0")?;
        within(WAIT, "a first call", call).await???;
    }

    let payload = json_string(LARGE);
    let mut caller = client.clone();
    let sent = payload.clone();
    let bulk = tokio::spawn(async move { caller.invoke_raw("t", "bulk", "echo", sent).await });
    let mut pieces = Reassembly::new(usize::MAX);
    match app.recv().await?.and_then(|m| m.kind) {
        Some(pb::daemon_message::Kind::Part(p)) if !p.last => {
            anyhow::ensure!(pieces.push(p)?.is_none(), "a first piece made a message")
        }
        other => anyhow::bail!("expected the large turn's first piece, got {}", kind(other)),
    }
    // The app reads nothing more until the small call's turn is on its way.
    let mut caller = client.clone();
    let small = tokio::spawn(async move { caller.invoke_raw("t", "small", "get", "{}").await });
    poll_until(WAIT, "the small call's turn to start", || {
        let daemon = &daemon;
        async move {
            let running = pb::ActivationStatus::Running as i32;
            let actors = daemon.actors().await?;
            Ok(actors
                .iter()
                .any(|a| a.status == running && a.actor.as_ref().is_some_and(|r| r.id == "small"))
                .then_some(()))
        }
    })
    .await?;

    let (mut small_turn, mut bulk_turn) = (None, None);
    while bulk_turn.is_none() {
        match app.recv().await?.and_then(|m| m.kind) {
            Some(pb::daemon_message::Kind::Part(p)) => {
                if let Some(whole) = pieces.push(p)? {
                    bulk_turn = pb::DaemonMessage::decode(whole)?.kind;
                }
            }
            Some(pb::daemon_message::Kind::Turn(t)) => small_turn = Some(t),
            other => anyhow::bail!("expected a piece or the small turn, got {}", kind(other)),
        }
    }
    let Some(small_turn) = small_turn else {
        anyhow::bail!("the small turn waited for every piece of the large one")
    };
    let Some(pb::daemon_message::Kind::Turn(bulk_turn)) = bulk_turn else {
        anyhow::bail!("the pieces made a {}, not a turn", kind(bulk_turn))
    };
    assert_eq!(
        bulk_turn.payload.as_ref().map(|p| p.data.len()),
        Some(LARGE)
    );

    // The large answer goes back in pieces, the small one whole between them.
    let answer = pb::AppMessage {
        kind: Some(pb::app_message::Kind::TurnResult(pb::TurnResult {
            call_id: bulk_turn.call_id,
            outcome: Some(pb::turn_result::Outcome::Reply(json_payload(
                payload.clone(),
            ))),
            ..Default::default()
        })),
    };
    let mut parts = Parts::of(answer);
    let mut sent_pieces = 0;
    while let Some(part) = parts.next_part() {
        app.send(pb::AppMessage {
            kind: Some(pb::app_message::Kind::Part(part)),
        })?;
        sent_pieces += 1;
        if sent_pieces == 2 {
            app.reply(small_turn.call_id, "1")?;
        }
    }
    assert!(sent_pieces > 2);
    let reply = within(Duration::from_secs(30), "the small call", small).await???;
    assert_eq!(reply, bytes::Bytes::from("1"));
    let reply = within(Duration::from_secs(30), "the large call", bulk).await???;
    assert!(reply == payload, "the large reply came back different");
    Ok(())
}
