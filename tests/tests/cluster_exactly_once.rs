//! The delivery checker: 16 senders put 10,000+ numbered messages — durable
//! tells and invokes, every one with an idempotency key and retried with
//! it until acknowledged — on 40 log actors of a 3-daemon cluster on
//! PostgreSQL, while daemons join, leave gracefully and are killed with
//! SIGKILL and the placement leader is killed. Then, read straight from the
//! store: every acknowledged message applied exactly once (in its actor's
//! log once, none twice, none that was never sent), and each sender's
//! messages to an actor in the order it sent them.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use troupe_tests::cluster_fixture::{durable, Cluster};
use troupe_tests::cluster_harness::{routing_by, settled_with};
use troupe_tests::log_app::{LogApp, LOG_TYPE};
use troupe_tests::store::ids;
use troupe_tests::*;

const SENDERS: usize = 16;
const ACTORS: usize = 40;
const AT_LEAST: usize = 10_000;
/// A sender's numbers are `sender * STRIDE + seq`.
const STRIDE: i64 = 1_000_000;

/// What the senders did: acknowledged (actor, number) pairs, and messages
/// that ran out of retries (their outcome unknown).
#[derive(Default)]
struct Sent {
    acked: Vec<(String, i64)>,
    unknown: Vec<(String, i64)>,
    tells: usize,
    invokes: usize,
    retries: usize,
}

type Clients = Arc<StdMutex<Vec<Client>>>;

fn client_at(clients: &Clients, i: usize) -> Option<Client> {
    let clients = clients.lock().unwrap_or_else(|p| p.into_inner());
    (!clients.is_empty()).then(|| clients[i % clients.len()].clone())
}

/// One attempt of message `n` to `actor` with idempotency key `key`.
async fn attempt(
    client: &mut Client,
    actor: &str,
    n: i64,
    key: &str,
    as_tell: bool,
) -> Result<(), tonic::Status> {
    let payload = Some(json_payload(format!("{{\"kwargs\":{{\"n\":{n}}}}}")));
    if as_tell {
        let mut request = tonic::Request::new(pb::TellRequest {
            actor: Some(troupe_tests::actor(LOG_TYPE, actor)),
            method: "append".into(),
            payload,
            delivery: pb::Delivery::Durable.into(),
            idempotency_key: key.into(),
            ..Default::default()
        });
        request.set_timeout(Duration::from_secs(10));
        client.0.tell(request).await.map(drop)
    } else {
        let mut request = tonic::Request::new(pb::InvokeRequest {
            actor: Some(troupe_tests::actor(LOG_TYPE, actor)),
            method: "append".into(),
            payload,
            idempotency_key: key.into(),
            ..Default::default()
        });
        request.set_timeout(Duration::from_secs(10));
        client.0.invoke(request).await.map(drop)
    }
}

/// Sends numbered messages one at a time (each acknowledged before the
/// next), alternating durable tells and invokes, until `stop`; bounded in
/// count and time whatever happens.
async fn sender(
    s: usize,
    actors: Arc<Vec<String>>,
    clients: Clients,
    stop: Arc<AtomicBool>,
    total: Arc<AtomicUsize>,
) -> Sent {
    let mut sent = Sent::default();
    let started = Instant::now();
    for seq in 1..5_000usize {
        if stop.load(Ordering::SeqCst) || started.elapsed() > Duration::from_secs(400) {
            break;
        }
        let n = i64::try_from(s).unwrap_or(0) * STRIDE + i64::try_from(seq).unwrap_or(0);
        let actor = &actors[(s + seq * 7) % actors.len()];
        let key = format!("s{s}-{seq}");
        let as_tell = seq % 2 == 0;
        let give_up = Instant::now() + Duration::from_secs(90);
        let mut tries = 0usize;
        let acked = loop {
            if Instant::now() > give_up {
                break false;
            }
            let Some(mut client) = client_at(&clients, s + tries) else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            match attempt(&mut client, actor, n, &key, as_tell).await {
                Ok(()) => break true,
                Err(_) => {
                    tries += 1;
                    // Backoff between retries (the SDKs' schedule).
                    let ms = 50u64.saturating_mul(1 << tries.min(5)).min(1_000);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
            }
        };
        sent.retries += tries;
        if !acked {
            sent.unknown.push((actor.clone(), n));
            break;
        }
        sent.acked.push((actor.clone(), n));
        if as_tell {
            sent.tells += 1;
        } else {
            sent.invokes += 1;
        }
        total.fetch_add(1, Ordering::SeqCst);
    }
    sent
}

/// Adds daemon `node` with a log app beside its counter app, and waits for
/// the table to have it hosting both.
async fn join(fx: &mut Cluster, node: &str, apps: &mut Vec<LogApp>) -> anyhow::Result<()> {
    fx.add(node).await?;
    let channel = fx.member(node)?.daemon.channel().await?;
    apps.push(LogApp::attach_over(channel, vec![durable(LOG_TYPE)]).await?);
    settle(fx).await
}

async fn settle(fx: &Cluster) -> anyhow::Result<()> {
    fx.settle().await?;
    let version = settled_with(&fx.replicas, &fx.nodes(), LOG_TYPE).await?;
    routing_by(&fx.members, version).await
}

/// Every log actor's stored log, once no durable tell waits in an inbox.
async fn stored_logs(url: &str) -> anyhow::Result<HashMap<String, Vec<i64>>> {
    let (db, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    let db = &db;
    poll_until(
        Duration::from_secs(90),
        "every inbox to empty",
        || async move {
            let row = db
                .query_one(
                    "SELECT count(*) FROM troupe_inbox WHERE actor_type = $1",
                    &[&LOG_TYPE],
                )
                .await?;
            Ok((row.get::<_, i64>(0) == 0).then_some(()))
        },
    )
    .await?;
    let dead: i64 = db
        .query_one("SELECT count(*) FROM troupe_dead_letters", &[])
        .await?
        .get(0);
    anyhow::ensure!(dead == 0, "{dead} durable tells ended as dead letters");
    let rows = db
        .query(
            "SELECT actor_id, value FROM troupe_state WHERE actor_type = $1 AND key = 'log'",
            &[&LOG_TYPE],
        )
        .await?;
    let mut logs = HashMap::new();
    for row in rows {
        let value: Vec<u8> = row.get(1);
        logs.insert(row.get::<_, String>(0), serde_json::from_slice(&value)?);
    }
    Ok(logs)
}

/// What the store shows against what was sent: the violations found.
fn check(logs: &HashMap<String, Vec<i64>>, sent: &Sent) -> Vec<String> {
    let mut problems = Vec::new();
    let acked: HashSet<(&str, i64)> = sent.acked.iter().map(|(a, n)| (a.as_str(), *n)).collect();
    let unknown: HashSet<(&str, i64)> =
        sent.unknown.iter().map(|(a, n)| (a.as_str(), *n)).collect();
    let mut seen: HashSet<(&str, i64)> = HashSet::new();
    for (actor, log) in logs {
        let mut last: HashMap<i64, i64> = HashMap::new();
        for &n in log {
            if !seen.insert((actor.as_str(), n)) {
                problems.push(format!("{actor}: {n} applied twice"));
            }
            if !acked.contains(&(actor.as_str(), n)) && !unknown.contains(&(actor.as_str(), n)) {
                problems.push(format!("{actor}: {n} applied but never sent there"));
            }
            let (s, seq) = (n / STRIDE, n % STRIDE);
            if let Some(prev) = last.insert(s, seq) {
                if prev >= seq {
                    problems.push(format!("{actor}: sender {s}'s {seq} after its {prev}"));
                }
            }
        }
    }
    for (actor, n) in &acked {
        if !seen.contains(&(*actor, *n)) {
            problems.push(format!("{actor}: acknowledged {n} is not in the store"));
        }
    }
    problems
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_acknowledged_message_applies_once_through_churn() -> anyhow::Result<()> {
    let Some(mut fx) =
        Cluster::start("every_acknowledged_message_applies_once_through_churn", 3).await?
    else {
        return Ok(());
    };
    let mut apps = Vec::new();
    for member in &fx.members {
        let channel = member.daemon.channel().await?;
        apps.push(LogApp::attach_over(channel, vec![durable(LOG_TYPE)]).await?);
    }
    settle(&fx).await?;
    let clients: Clients = Arc::new(StdMutex::new(fx.clients()));
    let set_clients = |fx: &Cluster| {
        *clients.lock().unwrap_or_else(|p| p.into_inner()) = fx.clients();
    };
    let actors = Arc::new(ids("l", ACTORS));
    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicUsize::new(0));
    let senders: Vec<_> = (0..SENDERS)
        .map(|s| {
            tokio::spawn(sender(
                s,
                actors.clone(),
                clients.clone(),
                stop.clone(),
                total.clone(),
            ))
        })
        .collect();

    let started = Instant::now();
    let mut changes = Vec::new();
    let mut next_node = 4;
    for round in 0..2 {
        let node = format!("d{next_node}");
        next_node += 1;
        join(&mut fx, &node, &mut apps).await?;
        set_clients(&fx);
        changes.push(format!("{node} joined"));

        let leaving = fx.members[0].node.clone();
        let mut member = fx.forget(&leaving).context("member vanished")?;
        set_clients(&fx);
        member.daemon.terminate().await?;
        changes.push(format!("{leaving} left"));
        settle(&fx).await?;

        let victim = fx.members[0].node.clone();
        let mut member = fx.forget(&victim).context("member vanished")?;
        set_clients(&fx);
        member.daemon.kill9().await?;
        changes.push(format!("{victim} killed"));
        settle(&fx).await?;

        if round == 0 {
            let leader = fx.replicas.leader().await?;
            if let Some(mut dead) = fx.replicas.replicas.remove(&leader) {
                dead.kill9().await?;
            }
            changes.push(format!("placement leader {leader} killed"));
        }
        while fx.members.len() < 2 {
            let node = format!("d{next_node}");
            next_node += 1;
            join(&mut fx, &node, &mut apps).await?;
            set_clients(&fx);
            changes.push(format!("{node} joined"));
        }
        settle(&fx).await?;
    }
    let churn = started.elapsed();
    // Enough messages for the check, bounded in time.
    poll_until(
        Duration::from_secs(300),
        "10,000 messages acknowledged",
        || {
            let total = total.clone();
            async move { Ok((total.load(Ordering::SeqCst) >= AT_LEAST).then_some(())) }
        },
    )
    .await?;
    stop.store(true, Ordering::SeqCst);
    let mut sent = Sent::default();
    for s in senders {
        let one = within(Duration::from_secs(120), "a sender to stop", s).await??;
        sent.acked.extend(one.acked);
        sent.unknown.extend(one.unknown);
        sent.tells += one.tells;
        sent.invokes += one.invokes;
        sent.retries += one.retries;
    }

    let logs = stored_logs(&fx.store_url).await?;
    let problems = check(&logs, &sent);
    println!(
        "delivery checker: {} messages acknowledged ({} durable tells, {} keyed invokes, \
         {} retries, {} of unknown outcome) on {} actors in {:.0?} ({:.0?} of churn: {}); \
         {} applied; violations: {}",
        sent.acked.len(),
        sent.tells,
        sent.invokes,
        sent.retries,
        sent.unknown.len(),
        logs.len(),
        started.elapsed(),
        churn,
        changes.join(", "),
        logs.values().map(Vec::len).sum::<usize>(),
        problems.len(),
    );
    assert!(sent.acked.len() >= AT_LEAST, "too few messages to check");
    assert!(
        problems.is_empty(),
        "{} violations, first: {:?}",
        problems.len(),
        &problems[..problems.len().min(20)]
    );
    Ok(())
}
