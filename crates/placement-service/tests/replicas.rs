//! Three in-process placement replicas on loopback, talking real gRPC to
//! each other and to a "daemon" client: election, forwarding, promotion,
//! leader failover, expiry and restart.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use troupe_placement_service::{Replica, ServiceConfig};
use troupe_proto::v1 as pb;
use troupe_proto::v1::placement_client::PlacementClient;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

const WAIT: Duration = Duration::from_secs(20);
const LEASE: Duration = Duration::from_millis(1200);
const HEARTBEAT: Duration = Duration::from_millis(200);

struct Running {
    addr: String,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

struct Cluster {
    dirs: tempfile::TempDir,
    peers: BTreeMap<u64, String>,
    replicas: BTreeMap<u64, Running>,
}

impl Cluster {
    async fn start() -> Result<Cluster> {
        let dirs = tempfile::tempdir()?;
        let mut listeners = BTreeMap::new();
        for id in 1..=3u64 {
            let l = TcpListener::bind("127.0.0.1:0").await?;
            listeners.insert(id, l);
        }
        let peers: BTreeMap<u64, String> = listeners
            .iter()
            .map(|(id, l)| Ok((*id, l.local_addr()?.to_string())))
            .collect::<std::io::Result<_>>()?;
        let mut cluster = Cluster {
            dirs,
            peers,
            replicas: BTreeMap::new(),
        };
        for (id, l) in listeners {
            cluster.run(id, l).await?;
        }
        Ok(cluster)
    }

    fn dir(&self, id: u64) -> PathBuf {
        self.dirs.path().join(id.to_string())
    }

    async fn run(&mut self, id: u64, listener: TcpListener) -> Result<()> {
        let config = ServiceConfig {
            lease: LEASE,
            heartbeat: HEARTBEAT,
            ..ServiceConfig::new(id, self.dir(id), self.peers.clone())
        };
        let replica = Replica::start(config).await?;
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = replica
                .serve(listener, async {
                    let _ = rx.await;
                })
                .await;
        });
        let addr = self.peers[&id].clone();
        self.replicas.insert(
            id,
            Running {
                addr,
                stop: Some(tx),
                task,
            },
        );
        Ok(())
    }

    async fn stop(&mut self, id: u64) -> Result<()> {
        if let Some(mut r) = self.replicas.remove(&id) {
            if let Some(tx) = r.stop.take() {
                let _ = tx.send(());
            }
            within("replica shutdown", r.task).await??;
        }
        Ok(())
    }

    async fn restart(&mut self, id: u64) -> Result<()> {
        let listener = TcpListener::bind(&self.peers[&id]).await?;
        self.run(id, listener).await
    }

    async fn client(&self, id: u64) -> Result<PlacementClient<Channel>> {
        let channel = Channel::from_shared(format!("http://{}", self.replicas[&id].addr))?
            .timeout(Duration::from_secs(10))
            .connect()
            .await?;
        Ok(PlacementClient::new(channel))
    }

    /// Waits until every running replica names the same leader.
    async fn leader(&self) -> Result<u64> {
        let ids: Vec<u64> = self.replicas.keys().copied().collect();
        poll("a leader all replicas agree on", || async {
            let mut seen = None;
            for id in &ids {
                let mut c = self.client(*id).await?;
                let s = c
                    .cluster_status(pb::ClusterStatusRequest {})
                    .await?
                    .into_inner();
                if s.leader.is_empty() || seen.as_ref().is_some_and(|l| *l != s.leader) {
                    return Ok(None);
                }
                seen = Some(s.leader);
            }
            Ok(seen
                .and_then(|l| l.parse().ok())
                .filter(|l| ids.contains(l)))
        })
        .await
    }
}

async fn within<T>(what: &str, fut: impl Future<Output = T>) -> Result<T> {
    tokio::time::timeout(WAIT, fut)
        .await
        .map_err(|_| format!("timed out waiting for {what}").into())
}

/// Retries `check` (errors count as "not yet": replicas come and go in
/// these tests) until it returns `Some`, within [`WAIT`].
async fn poll<T, F, Fut>(what: &str, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut last = String::new();
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = e.to_string(),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("not reached within {WAIT:?}: {what} (last error: {last})").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn join(node: &str) -> pb::JoinRequest {
    pb::JoinRequest {
        node: node.into(),
        address: format!("127.0.0.1:{}", 9000 + node.len()),
        types: vec!["Counter".into()],
    }
}

fn heartbeat(node: &str, drained: u64) -> pb::HeartbeatRequest {
    pb::HeartbeatRequest {
        node: node.into(),
        drained_version: drained,
        known_current: 0,
        known_next: 0,
        types: vec!["Counter".into()],
    }
}

fn nodes(t: &Option<pb::TableVersion>) -> Vec<String> {
    t.as_ref()
        .map(|v| v.members.iter().map(|m| m.node.clone()).collect())
        .unwrap_or_default()
}

/// Keeps `node` alive through any replica, reporting `drained` for any
/// pending table, until the returned sender is dropped.
fn keep_alive(clients: Vec<PlacementClient<Channel>>, node: &'static str) -> oneshot::Sender<()> {
    let (tx, mut rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let mut drained = 0;
        let mut i = 0;
        loop {
            let mut c = clients[i % clients.len()].clone();
            i += 1;
            if let Ok(r) = c.heartbeat(heartbeat(node, drained)).await {
                if let Some(next) = r.into_inner().table.and_then(|t| t.next) {
                    drained = next.version;
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(HEARTBEAT) => {}
                _ = &mut rx => return,
            }
        }
    });
    tx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_elect_forward_promote_fail_over_expire_and_restart() -> Result<()> {
    let mut cluster = Cluster::start().await?;
    let leader = cluster.leader().await?;
    let follower = *cluster
        .replicas
        .keys()
        .find(|id| **id != leader)
        .ok_or("no follower")?;

    // A join through a follower is forwarded; the first member is current
    // at once.
    let mut f = cluster.client(follower).await?;
    let r = f.join(join("daemon-a")).await?.into_inner();
    assert_eq!(r.lease_ms, LEASE.as_millis() as u64);
    assert_eq!(r.heartbeat_interval_ms, HEARTBEAT.as_millis() as u64);
    let t = r.table.ok_or("join answered no table")?;
    assert_eq!(nodes(&t.current), ["daemon-a"]);

    // A second member: a two-phase change waiting for daemon-a's drain.
    let keep_a = keep_alive(
        vec![
            cluster.client(1).await?,
            cluster.client(2).await?,
            cluster.client(3).await?,
        ],
        "daemon-a",
    );
    let r = f.join(join("daemon-b")).await?.into_inner();
    let t = r.table.ok_or("join answered no table")?;
    let promoted_to = t.next.as_ref().map(|n| n.version).ok_or("no next table")?;
    assert_eq!(t.waiting_for, ["daemon-a"]);
    let keep_b = keep_alive(vec![cluster.client(follower).await?], "daemon-b");
    poll("the table with daemon-b promoted", || {
        let mut f = f.clone();
        async move {
            let t = f.get_table(pb::GetTableRequest {}).await?.into_inner();
            let c = t.current.as_ref().map_or(0, |c| c.version);
            Ok((c >= promoted_to && t.next.is_none()).then_some(()))
        }
    })
    .await?;

    // Kill the leader: a new one is elected and daemons keep working
    // through the survivors.
    cluster.stop(leader).await?;
    let new_leader = cluster.leader().await?;
    assert_ne!(new_leader, leader);
    let survivor = *cluster.replicas.keys().next().ok_or("no survivor")?;
    let mut s = cluster.client(survivor).await?;
    poll("a join after failover", || {
        let mut s = s.clone();
        async move { Ok(s.join(join("daemon-c")).await.ok().map(|_| ())) }
    })
    .await?;
    let hb = s.heartbeat(heartbeat("daemon-a", 0)).await?.into_inner();
    assert_eq!(hb.lease_ms, LEASE.as_millis() as u64);

    // daemon-c never heartbeats: it is removed after the lease (counted
    // from the join, or from the new leader's start).
    let status = poll("daemon-c removed after its lease", || {
        let mut s = s.clone();
        async move {
            let st = s
                .cluster_status(pb::ClusterStatusRequest {})
                .await?
                .into_inner();
            let t = st.table.clone().unwrap_or_default();
            let gone = !nodes(&t.current).contains(&"daemon-c".to_string())
                && !nodes(&t.next).contains(&"daemon-c".to_string());
            Ok(gone.then_some(st))
        }
    })
    .await?;
    assert!(status.last_heartbeat_ms_ago.contains_key("daemon-a"));
    let hb = s.heartbeat(heartbeat("daemon-c", 0)).await;
    assert_eq!(
        hb.err().map(|e| e.code()),
        Some(tonic::Code::NotFound),
        "a removed member's heartbeat must be refused"
    );

    // Restart the old leader from its data dir: it recovers the
    // membership from its log and snapshot.
    cluster.restart(leader).await?;
    let mut r = cluster.client(leader).await?;
    poll("the restarted replica to know the members", || {
        let mut r = r.clone();
        async move {
            let t = r.get_table(pb::GetTableRequest {}).await?.into_inner();
            let mut n = nodes(&t.current);
            n.sort();
            Ok((n == ["daemon-a", "daemon-b"]).then_some(()))
        }
    })
    .await?;

    // Restart everything: the membership survives a full restart.
    let all: Vec<u64> = cluster.replicas.keys().copied().collect();
    for id in &all {
        cluster.stop(*id).await?;
    }
    for id in &all {
        cluster.restart(*id).await?;
    }
    cluster.leader().await?;
    r = cluster.client(leader).await?;
    let st = r
        .cluster_status(pb::ClusterStatusRequest {})
        .await?
        .into_inner();
    let t = st.table.unwrap_or_default();
    let mut members = nodes(&t.current);
    members.extend(nodes(&t.next));
    assert!(members.contains(&"daemon-a".to_string()), "{members:?}");
    drop(keep_a);
    drop(keep_b);
    for id in all {
        cluster.stop(id).await?;
    }
    Ok(())
}
