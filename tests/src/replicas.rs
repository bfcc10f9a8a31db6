//! Placement replicas as real `troupe placement serve` processes on
//! loopback, and a daemon's view of them (Join/Heartbeat by hand).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::process::{Child, Command};
use tonic::transport::Channel;

use crate::tls::TestCa;
use crate::{pb, poll_until, troupe_bin, within, WAIT};

pub type PlacementClient = pb::placement_client::PlacementClient<Channel>;

/// A free loopback port for a process started later (replicas need their
/// peers' ports before they start).
///
/// Not from `bind(0)`: that hands out ports of the ephemeral range, which
/// every outgoing connection on the machine also draws from, so a port
/// picked there was seen taken by a client socket by the time its replica
/// started seconds later. Below that range only listeners that name their
/// port land; a random one that binds now is very likely still free then.
pub fn free_port() -> anyhow::Result<u16> {
    let low = ephemeral_low().unwrap_or(32768);
    let base: u16 = 10_000;
    let span = low.saturating_sub(base).max(1);
    for attempt in 0..1_000u64 {
        let random = {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(attempt);
            h.write_u32(std::process::id());
            h.finish()
        };
        let port = base.saturating_add(u16::try_from(random % u64::from(span)).unwrap_or(0));
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    // Nothing free below the range (unlikely): the ephemeral range after all.
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// The first port of the kernel's ephemeral range, where it says.
fn ephemeral_low() -> Option<u16> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// One `troupe placement serve` process. Killed when dropped.
#[derive(Debug)]
pub struct PlacementReplica {
    pub id: u64,
    pub addr: SocketAddr,
    child: Child,
    log: tempfile::NamedTempFile,
    /// How the harness dials it when it has TLS on (as a member).
    tls: Option<troupe_tls::Connector>,
}

impl PlacementReplica {
    /// Starts a replica and waits for its "troupe placement listening on
    /// ADDR" line.
    pub async fn start(
        id: u64,
        listen: &str,
        data_dir: &Path,
        peers: Option<&str>,
        extra_args: &[&str],
    ) -> anyhow::Result<PlacementReplica> {
        let log = tempfile::Builder::new()
            .prefix(&format!("troupe-placement-{id}-"))
            .suffix(".log")
            .tempfile()?;
        let mut cmd = Command::new(troupe_bin());
        cmd.args([
            "placement",
            "serve",
            "--id",
            &id.to_string(),
            "--listen",
            listen,
        ])
        .arg("--data-dir")
        .arg(data_dir);
        if let Some(peers) = peers {
            cmd.args(["--peers", peers]);
        }
        cmd.args(extra_args).env(
            "RUST_LOG",
            "troupe=info,troupe_placement_service=info,troupe_tls=info,openraft=warn",
        );
        let (child, addr) =
            crate::spawn_announced(cmd, &log, "troupe placement listening on ").await?;
        Ok(PlacementReplica {
            id,
            addr,
            child,
            log,
            tls: None,
        })
    }

    /// The replica's stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    pub fn pid(&self) -> anyhow::Result<u32> {
        self.child.id().context("the replica has already exited")
    }

    pub async fn client(&self) -> anyhow::Result<PlacementClient> {
        let endpoint =
            Channel::from_shared(format!("http://{}", self.addr))?.timeout(Duration::from_secs(10));
        let channel = crate::tls::connect(endpoint, self.tls.as_ref()).await?;
        Ok(PlacementClient::new(channel))
    }

    /// SIGTERM, then waits (bounded) for the exit.
    pub async fn terminate(&mut self) -> anyhow::Result<ExitStatus> {
        let pid = self.child.id().context("the replica has already exited")?;
        let status = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await?;
        if !status.success() {
            bail!("kill -TERM {pid} failed: {status}");
        }
        match within(WAIT, "the replica to exit after SIGTERM", self.child.wait()).await {
            Ok(status) => Ok(status?),
            Err(e) => {
                let _ = self.child.start_kill();
                Err(e.context(self.log()))
            }
        }
    }

    /// SIGKILL, then waits for the exit.
    pub async fn kill9(&mut self) -> anyhow::Result<()> {
        self.child.start_kill()?;
        within(WAIT, "the replica to die", self.child.wait()).await??;
        Ok(())
    }
}

/// Replicas 1..=n on fixed loopback ports, each with its own data dir.
#[derive(Debug)]
pub struct PlacementCluster {
    pub dir: tempfile::TempDir,
    pub peers: BTreeMap<u64, String>,
    pub replicas: BTreeMap<u64, PlacementReplica>,
    extra_args: Vec<String>,
    /// mTLS among the replicas and with their callers, when set.
    pub tls: Option<Arc<TestCa>>,
}

impl PlacementCluster {
    /// Starts `n` replicas with `extra_args` (e.g. `--lease 1s`).
    pub async fn start(n: u64, extra_args: &[&str]) -> anyhow::Result<PlacementCluster> {
        Self::start_with_tls(n, extra_args, None).await
    }

    /// [`PlacementCluster::start`], with mTLS from `tls` when given:
    /// replica `id` holds member certificate `p{id}`.
    pub async fn start_with_tls(
        n: u64,
        extra_args: &[&str],
        tls: Option<Arc<TestCa>>,
    ) -> anyhow::Result<PlacementCluster> {
        let mut peers = BTreeMap::new();
        for id in 1..=n {
            peers.insert(id, format!("127.0.0.1:{}", free_port()?));
        }
        let mut cluster = PlacementCluster {
            dir: tempfile::tempdir()?,
            peers,
            replicas: BTreeMap::new(),
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            tls,
        };
        for id in 1..=n {
            cluster.start_replica(id).await?;
        }
        Ok(cluster)
    }

    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("replica-{id}"))
    }

    fn peers_arg(&self) -> String {
        self.peers
            .iter()
            .map(|(id, a)| format!("{id}={a}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// (Re)starts replica `id` on its port and data dir.
    pub async fn start_replica(&mut self, id: u64) -> anyhow::Result<()> {
        let listen = self.peers.get(&id).context("no such replica")?.clone();
        let mut extra_args = self.extra_args.clone();
        let name = format!("p{id}");
        if let Some(ca) = &self.tls {
            extra_args.extend(ca.member_args(&name)?);
        }
        let extra: Vec<&str> = extra_args.iter().map(String::as_str).collect();
        let mut r = PlacementReplica::start(
            id,
            &listen,
            &self.data_dir(id),
            Some(&self.peers_arg()),
            &extra,
        )
        .await?;
        r.tls = self
            .tls
            .as_ref()
            .map(|ca| ca.member_connector(&name))
            .transpose()?;
        self.replicas.insert(id, r);
        Ok(())
    }

    pub async fn client(&self, id: u64) -> anyhow::Result<PlacementClient> {
        self.replicas
            .get(&id)
            .context("replica not running")?
            .client()
            .await
    }

    /// Waits until every running replica names the same running leader.
    pub async fn leader(&self) -> anyhow::Result<u64> {
        let ids: Vec<u64> = self.replicas.keys().copied().collect();
        poll_until(WAIT, "a placement leader all replicas agree on", || async {
            let mut seen: Option<String> = None;
            for id in &ids {
                let Ok(mut c) = self.client(*id).await else {
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
                .filter(|l| ids.contains(l)))
        })
        .await
    }

    /// All replicas' logs, for failure messages.
    pub fn logs(&self) -> String {
        self.replicas
            .values()
            .map(|r| format!("--- replica {} ---\n{}", r.id, r.log()))
            .collect()
    }
}

/// A Join as a daemon named `node` hosting `types` sends it.
pub fn join_request(node: &str, types: &[&str]) -> pb::JoinRequest {
    pb::JoinRequest {
        node: node.into(),
        address: format!("127.0.0.1:{}", 20000 + node.len()),
        types: types.iter().map(|t| t.to_string()).collect(),
    }
}

/// A Heartbeat that knows no table (so the answer always carries one).
pub fn heartbeat_request(node: &str, drained: u64, types: &[&str]) -> pb::HeartbeatRequest {
    pb::HeartbeatRequest {
        node: node.into(),
        drained_version: drained,
        known_current: 0,
        known_next: 0,
        types: types.iter().map(|t| t.to_string()).collect(),
    }
}

/// Node names of a table version.
pub fn table_nodes(t: Option<&pb::TableVersion>) -> Vec<String> {
    t.map(|v| v.members.iter().map(|m| m.node.clone()).collect())
        .unwrap_or_default()
}

/// Heartbeats for `node` every `every`, reporting drained for any pending
/// table, rotating over `clients` (errors are retried on the next one),
/// until the returned sender is dropped.
pub fn keep_alive(
    clients: Vec<PlacementClient>,
    node: &str,
    types: &[&str],
    every: Duration,
) -> tokio::sync::oneshot::Sender<()> {
    let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
    let node = node.to_owned();
    let types: Vec<String> = types.iter().map(|t| t.to_string()).collect();
    tokio::spawn(async move {
        let mut drained = 0;
        let mut i = 0usize;
        loop {
            if clients.is_empty() {
                return;
            }
            let mut c = clients[i % clients.len()].clone();
            i += 1;
            let req = pb::HeartbeatRequest {
                node: node.clone(),
                drained_version: drained,
                known_current: 0,
                known_next: 0,
                types: types.clone(),
            };
            if let Ok(r) = c.heartbeat(req).await {
                if let Some(next) = r.into_inner().table.and_then(|t| t.next) {
                    drained = next.version;
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = &mut rx => return,
            }
        }
    });
    tx
}
