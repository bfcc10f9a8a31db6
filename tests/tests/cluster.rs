//! Several daemons, one owner per actor: three placement replicas and three
//! daemons as real processes on loopback, sharing a real PostgreSQL.
//!
//! Every test here needs PostgreSQL (`TROUPE_TEST_POSTGRES`); without it
//! they print why and pass as skipped, unless `TROUPE_REQUIRE_POSTGRES=1`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use std::sync::Mutex as StdMutex;

use troupe_tests::cluster_fixture::*;
use troupe_tests::cluster_harness::*;
use troupe_tests::store::ids;
use troupe_tests::*;

/// Increments over `actors` through whichever clients are current, until
/// stopped (or its bounds end it); counts acknowledged increments per actor.
struct Load {
    stop: Arc<AtomicBool>,
    clients: Arc<StdMutex<Vec<Client>>>,
    acked: Arc<StdMutex<HashMap<String, i64>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Load {
    fn start(clients: Vec<Client>, actors: Vec<String>) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let clients = Arc::new(StdMutex::new(clients));
        let acked = Arc::new(StdMutex::new(HashMap::new()));
        let task = tokio::spawn({
            let (stop, clients, acked) = (stop.clone(), clients.clone(), acked.clone());
            async move {
                let started = Instant::now();
                // Bounded in count and time whatever the test does.
                for i in 0..200_000usize {
                    if stop.load(Ordering::SeqCst) || started.elapsed() > Duration::from_secs(240) {
                        break;
                    }
                    let actor = &actors[i % actors.len()];
                    let client = {
                        let clients = clients.lock().unwrap_or_else(|p| p.into_inner());
                        if clients.is_empty() {
                            None
                        } else {
                            Some(clients[i % clients.len()].clone())
                        }
                    };
                    let Some(mut client) = client else {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    if client.incr("counter", actor, 1).await.is_ok() {
                        *acked
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .entry(actor.clone())
                            .or_default() += 1;
                    }
                }
            }
        });
        Load {
            stop,
            clients,
            acked,
            task,
        }
    }

    fn set_clients(&self, clients: Vec<Client>) {
        *self.clients.lock().unwrap_or_else(|p| p.into_inner()) = clients;
    }

    async fn finish(self) -> anyhow::Result<HashMap<String, i64>> {
        self.stop.store(true, Ordering::SeqCst);
        within(Duration::from_secs(30), "the load to stop", self.task).await??;
        let acked = self.acked.lock().unwrap_or_else(|p| p.into_inner()).clone();
        Ok(acked)
    }
}

/// Durable counters: each count holds at least the increments acknowledged.
async fn nothing_acknowledged_lost(
    client: &mut Client,
    actors: &[String],
    acked: &HashMap<String, i64>,
) -> anyhow::Result<()> {
    for actor in actors {
        let count = client.incr("counter", actor, 0).await?;
        let want = acked.get(actor).copied().unwrap_or(0);
        assert!(
            count >= want,
            "{actor}: count {count} < {want} acknowledged"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_through_any_daemon_reach_the_one_actor() -> anyhow::Result<()> {
    let Some(fx) = Cluster::start("calls_through_any_daemon_reach_the_one_actor", 3).await? else {
        return Ok(());
    };
    let mut total = 0;
    for round in 0..3 {
        for m in &fx.members {
            let mut client = m.client.clone();
            total += 1;
            let got = client
                .incr("counter", "shared", 1)
                .await
                .with_context(|| format!("round {round} via {}\n{}", m.node, fx.logs()))?;
            assert_eq!(got, total, "one actor, whichever daemon is asked");
        }
    }
    // Exactly one daemon has it live.
    let mut live = Vec::new();
    for m in &fx.members {
        if m.live_ids().await?.iter().any(|id| id == "shared") {
            live.push(m.node.clone());
        }
    }
    assert_eq!(live.len(), 1, "live on {live:?}");

    let status = cluster_status(&fx.replicas).await?;
    let table = status.table.context("no table")?;
    let members = table.current.context("no current table")?.members;
    assert_eq!(members.len(), 3);
    assert!(!status.leader.is_empty(), "a leader is known");

    // The CLI shows the same, as a member (placement admits no one else).
    let ca = fx
        .replicas
        .tls
        .clone()
        .context("the fixture runs with TLS")?;
    let env = ca.member_env("cli")?;
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (code, out, err) = run_cli_env(
        &[
            "cluster",
            "status",
            "--placement",
            &placement_arg(&fx.replicas),
            "-o",
            "json",
        ],
        &env,
    )
    .await?;
    assert!(code.success(), "cluster status failed: {err}");
    for node in fx.nodes() {
        assert!(
            out.contains(node),
            "{node} missing from cluster status:\n{out}"
        );
    }
    // The owner answered the others' forwarded calls over streams they
    // opened to it: its status counts them.
    let shown: serde_json::Value = serde_json::from_str(&out)?;
    let owner = shown["members"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["node"] == live[0].as_str())
        .with_context(|| format!("{} missing from:\n{out}", live[0]))?;
    let streams = owner["inbound_links"]["streams"].as_u64().unwrap_or(0);
    assert!(streams >= 2, "two peers forwarded to {}:\n{out}", live[0]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_daemons_actors_resume_elsewhere_with_their_state() -> anyhow::Result<()> {
    let Some(mut fx) = Cluster::start(
        "a_killed_daemons_actors_resume_elsewhere_with_their_state",
        3,
    )
    .await?
    else {
        return Ok(());
    };
    let actors = ids("k", 24);
    let load = Load::start(fx.clients(), actors.clone());
    // Every actor active somewhere: each has answered once.
    poll_until(WAIT, "every actor to answer once", || async {
        let answered = load.acked.lock().unwrap_or_else(|p| p.into_inner()).len();
        Ok((answered == actors.len()).then_some(()))
    })
    .await?;
    let victim = "d2";
    let on_victim = fx.member(victim)?.live_ids().await?;
    if on_victim.is_empty() {
        bail!(
            "no actor was live on {victim}; the load did not spread\n{}",
            fx.logs()
        );
    }
    let survivors: Vec<Client> = fx
        .members
        .iter()
        .filter(|m| m.node != victim)
        .map(|m| m.client.clone())
        .collect();
    load.set_clients(survivors.clone());
    let killed_at = Instant::now();
    fx.member(victim)?.daemon.kill9().await?;
    let mut resumed = Vec::new();
    for actor in &on_victim {
        let mut client = survivors[0].clone();
        until_served(&mut client, actor, Duration::from_secs(20)).await?;
        resumed.push(killed_at.elapsed().as_millis() as u64);
    }
    let (p50, max) = p50_max(&resumed);
    println!(
        "failover after kill -9: {} actors, p50 {p50} ms, max {max} ms (lease {LEASE_MS} ms)",
        resumed.len()
    );
    assert!(
        max <= LEASE_MS + 2_000,
        "actors resumed after {max} ms, more than lease + 2 s"
    );
    let acked = load.finish().await?;
    // Durable: every acknowledged increment is in the count.
    nothing_acknowledged_lost(&mut survivors[0].clone(), &actors, &acked).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn losing_the_placement_leader_keeps_calls_and_changes_flowing() -> anyhow::Result<()> {
    let Some(mut fx) = Cluster::start(
        "losing_the_placement_leader_keeps_calls_and_changes_flowing",
        2,
    )
    .await?
    else {
        return Ok(());
    };
    let actors = ids("l", 10);
    let load = Load::start(fx.clients(), actors.clone());
    let leader = fx.replicas.leader().await?;
    let mut dead = fx
        .replicas
        .replicas
        .remove(&leader)
        .context("the leader is not running")?;
    dead.kill9().await?;
    // Calls keep flowing through the election.
    let before = load
        .acked
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .sum::<i64>();
    poll_until(
        Duration::from_secs(20),
        "calls after the leader died",
        || async {
            let now = load
                .acked
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .sum::<i64>();
            Ok((now > before + 50).then_some(()))
        },
    )
    .await?;
    // Membership changes still apply: a third daemon joins.
    fx.add("d3").await?;
    fx.settle().await?;
    let new_leader = fx.replicas.leader().await?;
    assert_ne!(new_leader, leader, "a new leader was elected");
    load.finish().await?;
    drop(dead);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_daemon_stops_serving_before_its_actors_move() -> anyhow::Result<()> {
    let Some(mut fx) =
        Cluster::start("a_paused_daemon_stops_serving_before_its_actors_move", 2).await?
    else {
        return Ok(());
    };
    // Find an actor live on d1.
    let mut client = fx.member("d1")?.client.clone();
    let mut actor = None;
    for id in ids("p", 20) {
        client.incr("counter", &id, 1).await?;
        let on_d1 = fx.member("d1")?.live_ids().await?.contains(&id);
        if on_d1 {
            actor = Some(id);
            break;
        }
    }
    let actor = actor.context("no actor landed on d1")?;
    let pid = fx.member("d1")?.daemon.pid()?;
    signal(pid, "STOP").await?;
    let paused_at = Instant::now();
    // d2 takes the actor over once d1's lease is gone.
    let mut other = fx.member("d2")?.client.clone();
    let count = until_served(&mut other, &actor, Duration::from_secs(20)).await?;
    assert_eq!(count, 1, "durable state moved with the actor");
    println!(
        "paused daemon's actor served elsewhere after {} ms",
        paused_at.elapsed().as_millis()
    );
    signal(pid, "CONT").await?;
    // d1 wakes up without its lease: it must not serve the actor.
    let mut d1 = fx.member("d1")?.client.clone();
    let _ = d1.incr("counter", &actor, 0).await;
    let mut events = Vec::new();
    for m in &fx.members {
        events.extend(activation_events(&m.daemon.log()));
    }
    let report = check_single_activation(&events, &HashMap::new(), unix_now_ms());
    assert!(
        report.overlaps.is_empty(),
        "two live activations: {:?}\n{}",
        report.overlaps,
        fx.logs()
    );
    assert!(
        events
            .iter()
            .any(|e| e.event == "lease_lapsed" && e.node == "d1"),
        "d1 never noticed its lease lapsed\n{}",
        fx.logs()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_two_live_activations_through_joins_leaves_kills_and_leader_loss() -> anyhow::Result<()>
{
    let Some(mut fx) = Cluster::start(
        "no_two_live_activations_through_joins_leaves_kills_and_leader_loss",
        3,
    )
    .await?
    else {
        return Ok(());
    };
    let actors = ids("c", 40);
    let load = Load::start(fx.clients(), actors.clone());
    let mut killed: HashMap<String, u64> = HashMap::new();
    let mut logs_of_gone = Vec::new();
    let mut changes = 0usize;
    let mut failovers = Vec::new();
    let mut next_node = 4;

    for round in 0..2 {
        // Join.
        let node = format!("d{next_node}");
        next_node += 1;
        fx.add(&node).await?;
        changes += 1;
        load.set_clients(fx.clients());
        fx.settle().await?;

        // Graceful leave of the oldest member.
        let leaving = fx.members[0].node.clone();
        let mut member = fx.forget(&leaving).context("member vanished")?;
        load.set_clients(fx.clients());
        member.daemon.terminate().await?;
        logs_of_gone.push(member.daemon.log());
        changes += 1;
        fx.settle().await?;

        // Crash of another.
        let victim = fx.members[0].node.clone();
        let on_victim = fx.members[0].live_ids().await?;
        let mut member = fx.forget(&victim).context("member vanished")?;
        load.set_clients(fx.clients());
        let at = Instant::now();
        member.daemon.kill9().await?;
        killed.insert(victim.clone(), unix_now_ms());
        logs_of_gone.push(member.daemon.log());
        changes += 1;
        let mut client = fx.members[0].client.clone();
        for actor in &on_victim {
            until_served(&mut client, actor, Duration::from_secs(20)).await?;
        }
        failovers.push(at.elapsed().as_millis() as u64);
        fx.settle().await?;

        // Lose the placement leader (first round only: two of three must stay).
        if round == 0 {
            let leader = fx.replicas.leader().await?;
            if let Some(mut dead) = fx.replicas.replicas.remove(&leader) {
                dead.kill9().await?;
            }
            changes += 1;
        }
        // Keep at least two daemons for the next round.
        while fx.members.len() < 2 {
            let node = format!("d{next_node}");
            next_node += 1;
            fx.add(&node).await?;
            changes += 1;
            load.set_clients(fx.clients());
        }
        fx.settle().await?;
    }
    let acked = load.finish().await?;

    let mut events = Vec::new();
    for log in &logs_of_gone {
        events.extend(activation_events(log));
    }
    for m in &fx.members {
        events.extend(activation_events(&m.daemon.log()));
    }
    let report = check_single_activation(&events, &killed, unix_now_ms());
    let (p50, max) = p50_max(&failovers);
    println!(
        "checker: {} activations of {} actors checked, {changes} membership changes, {} \
         failovers (p50 {p50} ms, max {max} ms), {} increments acknowledged, overlaps: {}",
        report.activations,
        report.actors,
        failovers.len(),
        acked.values().sum::<i64>(),
        report.overlaps.len()
    );
    assert!(report.activations > 0, "no activation events in the logs");
    assert!(
        report.overlaps.is_empty(),
        "two live activations of one actor: {:?}",
        report.overlaps
    );
    // Durable counters: nothing acknowledged was lost through all of it.
    nothing_acknowledged_lost(&mut fx.members[0].client.clone(), &actors, &acked).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reminder_moves_with_its_actor() -> anyhow::Result<()> {
    let Some(mut fx) = Cluster::start("a_reminder_moves_with_its_actor", 2).await? else {
        return Ok(());
    };
    // An actor owned by d1, its reminder set through d2 (which forwards it).
    let mut via_d2 = fx.member("d2")?.client.clone();
    let id = fx.counter_owned_by("d1", "d2", "r", 20).await?;
    via_d2
        .0
        .set_reminder(pb::SetReminderRequest {
            actor: Some(troupe_tests::actor("counter", &id)),
            name: "incr".into(),
            due: "200ms".into(),
            period: "R8/PT0.3S".into(),
            ..Default::default()
        })
        .await?;
    poll_until(WAIT, "two firings on d1", || {
        let mut c = via_d2.clone();
        let id = id.clone();
        async move { Ok((until_served(&mut c, &id, WAIT).await? >= 2).then_some(())) }
    })
    .await?;
    fx.member("d1")?.daemon.kill9().await?;
    fx.forget("d1");
    // d2 owns the actor now and its scheduler picks the reminder up from the
    // shared store: the remaining firings happen there.
    let done = poll_until(Duration::from_secs(30), "all eight firings", || {
        let mut c = via_d2.clone();
        let id = id.clone();
        async move {
            let gone = matches!(
                c.0.get_reminder(pb::ReminderRef {
                    actor: Some(troupe_tests::actor("counter", &id)),
                    name: "incr".into(),
                })
                .await,
                Err(s) if s.code() == tonic::Code::NotFound
            );
            Ok(gone.then_some(()))
        }
    })
    .await;
    done.with_context(|| fx.logs())?;
    let count = until_served(&mut via_d2, &id, WAIT).await?;
    // At least once: a firing in flight at the kill may run again.
    assert!(
        (8..=9).contains(&count),
        "{count} firings counted for 8 repetitions"
    );
    Ok(())
}
