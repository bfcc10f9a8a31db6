//! Chains the daemons issued, across two daemons: A on d1 calls B on d2,
//! which calls A back. d1 checks the chain issued to A's turn and forwards
//! the call over the authenticated link; d2 issues B's turn a chain of its
//! own, checks it when B calls, and d1 takes the forwarded call back into
//! A as the peer's. A daemon does not honour another's chain sent to it by
//! a caller.
//!
//! Needs PostgreSQL (`TROUPE_TEST_POSTGRES`), as tests/tests/cluster.rs.

use std::time::Duration;

use anyhow::{bail, Context};
use tonic::Code;
use troupe_tests::cluster_fixture::*;
use troupe_tests::*;

fn invoke_with(id: &str, chain: Option<pb::CallChain>) -> tonic::Request<pb::InvokeRequest> {
    let mut request = tonic::Request::new(pb::InvokeRequest {
        actor: Some(actor("node", id)),
        method: "ping".into(),
        payload: Some(json_payload("null")),
        chain,
        ..Default::default()
    });
    request.set_timeout(Duration::from_secs(20));
    request
}

/// The ids of one actor each daemon owns: `node/p<i>` called through d1
/// until each app has had a turn (each answered at once).
async fn one_on_each(client: &Client, apps: &mut [RawApp; 2]) -> anyhow::Result<[String; 2]> {
    let mut found: [Option<String>; 2] = [None, None];
    for i in 0..200 {
        let id = format!("p{i}");
        let mut c = client.clone();
        let call = {
            let request = invoke_with(&id, None);
            tokio::spawn(async move { c.0.invoke(request).await })
        };
        let [one, two] = &mut *apps;
        // Which app gets the turn says which daemon owns the actor.
        let (owner, turn) = tokio::select! {
            turn = one.next_turn() => (0, turn?),
            turn = two.next_turn() => (1, turn?),
        };
        apps[owner].reply(turn.call_id, "null")?;
        call.await??;
        found[owner].get_or_insert(id);
        if let [Some(a), Some(b)] = &found {
            return Ok([a.clone(), b.clone()]);
        }
    }
    bail!("200 actors and still not one on each daemon: {found:?}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn re_entrancy_across_daemons_uses_each_daemons_chain() -> anyhow::Result<()> {
    let Some(mut cluster) = Cluster::start("re_entrancy_across_daemons", 2).await? else {
        return Ok(());
    };
    let mut apps = cluster.raw_apps_on_two(reentrant_type("node")).await?;
    let c1 = cluster.member("d1")?.client.clone();
    let c2 = cluster.member("d2")?.client.clone();
    let [a, b] = one_on_each(&c1, &mut apps)
        .await
        .context("finding owners")?;
    let [app1, app2] = &mut apps;

    // A's turn on d1; its app calls B through d1, which forwards to d2.
    let mut c = c1.clone();
    let outer = {
        let request = invoke_with(&a, None);
        tokio::spawn(async move { c.0.invoke(request).await })
    };
    let turn_a = app1.next_turn().await?;
    let mut c = c1.clone();
    let a_calls_b = {
        let request = invoke_with(&b, turn_a.chain.clone());
        tokio::spawn(async move { c.0.invoke(request).await })
    };
    let turn_b = app2.next_turn().await?;
    assert_eq!(
        chain_actors(&turn_b),
        [format!("node/{a}"), format!("node/{b}")]
    );
    let (token_a, token_b) = (
        turn_a.chain.as_ref().map(|c| c.token.clone()),
        turn_b.chain.as_ref().map(|c| c.token.clone()),
    );
    assert_ne!(token_a, token_b, "d2 issued B's turn a chain of its own");

    // A's chain is d1's: d2 does not honour it from a caller.
    let mut c = c2.clone();
    let refused = c.0.invoke(invoke_with(&a, turn_a.chain.clone())).await;
    let status = expect_code(refused, Code::FailedPrecondition)?;
    assert!(
        status.message().contains("not issued by this daemon"),
        "{}",
        status.message()
    );

    // B calls A back through d2: checked there, forwarded to d1, nested in
    // A's waiting turn.
    let mut c = c2.clone();
    let b_calls_a = {
        let request = invoke_with(&a, turn_b.chain.clone());
        tokio::spawn(async move { c.0.invoke(request).await })
    };
    let nested = app1.next_turn().await?;
    assert_eq!(
        chain_actors(&nested),
        [
            format!("node/{a}"),
            format!("node/{b}"),
            format!("node/{a}")
        ]
    );
    app1.reply(nested.call_id, "1")?;
    b_calls_a.await??;
    app2.reply(turn_b.call_id, "2")?;
    a_calls_b.await??;
    app1.reply(turn_a.call_id, "3")?;
    let answer = outer.await??.into_inner();
    assert_eq!(answer.payload.map(|p| p.data).unwrap_or_default(), "3");
    Ok(())
}
