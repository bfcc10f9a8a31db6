//! A cluster on loopback for the end-to-end tests: placement replicas and
//! daemons as real processes, each daemon with the harness's counter app,
//! all daemons on one fresh PostgreSQL database.
//!
//! Also the single-activation checker: it reads every daemon's activation
//! log and reports any moment at which two daemons had one actor live.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::bail;
use tokio::process::Command;

use crate::replicas::PlacementCluster;
use crate::tls::TestCa;
use crate::{pb, Client, Daemon, TestApp};

pub fn unix_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A daemon in the cluster with its app attached.
#[derive(Debug)]
pub struct Member {
    pub node: String,
    pub daemon: Daemon,
    pub app: Option<TestApp>,
    pub client: Client,
    _dir: tempfile::TempDir,
}

impl Member {
    /// Starts daemon `node` against `placement` on the shared `store_url`
    /// and attaches a counter app hosting `types`; with `tls`, the daemon
    /// holds member certificate `node` and clients dial it over TLS.
    pub async fn start(
        node: &str,
        placement: &str,
        store_url: &str,
        types: Vec<pb::ActorTypeSpec>,
        extra: &[&str],
        tls: Option<&TestCa>,
    ) -> anyhow::Result<Member> {
        let dir = tempfile::tempdir()?;
        let mut args = vec![
            "--placement",
            placement,
            "--node",
            node,
            "--store",
            store_url,
        ];
        args.extend_from_slice(extra);
        let tls_args = tls.map(|ca| ca.member_args(node)).transpose()?;
        args.extend(tls_args.iter().flatten().map(String::as_str));
        let mut daemon = Daemon::start(dir.path(), &args).await?;
        daemon.tls = tls.map(TestCa::client_connector).transpose()?;
        let app = TestApp::attach_over(daemon.channel().await?, types).await?;
        let client = daemon.client().await?;
        Ok(Member {
            node: node.to_owned(),
            daemon,
            app: Some(app),
            client,
            _dir: dir,
        })
    }
}

impl Member {
    /// Ids of the actors live on this daemon.
    pub async fn live_ids(&self) -> anyhow::Result<Vec<String>> {
        Ok(self
            .daemon
            .actors()
            .await?
            .into_iter()
            .filter_map(|a| a.actor.map(|r| r.id))
            .collect())
    }
}

/// The replicas' addresses, for `--placement`.
pub fn placement_arg(replicas: &PlacementCluster) -> String {
    replicas
        .replicas
        .values()
        .map(|r| r.addr.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// `troupe serve` flags of a cluster daemon `node` with no state to share
/// (`--store memory`), followed by `extra` (e.g. TLS flags).
pub fn memory_member_args(placement: &str, node: &str, extra: Vec<String>) -> Vec<String> {
    let mut args: Vec<String> = [
        "--placement",
        placement,
        "--node",
        node,
        "--store",
        "memory",
    ]
    .map(str::to_owned)
    .into();
    args.extend(extra);
    args
}

/// The status as any live replica answers it.
pub async fn cluster_status(
    replicas: &PlacementCluster,
) -> anyhow::Result<pb::ClusterStatusResponse> {
    let mut last = None;
    for id in replicas.replicas.keys() {
        let answer = async {
            let mut client = replicas.client(*id).await?;
            anyhow::Ok(
                client
                    .cluster_status(pb::ClusterStatusRequest {})
                    .await?
                    .into_inner(),
            )
        };
        match answer.await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no replicas running")))
}

/// Waits until the table is settled (no change in flight) with exactly
/// `nodes` as members, each hosting `actor_type` (a daemon joins before its
/// app attaches; its types reach the table with a later heartbeat);
/// returns its version.
pub async fn settled_with(
    replicas: &PlacementCluster,
    nodes: &[&str],
    actor_type: &str,
) -> anyhow::Result<u64> {
    let mut wanted: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
    wanted.sort();
    crate::poll_until(Duration::from_secs(30), "the table to settle", || {
        let wanted = wanted.clone();
        async move {
            let Ok(status) = cluster_status(replicas).await else {
                return Ok(None);
            };
            let Some(table) = status.table else {
                return Ok(None);
            };
            let Some(current) = table.current else {
                return Ok(None);
            };
            let mut members: Vec<String> = current.members.iter().map(|m| m.node.clone()).collect();
            members.sort();
            let hosting = current
                .members
                .iter()
                .all(|m| m.types.iter().any(|t| t == actor_type));
            Ok((table.next.is_none() && members == wanted && hosting).then_some(current.version))
        }
    })
    .await
}

/// Waits until every member routes by table `version` (or newer) and may
/// serve: placement settling does not mean each daemon heard of it yet.
pub async fn routing_by(members: &[Member], version: u64) -> anyhow::Result<()> {
    for m in members {
        crate::poll_until(
            Duration::from_secs(15),
            "a daemon to route by the table",
            || async {
                let mut admin = m.daemon.admin().await?;
                let status = admin.status(pb::StatusRequest {}).await?.into_inner();
                Ok((status.placement_version >= version && status.serving).then_some(()))
            },
        )
        .await?;
    }
    Ok(())
}

/// One line of a daemon's activation log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivationEvent {
    pub event: String,
    pub actor: String,
    pub node: String,
    pub unix_ms: u64,
}

/// `key=value` (value possibly quoted) from a log line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let start = line.find(&format!(" {key}="))? + key.len() + 2;
    let rest = &line[start..];
    if let Some(quoted) = rest.strip_prefix('"') {
        return quoted.split('"').next();
    }
    rest.split_whitespace().next()
}

/// The activation events (target `troupe::activation`) in a daemon's log.
pub fn activation_events(log: &str) -> Vec<ActivationEvent> {
    log.lines()
        .filter(|l| l.contains("troupe::activation"))
        .filter_map(|l| {
            Some(ActivationEvent {
                event: field(l, "event")?.to_owned(),
                actor: field(l, "actor").unwrap_or_default().to_owned(),
                node: field(l, "node")?.to_owned(),
                unix_ms: field(l, "unix_ms")?.parse().ok()?,
            })
        })
        .collect()
}

/// What the checker found.
#[derive(Debug, Default)]
pub struct CheckReport {
    pub activations: usize,
    pub actors: usize,
    /// (actor, node a, node b, overlap start ms, overlap end ms).
    pub overlaps: Vec<(String, String, String, u64, u64)>,
}

/// Builds each node's live intervals per actor from `events` and finds
/// overlaps between nodes. An interval ends at the node's deactivation, at
/// its `lease_lapsed` event (it serves nothing after its lease), or at the
/// time the test killed it (`ended`: node → unix ms); one still open at the
/// end runs to `until`.
pub fn check_single_activation(
    events: &[ActivationEvent],
    ended: &HashMap<String, u64>,
    until: u64,
) -> CheckReport {
    let mut sorted = events.to_vec();
    sorted.sort_by_key(|e| e.unix_ms);
    // (actor, node) -> start of the open interval.
    let mut open: HashMap<(String, String), u64> = HashMap::new();
    let mut intervals: HashMap<String, Vec<(String, u64, u64)>> = HashMap::new();
    let mut report = CheckReport::default();
    for e in &sorted {
        match e.event.as_str() {
            "activated" => {
                report.activations += 1;
                open.entry((e.actor.clone(), e.node.clone()))
                    .or_insert(e.unix_ms);
            }
            "deactivated" => {
                if let Some(start) = open.remove(&(e.actor.clone(), e.node.clone())) {
                    intervals.entry(e.actor.clone()).or_default().push((
                        e.node.clone(),
                        start,
                        e.unix_ms,
                    ));
                }
            }
            "lease_lapsed" => {
                let closing: Vec<_> = open
                    .keys()
                    .filter(|(_, node)| *node == e.node)
                    .cloned()
                    .collect();
                for key in closing {
                    if let Some(start) = open.remove(&key) {
                        intervals
                            .entry(key.0.clone())
                            .or_default()
                            .push((key.1, start, e.unix_ms));
                    }
                }
            }
            _ => {}
        }
    }
    for ((actor, node), start) in open {
        let end = ended.get(&node).copied().unwrap_or(until);
        intervals.entry(actor).or_default().push((node, start, end));
    }
    report.actors = intervals.len();
    for list in intervals.values_mut() {
        list.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    }
    for (actor, list) in &intervals {
        for (i, a) in list.iter().enumerate() {
            for b in &list[i + 1..] {
                if a.0 == b.0 {
                    continue;
                }
                let (from, to) = (a.1.max(b.1), a.2.min(b.2));
                if from < to {
                    report
                        .overlaps
                        .push((actor.clone(), a.0.clone(), b.0.clone(), from, to));
                }
            }
        }
    }
    report
}

/// p50 and max of `values` (ms).
pub fn p50_max(values: &[u64]) -> (u64, u64) {
    let mut v = values.to_vec();
    v.sort_unstable();
    let p50 = v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0);
    (p50, v.last().copied().unwrap_or(0))
}

/// Sends SIGSTOP or SIGCONT to `pid`.
pub async fn signal(pid: u32, sig: &str) -> anyhow::Result<()> {
    let status = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .await?;
    if !status.success() {
        bail!("kill -{sig} {pid} failed: {status}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, actor: &str, node: &str, unix_ms: u64) -> ActivationEvent {
        ActivationEvent {
            event: event.into(),
            actor: actor.into(),
            node: node.into(),
            unix_ms,
        }
    }

    #[test]
    fn the_checker_finds_overlaps_and_only_them() {
        let events = [
            ev("activated", "c/1", "a", 10),
            ev("deactivated", "c/1", "a", 20),
            ev("activated", "c/1", "b", 20),
            // b's lease lapsed at 30: its activation ended then, even though
            // it logged nothing else (it was paused).
            ev("lease_lapsed", "", "b", 30),
            ev("activated", "c/1", "c", 31),
            ev("activated", "c/2", "a", 40),
            ev("activated", "c/2", "c", 45),
        ];
        let report = check_single_activation(&events, &HashMap::new(), 100);
        assert_eq!(report.activations, 5);
        assert_eq!(
            report.overlaps,
            vec![("c/2".to_owned(), "a".to_owned(), "c".to_owned(), 45, 100)]
        );
        // A node killed at 44 ends its intervals there.
        let killed = HashMap::from([("a".to_owned(), 44)]);
        assert!(check_single_activation(&events, &killed, 100)
            .overlaps
            .is_empty());
    }

    #[test]
    fn log_fields_parse_quoted_or_bare() {
        let line = r#"2026-11-21T07:00:00Z  INFO troupe::activation: activation event="activated" actor=counter/c1 node=d1 unix_ms=123"#;
        assert_eq!(
            activation_events(line),
            vec![ev("activated", "counter/c1", "d1", 123)]
        );
    }
}
