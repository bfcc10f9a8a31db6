//! Scaling the placement service as a StatefulSet does: replicas restart
//! one at a time with a new `--peers` list, new ones start, old ones stop.
//! The Raft membership follows (3 → 5 → 3 voters, watched through
//! ClusterStatus), a daemon's calls keep succeeding, and killing the leader
//! after each step elects another.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Context;
use troupe_tests::replicas::{free_port, PlacementCluster};
use troupe_tests::{pb, poll_until, type_spec, Client, Daemon, TestApp, WAIT};

/// Adding waits for a probe round and catching up; removing waits for the
/// removal grace (10 s) on top.
const MEMBERSHIP_WAIT: Duration = Duration::from_secs(60);

/// A daemon joined through replicas 1–3 with a counter app attached.
struct Member {
    _dir: tempfile::TempDir,
    daemon: Daemon,
    _app: TestApp,
    client: Client,
    count: i64,
}

impl Member {
    async fn start(placement: &str) -> anyhow::Result<Member> {
        let dir = tempfile::tempdir()?;
        let args = [
            "--placement",
            placement,
            "--node",
            "d1",
            "--store",
            "memory",
        ];
        let daemon = Daemon::start(dir.path(), &args).await?;
        let app = TestApp::attach(daemon.addr, vec![type_spec("counter")]).await?;
        let client = daemon.client().await?;
        Ok(Member {
            _dir: dir,
            daemon,
            _app: app,
            client,
            count: 0,
        })
    }

    /// One call succeeds (retried, bounded, while a table change or an
    /// election is in flight) and the count went on from the last one.
    async fn call(&mut self, step: &str) -> anyhow::Result<()> {
        let client = self.client.clone();
        let count = poll_until(WAIT, &format!("a call to succeed ({step})"), || {
            let mut client = client.clone();
            async move { Ok(client.incr("counter", "c1", 1).await.ok()) }
        })
        .await
        .with_context(|| self.daemon.log())?;
        self.count += 1;
        anyhow::ensure!(
            count == self.count,
            "{step}: the count is {count}, expected {}",
            self.count
        );
        Ok(())
    }
}

/// Waits until a leader's status lists exactly `expected` as voters and no
/// learners.
async fn wait_voters(cluster: &PlacementCluster, expected: &[u64]) -> anyhow::Result<()> {
    let expected: BTreeSet<String> = expected.iter().map(u64::to_string).collect();
    let what = format!("voters {expected:?}");
    poll_until(MEMBERSHIP_WAIT, &what, || async {
        for id in cluster.replicas.keys() {
            let Ok(mut c) = cluster.client(*id).await else {
                continue;
            };
            let Ok(s) = c.cluster_status(pb::ClusterStatusRequest {}).await else {
                continue;
            };
            let s = s.into_inner();
            if s.leader.is_empty() {
                continue;
            }
            let voters: BTreeSet<String> = s
                .replicas
                .iter()
                .filter(|r| r.voter)
                .map(|r| r.id.clone())
                .collect();
            let learners = s.replicas.iter().any(|r| r.learner);
            return Ok((voters == expected && !learners).then_some(()));
        }
        Ok(None)
    })
    .await
    .context(cluster.logs())
}

/// Restarts replica `id` (SIGTERM, then start) with the cluster's current
/// peers list, as a StatefulSet's rolling update does.
async fn restart(cluster: &mut PlacementCluster, id: u64) -> anyhow::Result<()> {
    let r = cluster
        .replicas
        .get_mut(&id)
        .context("replica not running")?;
    let status = r.terminate().await?;
    anyhow::ensure!(status.success(), "replica {id} exited with {status}");
    cluster.start_replica(id).await
}

/// Kills the leader, waits for another, and starts the killed one again.
async fn fail_over(cluster: &mut PlacementCluster, member: &mut Member) -> anyhow::Result<()> {
    let leader = cluster.leader().await.context(cluster.logs())?;
    cluster
        .replicas
        .get_mut(&leader)
        .context("leader not running")?
        .kill9()
        .await?;
    let killed = cluster.replicas.remove(&leader);
    let next = cluster.leader().await.context(cluster.logs())?;
    anyhow::ensure!(
        next != leader,
        "replica {leader} still leads after its kill"
    );
    member
        .call(&format!("after killing leader {leader}"))
        .await?;
    drop(killed);
    cluster.start_replica(leader).await?;
    cluster.leader().await.context(cluster.logs())?;
    Ok(())
}

#[tokio::test]
async fn placement_grows_to_five_and_shrinks_to_three_with_peers() -> anyhow::Result<()> {
    let mut cluster = PlacementCluster::start(3, &[]).await?;
    cluster.leader().await.context(cluster.logs())?;
    wait_voters(&cluster, &[1, 2, 3]).await?;
    let placement = cluster
        .peers
        .values()
        .cloned()
        .collect::<Vec<_>>()
        .join(",");
    let mut member = Member::start(&placement).await?;
    member.call("3 replicas").await?;

    // Scale up: 4 and 5 start with the 5-list and wait to be added; 1–3
    // restart one at a time with it (highest ordinal first).
    for id in [4, 5] {
        cluster
            .peers
            .insert(id, format!("127.0.0.1:{}", free_port()?));
    }
    for id in [4, 5] {
        cluster.start_replica(id).await?;
    }
    for id in [3, 2, 1] {
        restart(&mut cluster, id).await?;
        member
            .call(&format!("replica {id} restarted with 5 peers"))
            .await?;
    }
    wait_voters(&cluster, &[1, 2, 3, 4, 5]).await?;
    member.call("5 voters").await?;
    fail_over(&mut cluster, &mut member).await?;
    wait_voters(&cluster, &[1, 2, 3, 4, 5]).await?;

    // Scale down: 1–3 restart with the 3-list, then 4 and 5 stop.
    for id in [4, 5] {
        cluster.peers.remove(&id);
    }
    for id in [3, 2, 1] {
        restart(&mut cluster, id).await?;
        member
            .call(&format!("replica {id} restarted with 3 peers"))
            .await?;
    }
    // Still running: nobody removes them yet.
    wait_voters(&cluster, &[1, 2, 3, 4, 5]).await?;
    for id in [5, 4] {
        if let Some(mut r) = cluster.replicas.remove(&id) {
            r.terminate().await?;
        }
        member.call(&format!("replica {id} stopped")).await?;
    }
    wait_voters(&cluster, &[1, 2, 3]).await?;
    member.call("3 voters").await?;
    fail_over(&mut cluster, &mut member).await?;
    wait_voters(&cluster, &[1, 2, 3]).await?;
    member.call("after the last fail-over").await?;
    Ok(())
}
