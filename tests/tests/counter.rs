//! The counter actor end to end, turn order per actor and parallelism
//! across actors.

use std::collections::HashSet;

use anyhow::{bail, ensure};
use troupe_tests::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counter_end_to_end() -> anyhow::Result<()> {
    let (_dir, _daemon, app, mut client) = daemon_with_app(&[], vec![type_spec("counter")]).await?;
    ensure!(app.registered.types.iter().any(|t| t.name == "counter"));

    assert_eq!(client.incr("counter", "c1", 1).await?, 1);
    assert_eq!(client.incr("counter", "c1", 5).await?, 6);
    // An empty payload means +1.
    let reply = client.invoke("counter", "c1", "incr", "").await?;
    assert_eq!(reply, serde_json::json!(7));
    assert_eq!(
        client.invoke("counter", "c1", "get", "{}").await?,
        serde_json::json!(7)
    );

    let (entries, active) = client.state("counter", "c1").await?;
    assert!(active, "c1 should be active after its calls");
    assert_eq!(entries.get("count").map(|v| v.as_ref()), Some(&b"7"[..]));
    // Another actor of the same type has its own state.
    assert_eq!(client.incr("counter", "c2", 2).await?, 2);
    assert_eq!(client.stored_count("counter", "c1").await?, Some(7));
    assert_eq!(app.events().activations.len(), 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_calls_on_one_actor_take_turns() -> anyhow::Result<()> {
    let (_dir, _daemon, app, client) = daemon_with_app(&[], vec![type_spec("counter")]).await?;
    const N: i64 = 200;
    let calls: Vec<_> = (0..N)
        .map(|_| {
            let mut client = client.clone();
            tokio::spawn(async move { client.incr("counter", "hot", 1).await })
        })
        .collect();
    let mut replies = Vec::new();
    for call in calls {
        replies.push(within(WAIT, "an incr", call).await???);
    }
    replies.sort_unstable();
    // Every turn saw the one before it: the replies are exactly 1..=N.
    assert_eq!(replies, (1..=N).collect::<Vec<_>>());
    let mut client = client;
    assert_eq!(client.stored_count("counter", "hot").await?, Some(N));
    let events = app.events();
    let key = ("counter".to_owned(), "hot".to_owned());
    assert_eq!(events.turns, N as u64);
    assert_eq!(
        events.max_concurrent.get(&key).copied(),
        Some(1),
        "the app saw overlapping turns of one actor"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_on_different_actors_run_in_parallel() -> anyhow::Result<()> {
    const N: usize = 50;
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &[]).await?;
    let (mut app, _) = RawApp::register(daemon.addr, vec![type_spec("worker")]).await?;
    let client = daemon.client().await?;
    let calls: Vec<_> = (0..N)
        .map(|i| {
            let mut client = client.clone();
            tokio::spawn(async move {
                client
                    .invoke_raw("worker", &format!("w{i}"), "work", "{}")
                    .await
            })
        })
        .collect();

    // Hold every turn until all N actors have one in hand at the same time.
    let mut held = Vec::new();
    let mut actors = HashSet::new();
    while actors.len() < N {
        let turn = app.next_turn().await?;
        let actor = turn.actor.clone().unwrap_or_default();
        if !actors.insert(actor.id.clone()) {
            bail!(
                "a second turn for {} arrived while its first was held",
                actor.id
            );
        }
        held.push(turn);
    }
    for turn in &held {
        let id = turn
            .actor
            .as_ref()
            .map(|a| a.id.clone())
            .unwrap_or_default();
        app.reply(turn.call_id, &serde_json::json!(id).to_string())?;
    }
    for (i, call) in calls.into_iter().enumerate() {
        let reply = within(WAIT, "a parallel call", call).await??;
        let reply = reply.map_err(|s| anyhow::anyhow!("call {i} failed: {s:?}"))?;
        assert_eq!(serde_json::from_slice::<String>(&reply)?, format!("w{i}"));
    }
    // Nothing else is pending.
    let active = daemon.actors().await?;
    assert_eq!(active.len(), N);
    assert!(active.iter().all(|a| a.mailbox_depth == 0));
    Ok(())
}
