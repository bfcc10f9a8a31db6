//! Chains the daemon issued, against the real daemon: a call chain lets a
//! call run nested in a re-entrant actor's running turn, so the daemon
//! honours only a chain it issued to a turn still running (its token), and
//! refuses any other with FAILED_PRECONDITION, which runs nowhere. A → B → A
//! with issued chains, and B's chain stale once B's turn ends, are in
//! tests/calls.rs; across daemons in tests/cluster_chains.rs.
//!
//! The app here is a [`RawApp`]: a turn stays open until the test answers
//! it, and every turn the daemon starts arrives on the one stream in order,
//! so "nothing ran beside the held turn" is what the next turn on the stream
//! says, with no sleeps.

use std::time::Duration;

use tonic::Code;
use troupe_tests::*;

fn invoke_with(id: &str, method: &str, chain: Option<pb::CallChain>) -> pb::InvokeRequest {
    pb::InvokeRequest {
        actor: Some(actor("node", id)),
        method: method.into(),
        payload: Some(json_payload("null")),
        chain,
        ..Default::default()
    }
}

/// The attack of issue 16: a client outside any turn sends a chain naming a
/// re-entrant actor while that actor's turn runs. Before chains were
/// issued, its call nested in the running turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forged_chain_never_runs_beside_a_running_turn() -> anyhow::Result<()> {
    let (_dir, _daemon, mut app, client) =
        daemon_with_raw_app(vec![reentrant_type("node")]).await?;

    // A turn of h that ends: the chain issued to it goes stale.
    let mut c = client.clone();
    let first = tokio::spawn(async move { c.invoke_raw("node", "h", "ping", "null").await });
    let ended_turn = app.next_turn().await?;
    app.reply(ended_turn.call_id, "0")?;
    first.await??;
    let ended = ended_turn.chain.clone();

    // h's next turn is held open: the app does not answer it yet.
    let mut c = client.clone();
    let held = tokio::spawn(async move { c.invoke_raw("node", "h", "hold", "null").await });
    let held_turn = app.next_turn().await?;
    assert_eq!(held_turn.name, "hold");
    let live = held_turn
        .chain
        .clone()
        .ok_or_else(|| anyhow::anyhow!("the held turn carries no chain"))?;
    assert_eq!(chain_actors(&held_turn), ["node/h"]);

    let forged = [
        (
            "no token",
            pb::CallChain {
                token: Default::default(),
                ..live.clone()
            },
        ),
        (
            "a made-up token",
            pb::CallChain {
                token: vec![0x5a; 24].into(),
                ..live.clone()
            },
        ),
        (
            "the token of an ended turn",
            ended.ok_or_else(|| anyhow::anyhow!("the first turn carries no chain"))?,
        ),
        (
            "a live token on another chain",
            pb::CallChain {
                actors: vec![actor("node", "x"), actor("node", "h")],
                ..live.clone()
            },
        ),
    ];
    let mut c = client.clone();
    for (what, chain) in forged {
        // Bounded: a forged call that is honoured waits on the held turn.
        let mut request = tonic::Request::new(invoke_with("h", "forged", Some(chain.clone())));
        request.set_timeout(Duration::from_secs(5));
        let refused = c.0.invoke(request).await;
        let status = expect_code(refused, Code::FailedPrecondition)
            .map_err(|e| e.context(format!("an Invoke with {what}")))?;
        assert!(
            status.message().contains("call chain"),
            "{what}: {}",
            status.message()
        );
        println!("an Invoke with {what} was refused: {}", status.message());
        let refused =
            c.0.tell(pb::TellRequest {
                actor: Some(actor("node", "h")),
                method: "forged".into(),
                payload: Some(json_payload("null")),
                chain: Some(chain),
                ..Default::default()
            })
            .await;
        expect_code(refused, Code::FailedPrecondition)
            .map_err(|e| e.context(format!("a Tell with {what}")))?;
    }

    // The chain issued to the held turn, from that turn, does nest: the
    // next turn on the stream is this one, so no forged call ran before it.
    let mut c = client.clone();
    let nested = tokio::spawn(async move {
        let mut request = tonic::Request::new(invoke_with("h", "nested", Some(live)));
        request.set_timeout(Duration::from_secs(20));
        c.0.invoke(request).await
    });
    let nested_turn = app.next_turn().await?;
    assert_eq!(
        (nested_turn.name.as_str(), chain_actors(&nested_turn)),
        ("nested", vec!["node/h".to_owned(), "node/h".to_owned()]),
        "a forged call reached the app"
    );
    app.reply(nested_turn.call_id, "1")?;
    nested.await??;
    app.reply(held_turn.call_id, "2")?;
    assert_eq!(held.await??, "2");
    Ok(())
}

/// Reminder turns are issued chains too, so calls from them carry the
/// chain on, as calls from any turn do.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reminder_turn_can_call_with_its_chain() -> anyhow::Result<()> {
    let (_dir, _daemon, mut app, mut client) = daemon_with_raw_app(vec![type_spec("node")]).await?;
    client
        .0
        .set_reminder(pb::SetReminderRequest {
            actor: Some(actor("node", "r")),
            name: "wake".into(),
            ..Default::default()
        })
        .await?;
    let fired = app.next_turn().await?;
    assert_eq!(fired.kind, pb::TurnKind::Reminder as i32);
    assert_eq!(chain_actors(&fired), ["node/r"]);

    let mut c = client.clone();
    let call = {
        let request = invoke_with("x", "ping", fired.chain.clone());
        tokio::spawn(async move { c.0.invoke(request).await })
    };
    let turn_x = app.next_turn().await?;
    assert_eq!(chain_actors(&turn_x), ["node/r", "node/x"]);
    app.reply(turn_x.call_id, "1")?;
    call.await??;
    app.reply(fired.call_id, "null")?;
    Ok(())
}
