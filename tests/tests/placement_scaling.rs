//! Scaling the placement service as a StatefulSet does, two ways:
//!
//! - `--peers`: replicas restart one at a time with a new list, new ones
//!   start, old ones stop;
//! - `--peers-file` (the Helm chart's ConfigMap): the running replicas' files
//!   are rewritten, as the kubelet refreshes a mounted ConfigMap, and nothing
//!   restarts; new replicas start, old ones stop.
//!
//! The Raft membership follows (3 → 5 → 3 voters, watched through
//! ClusterStatus), a daemon's calls keep succeeding, and killing the leader
//! elects another.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use troupe_tests::replicas::{free_port, PlacementCluster, PlacementReplica};
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
        // The daemon's log says whether its lease lapsed (and its unwritten
        // changes were dropped) when a count comes back short.
        anyhow::ensure!(
            count == self.count,
            "{step}: the count is {count}, expected {}; {}",
            self.count,
            self.daemon.log()
        );
        Ok(())
    }
}

/// Waits until a leader's status lists exactly `expected` as voters and no
/// learners.
async fn wait_voters(cluster: &PlacementCluster, expected: &[u64]) -> anyhow::Result<()> {
    voters_of(&cluster.replicas, expected)
        .await
        .with_context(|| cluster.logs())
}

/// [`wait_voters`] over any running replicas.
async fn voters_of(
    replicas: &BTreeMap<u64, PlacementReplica>,
    expected: &[u64],
) -> anyhow::Result<()> {
    let expected: BTreeSet<String> = expected.iter().map(u64::to_string).collect();
    let what = format!("voters {expected:?}");
    poll_until(MEMBERSHIP_WAIT, &what, || async {
        for r in replicas.values() {
            let Ok(mut c) = r.client().await else {
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

/// Replicas 1–5 on fixed ports, each reading its own peers file (as each
/// pod reads its own mount of the chart's ConfigMap); only some run.
struct FileCluster {
    dir: tempfile::TempDir,
    addrs: BTreeMap<u64, String>,
    replicas: BTreeMap<u64, PlacementReplica>,
}

impl FileCluster {
    fn new() -> anyhow::Result<FileCluster> {
        let mut addrs = BTreeMap::new();
        for id in 1..=5 {
            addrs.insert(id, format!("127.0.0.1:{}", free_port()?));
        }
        Ok(FileCluster {
            dir: tempfile::tempdir()?,
            addrs,
            replicas: BTreeMap::new(),
        })
    }

    fn file(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("peers-{id}"))
    }

    /// Replaces replica `id`'s file at once, as the kubelet swaps a
    /// ConfigMap's files (write aside, rename over).
    fn write(&self, id: u64, text: &str) -> anyhow::Result<()> {
        let aside = self.dir.path().join(format!(".peers-{id}.new"));
        std::fs::write(&aside, text)?;
        std::fs::rename(&aside, self.file(id))?;
        Ok(())
    }

    /// Gives replica `id` a file listing `ids`, one a line, as the chart
    /// renders it.
    fn list(&self, id: u64, ids: &[u64]) -> anyhow::Result<()> {
        let mut text = String::from("# Every placement replica as ID=HOST:PORT, one a line.\n");
        for i in ids {
            let addr = self.addrs.get(i).context("no such replica")?;
            text.push_str(&format!("{i}={addr}\n"));
        }
        self.write(id, &text)
    }

    async fn start(&mut self, id: u64) -> anyhow::Result<()> {
        let listen = self.addrs.get(&id).context("no such replica")?.clone();
        let file = self.file(id);
        let file = file.to_str().context("temp path is not UTF-8")?;
        let data = self.dir.path().join(format!("replica-{id}"));
        let r = PlacementReplica::start(id, &listen, &data, None, &["--peers-file", file]).await?;
        self.replicas.insert(id, r);
        Ok(())
    }

    async fn stop(&mut self, id: u64) -> anyhow::Result<()> {
        let mut r = self.replicas.remove(&id).context("replica not running")?;
        let status = r.terminate().await?;
        anyhow::ensure!(status.success(), "replica {id} exited with {status}");
        Ok(())
    }

    /// Waits until every running replica names the same running leader.
    async fn leader(&self) -> anyhow::Result<u64> {
        poll_until(WAIT, "a placement leader all replicas agree on", || async {
            let mut seen: Option<String> = None;
            for r in self.replicas.values() {
                let Ok(mut c) = r.client().await else {
                    return Ok(None);
                };
                let Ok(s) = c.cluster_status(pb::ClusterStatusRequest {}).await else {
                    return Ok(None);
                };
                let s = s.into_inner();
                if s.leader.is_empty() || seen.as_ref().is_some_and(|l| *l != s.leader) {
                    return Ok(None);
                }
                seen = Some(s.leader);
            }
            Ok(seen
                .and_then(|l| l.parse::<u64>().ok())
                .filter(|l| self.replicas.contains_key(l)))
        })
        .await
        .with_context(|| self.logs())
    }

    async fn voters(&self, expected: &[u64]) -> anyhow::Result<()> {
        voters_of(&self.replicas, expected)
            .await
            .with_context(|| self.logs())
    }

    /// Waits until replica `id`'s log has `line`.
    async fn logged(&self, id: u64, line: &str) -> anyhow::Result<()> {
        let r = self.replicas.get(&id).context("replica not running")?;
        poll_until(WAIT, &format!("replica {id} to log {line:?}"), || async {
            Ok(r.log().contains(line).then_some(()))
        })
        .await
        .with_context(|| r.log())
    }

    fn logs(&self) -> String {
        self.replicas
            .values()
            .map(|r| format!("--- replica {} ---\n{}", r.id, r.log()))
            .collect()
    }
}

fn placement_arg(addrs: &BTreeMap<u64, String>, ids: &[u64]) -> String {
    ids.iter()
        .filter_map(|id| addrs.get(id).cloned())
        .collect::<Vec<_>>()
        .join(",")
}

#[tokio::test]
async fn placement_scales_by_rewriting_the_peers_file_without_restarts() -> anyhow::Result<()> {
    let mut cluster = FileCluster::new()?;
    for id in [1, 2, 3] {
        cluster.list(id, &[1, 2, 3])?;
    }
    for id in [1, 2, 3] {
        cluster.start(id).await?;
    }
    cluster.leader().await?;
    cluster.voters(&[1, 2, 3]).await?;
    let mut member = Member::start(&placement_arg(&cluster.addrs, &[1, 2, 3])).await?;
    member.call("3 replicas").await?;

    // Scale up. The new pods start with the new ConfigMap; the running
    // ones see it when the kubelet refreshes their mount, in any order.
    for id in [4, 5] {
        cluster.list(id, &[1, 2, 3, 4, 5])?;
        cluster.start(id).await?;
        member.call(&format!("replica {id} started")).await?;
    }
    for id in [3, 2, 1] {
        cluster.list(id, &[1, 2, 3, 4, 5])?;
        member
            .call(&format!("replica {id}'s file lists 5 replicas"))
            .await?;
    }
    cluster.voters(&[1, 2, 3, 4, 5]).await?;
    member.call("5 voters").await?;

    // The leader crashes at 5 voters; another leads, and the kubelet
    // starts the crashed one again (with the file as it is now).
    let leader = cluster.leader().await?;
    cluster
        .replicas
        .get_mut(&leader)
        .context("leader not running")?
        .kill9()
        .await?;
    let killed = cluster.replicas.remove(&leader);
    let next = cluster.leader().await?;
    anyhow::ensure!(
        next != leader,
        "replica {leader} still leads after its kill"
    );
    member
        .call(&format!("after killing leader {leader}"))
        .await?;
    drop(killed);
    cluster.start(leader).await?;
    cluster.voters(&[1, 2, 3, 4, 5]).await?;

    // A broken file (here: cut off mid-entry) keeps the last good list.
    for id in [1, 2, 3] {
        cluster.write(id, "1=127.0.0.1:1\n2=127.0.0")?;
    }
    cluster
        .logged(
            1,
            "placement peers file unusable; keeping the last good list",
        )
        .await?;
    member.call("broken peers files").await?;
    cluster.voters(&[1, 2, 3, 4, 5]).await?;

    // Scale down: every pod's file drops 4 and 5; they keep serving (and
    // stay voters) until they are stopped, then the leader removes them.
    for id in [1, 2, 3, 4, 5] {
        cluster.list(id, &[1, 2, 3])?;
    }
    for id in [4, 5] {
        cluster
            .logged(id, "this placement replica is not in the peers file")
            .await?;
    }
    member.call("every file lists 3 replicas").await?;
    for id in [5, 4] {
        cluster.stop(id).await?;
        member.call(&format!("replica {id} stopped")).await?;
    }
    cluster.voters(&[1, 2, 3]).await?;
    member.call("3 voters").await?;
    Ok(())
}
