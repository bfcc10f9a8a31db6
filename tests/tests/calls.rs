//! Call chains at the protocol level, against the real daemon: what a Turn
//! carries (its chain, the caller's deadline) and what the daemon answers
//! when a chain comes back to an actor that waits on it. The SDK tests
//! (sdks/*/tests) cover the same rules through actor code.

use std::time::{Duration, Instant};

use tonic::Code;
use troupe_tests::*;

/// An Invoke made from inside a turn: passes the turn's chain on.
fn nested_invoke(turn: &pb::Turn, ty: &str, id: &str) -> tonic::Request<pb::InvokeRequest> {
    let mut request = tonic::Request::new(pb::InvokeRequest {
        actor: Some(actor(ty, id)),
        method: "ping".into(),
        payload: Some(json_payload("null")),
        chain: turn.chain.clone(),
        ..Default::default()
    });
    request.set_timeout(Duration::from_secs(20));
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn turns_carry_their_chain_and_a_cycle_fails_at_once() -> anyhow::Result<()> {
    let (_dir, _daemon, mut app, client) = daemon_with_raw_app(vec![type_spec("node")]).await?;

    // The outer call, with a deadline the turn must learn.
    let mut outer_client = client.clone();
    let outer = tokio::spawn(async move {
        let mut request = tonic::Request::new(pb::InvokeRequest {
            actor: Some(actor("node", "a")),
            method: "ping".into(),
            payload: Some(json_payload("null")),
            ..Default::default()
        });
        request.set_timeout(Duration::from_secs(30));
        outer_client.0.invoke(request).await
    });
    let turn_a = app.next_turn().await?;
    assert_eq!(chain_actors(&turn_a), ["node/a"], "a new chain starts at a");
    let chain_id = turn_a
        .chain
        .as_ref()
        .map(|c| c.id.clone())
        .unwrap_or_default();
    assert!(!chain_id.is_empty());
    let now = unix_now_ms();
    assert!(
        turn_a.deadline_unix_ms > now + 25_000 && turn_a.deadline_unix_ms <= now + 30_000,
        "the caller's 30 s deadline reaches the turn: {} vs now {now}",
        turn_a.deadline_unix_ms
    );

    // a calls b from inside its turn.
    let mut a_client = client.clone();
    let a_calls_b = tokio::spawn({
        let request = nested_invoke(&turn_a, "node", "b");
        async move { a_client.0.invoke(request).await }
    });
    let turn_b = app.next_turn().await?;
    assert_eq!(chain_actors(&turn_b), ["node/a", "node/b"]);
    assert_eq!(
        turn_b.chain.as_ref().map(|c| c.id.as_str()),
        Some(chain_id.as_str())
    );

    // b calls a back: a waits on this very chain, and the type is not
    // re-entrant, so the daemon refuses at once instead of waiting.
    let started = Instant::now();
    let mut b_client = client.clone();
    let refused = b_client.0.invoke(nested_invoke(&turn_b, "node", "a")).await;
    let took = started.elapsed();
    let status = expect_code(refused, Code::FailedPrecondition)?;
    assert!(
        status
            .message()
            .contains("deadlock: node/a → node/b → node/a"),
        "{}",
        status.message()
    );
    assert!(took < Duration::from_secs(1), "refused after {took:?}");
    println!("a cycle A -> B -> A was refused {took:?} after the call back");

    // The chain unwinds normally.
    app.reply(turn_b.call_id, "\"b\"")?;
    let from_b = a_calls_b.await??.into_inner();
    assert_eq!(from_b.payload.map(|p| p.data).unwrap_or_default(), "\"b\"");
    app.reply(turn_a.call_id, "\"a\"")?;
    assert_eq!(
        outer
            .await??
            .into_inner()
            .payload
            .map(|p| p.data)
            .unwrap_or_default(),
        "\"a\""
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reentrant_type_gets_the_nested_turn_while_its_first_waits() -> anyhow::Result<()> {
    let (_dir, _daemon, mut app, client) =
        daemon_with_raw_app(vec![reentrant_type("node")]).await?;
    let mut outer_client = client.clone();
    let outer =
        tokio::spawn(async move { outer_client.invoke_raw("node", "a", "ping", "null").await });
    let turn_a = app.next_turn().await?;
    let mut a_client = client.clone();
    let a_calls_b = tokio::spawn({
        let request = nested_invoke(&turn_a, "node", "b");
        async move { a_client.0.invoke(request).await }
    });
    let turn_b = app.next_turn().await?;
    let mut b_client = client.clone();
    let b_calls_a = tokio::spawn({
        let request = nested_invoke(&turn_b, "node", "a");
        async move { b_client.0.invoke(request).await }
    });
    // a's first turn has not answered, yet its nested turn arrives.
    let nested = app.next_turn().await?;
    assert_eq!(nested.actor, Some(actor("node", "a")));
    assert_eq!(chain_actors(&nested), ["node/a", "node/b", "node/a"]);
    app.reply(nested.call_id, "1")?;
    assert_eq!(
        b_calls_a
            .await??
            .into_inner()
            .payload
            .map(|p| p.data)
            .unwrap_or_default(),
        "1"
    );
    app.reply(turn_b.call_id, "2")?;
    assert_eq!(
        a_calls_b
            .await??
            .into_inner()
            .payload
            .map(|p| p.data)
            .unwrap_or_default(),
        "2"
    );
    // b's turn ended while a's still runs: b's chain names a, but it no
    // longer lets a call in beside a's turn (tests/chains.rs has the rest).
    let mut late_client = client.clone();
    let mut late = nested_invoke(&turn_b, "node", "a");
    late.set_timeout(Duration::from_secs(5));
    let status = expect_code(late_client.0.invoke(late).await, Code::FailedPrecondition)?;
    assert!(status.message().contains("ended"), "{}", status.message());
    app.reply(turn_a.call_id, "3")?;
    assert_eq!(outer.await??, "3");
    Ok(())
}

fn unix_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tell_starts_a_chain_of_its_own() -> anyhow::Result<()> {
    let (_dir, _daemon, mut app, client) = daemon_with_raw_app(vec![type_spec("node")]).await?;
    let mut outer_client = client.clone();
    let outer =
        tokio::spawn(async move { outer_client.invoke_raw("node", "a", "ping", "null").await });
    let turn_a = app.next_turn().await?;
    // A tell from the turn of node/a: a goes on, it does not wait on b, so
    // b's turn must not count a as waiting (a call back to a is no cycle).
    let mut a_client = client.clone();
    a_client
        .0
        .tell(pb::TellRequest {
            actor: Some(actor("node", "b")),
            method: "ping".into(),
            payload: Some(json_payload("null")),
            chain: turn_a.chain.clone(),
            ..Default::default()
        })
        .await?;
    let turn = app.next_turn().await?;
    assert_eq!(chain_actors(&turn), ["node/b"]);
    app.reply(turn.call_id, "null")?;
    app.reply(turn_a.call_id, "null")?;
    assert_eq!(outer.await??, "null");
    Ok(())
}
