//! A refusal that ran nothing keeps its retry pushback across daemons: a
//! call through d1 to an actor d2 owns, whose mailbox is full, is answered
//! RESOURCE_EXHAUSTED with d2's `grpc-retry-pushback-ms`, over the link and
//! through d1's conversion, so an SDK calling d1 waits and resends as it
//! would against d2 (docs/delivery.md, "SDK retries").
//!
//! Needs PostgreSQL (`TROUPE_TEST_POSTGRES`), as tests/tests/cluster.rs.

use anyhow::bail;
use tonic::Code;
use troupe_tests::cluster_fixture::*;
use troupe_tests::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forwarded_refusal_keeps_its_retry_pushback() -> anyhow::Result<()> {
    let Some(mut cluster) =
        Cluster::start("a_forwarded_refusal_keeps_its_retry_pushback", 2).await?
    else {
        return Ok(());
    };
    let spec = pb::ActorTypeSpec {
        max_mailbox: 1,
        ..type_spec("narrow")
    };
    let mut apps = cluster.raw_apps_on_two(spec).await?;
    let c1 = cluster.member("d1")?.client.clone();
    let call = |id: String, n: u32| {
        let mut c = c1.clone();
        tokio::spawn(async move { c.invoke_raw("narrow", &id, "m", n.to_string()).await })
    };

    // An actor d2 owns, called through d1; its turn is held in d2's app.
    let mut held = None;
    for i in 0..200 {
        let id = format!("p{i}");
        let first = call(id.clone(), 1);
        let [one, two] = &mut apps;
        let (owner, turn) = tokio::select! {
            turn = one.next_turn() => (0, turn?),
            turn = two.next_turn() => (1, turn?),
        };
        if owner == 1 {
            held = Some((id, first, turn));
            break;
        }
        apps[0].reply(turn.call_id, "null")?;
        within(WAIT, "a call d1 answered itself", first).await???;
    }
    let Some((id, first, turn)) = held else {
        bail!("200 actors and none on d2\n{}", cluster.logs());
    };
    // A second call fills the mailbox (of one).
    let second = call(id.clone(), 2);
    let d2_daemon = &cluster.member("d2")?.daemon;
    poll_until(WAIT, "the second call queued on d2", || async {
        let actors = d2_daemon.actors().await?;
        Ok(actors.iter().any(|a| a.mailbox_depth == 1).then_some(()))
    })
    .await?;

    let mut c = c1.clone();
    let status = expect_code(
        c.invoke_raw("narrow", &id, "m", "3").await,
        Code::ResourceExhausted,
    )?;
    assert!(status.message().contains("mailbox"), "{status:?}");
    assert_eq!(
        status
            .metadata()
            .get("grpc-retry-pushback-ms")
            .and_then(|v| v.to_str().ok()),
        Some("100"),
        "d1 relayed d2's refusal without its pushback: {status:?}"
    );

    // The held turn and the queued one end; both callers are answered.
    apps[1].reply(turn.call_id, "null")?;
    let queued = apps[1].next_turn().await?;
    apps[1].reply(queued.call_id, "null")?;
    within(WAIT, "the held call", first).await???;
    within(WAIT, "the queued call", second).await???;
    Ok(())
}
