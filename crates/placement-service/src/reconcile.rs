//! The leader's membership loop: probes the replicas, turns what it sees
//! into `membership::next_step` and applies that step through openraft.
//! Runs on every replica; acts only while this one leads.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers, Raft};
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::membership::{next_step, Observed, Step};
use crate::peers::Peers;
use crate::TypeConfig;

/// How often the leader looks at the membership.
const EVERY: Duration = Duration::from_secs(1);
/// A probe not answered within this counts as a miss.
const PROBE_TIMEOUT: Duration = Duration::from_millis(800);
/// An unlisted replica is removed only after this long without answering:
/// longer than a process restart, so a replica restarting with the new list
/// is not mistaken for one that was stopped for good.
pub const REMOVE_GRACE: Duration = Duration::from_secs(10);
/// Bound on one membership change (both joint-consensus steps).
const CHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a step was not applied; the next round tries again.
#[derive(Debug, thiserror::Error)]
enum ChangeError {
    #[error("openraft refused the change: {0}")]
    Refused(Box<RaftError<u64, ClientWriteError<u64, BasicNode>>>),
    #[error("the change did not commit within {CHANGE_TIMEOUT:?}")]
    Timeout,
}

pub(crate) struct Reconciler {
    id: u64,
    raft: Raft<TypeConfig>,
    /// The list the membership moves toward: `--peers`, or the file
    /// re-read at the start of every round.
    peers: Peers,
    tls: Option<troupe_tls::Connector>,
    /// Health clients by (replica, address).
    clients: HashMap<(u64, String), HealthClient<Channel>>,
    /// The term this replica leads in, and since when; `None`: not leading.
    leading: Option<(u64, Instant)>,
    last_ok: HashMap<u64, Instant>,
}

impl Reconciler {
    pub(crate) fn new(
        id: u64,
        raft: Raft<TypeConfig>,
        peers: Peers,
        tls: Option<troupe_tls::Connector>,
    ) -> Self {
        Reconciler {
            id,
            raft,
            peers,
            tls,
            clients: HashMap::new(),
            leading: None,
            last_ok: HashMap::new(),
        }
    }

    pub(crate) async fn run(mut self, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
            self.round().await;
        }
    }

    async fn round(&mut self) {
        // Every replica follows its file, not only the leader: forwarding
        // and Raft RPCs use the addresses too, and a follower may lead next.
        self.peers.reload();
        let desired = self.peers.current();
        let metrics = self.raft.metrics().borrow().clone();
        if metrics.current_leader != Some(self.id) {
            self.leading = None;
            return;
        }
        let now = Instant::now();
        // A new term starts every clock afresh: what an earlier term saw
        // may be stale, and it can only delay a removal.
        let since = match self.leading {
            Some((term, since)) if term == metrics.current_term => since,
            _ => {
                self.leading = Some((metrics.current_term, now));
                self.last_ok.clear();
                now
            }
        };
        let membership = metrics.membership_config.membership();
        let mut targets: BTreeMap<u64, String> = membership
            .nodes()
            .map(|(id, node)| (*id, node.addr.clone()))
            .collect();
        // The list's address wins, as for Raft RPCs (`network`): a replica
        // is probed where the other replicas reach it.
        targets.extend(desired.iter().map(|(id, addr)| (*id, addr.clone())));
        targets.remove(&self.id);
        self.clients
            .retain(|(id, addr), _| targets.get(id).is_some_and(|a| a == addr));
        let reachable = self.probe(&targets).await;
        let now = Instant::now();
        for id in &reachable {
            self.last_ok.insert(*id, now);
        }
        let gone = targets
            .keys()
            .filter(|id| {
                let heard = self.last_ok.get(id).map_or(since, |t| (*t).max(since));
                now.saturating_duration_since(heard) >= REMOVE_GRACE
            })
            .copied()
            .collect();
        let matched = metrics
            .replication
            .iter()
            .flatten()
            .map(|(id, log)| (*id, log.as_ref().map_or(0, |l| l.index)))
            .collect();
        let seen = Observed {
            configs: membership.get_joint_config().clone(),
            learners: membership.learner_ids().collect(),
            reachable: reachable.into_iter().chain([self.id]).collect(),
            gone,
            matched,
            last_index: metrics.last_log_index.unwrap_or(0),
        };
        let Some(step) = next_step(&desired, &seen) else {
            return;
        };
        tracing::info!(step = ?step, voters = ?seen.configs, learners = ?seen.learners, reachable = ?seen.reachable, "placement membership change proposed");
        match self.apply(&step).await {
            Ok(()) => log_applied(&step),
            Err(e) => {
                tracing::warn!(step = ?step, error = %e, "placement membership change not made; retrying")
            }
        }
    }

    /// The replicas among `targets` that answer a health check now.
    async fn probe(&mut self, targets: &BTreeMap<u64, String>) -> BTreeSet<u64> {
        let mut checks = tokio::task::JoinSet::new();
        for (id, addr) in targets {
            let Some(mut client) = self.client(*id, addr) else {
                continue;
            };
            let id = *id;
            checks.spawn(async move {
                let request = HealthCheckRequest {
                    service: "troupe.v1.Placement".into(),
                };
                let answer = tokio::time::timeout(PROBE_TIMEOUT, client.check(request)).await;
                // A replica that is stopping says NOT_SERVING: as good as gone.
                let serving = matches!(answer, Ok(Ok(r)) if r.get_ref().status == ServingStatus::Serving as i32);
                (id, serving)
            });
        }
        let mut up = BTreeSet::new();
        while let Some(done) = checks.join_next().await {
            if let Ok((id, true)) = done {
                up.insert(id);
            }
        }
        up
    }

    fn client(&mut self, id: u64, addr: &str) -> Option<HealthClient<Channel>> {
        let key = (id, addr.to_owned());
        if let Some(c) = self.clients.get(&key) {
            return Some(c.clone());
        }
        let endpoint = match Endpoint::from_shared(format!("http://{addr}")) {
            Ok(e) => e.connect_timeout(PROBE_TIMEOUT),
            Err(e) => {
                tracing::warn!(replica = id, %addr, error = %e, "replica address is not a valid host:port; not probing it");
                return None;
            }
        };
        let channel = match &self.tls {
            Some(tls) => endpoint.connect_with_connector_lazy(tls.clone()),
            None => endpoint.connect_lazy(),
        };
        let client = HealthClient::new(channel);
        self.clients.insert(key, client.clone());
        Some(client)
    }

    async fn apply(&self, step: &Step) -> Result<(), ChangeError> {
        let change = async {
            match step {
                Step::AddLearner { id, addr } => {
                    let node = BasicNode { addr: addr.clone() };
                    self.raft.add_learner(*id, node, false).await
                }
                Step::FinishJoint { voters }
                | Step::Promote { voters, .. }
                | Step::RemoveVoters { voters, .. } => {
                    let change = ChangeMembers::ReplaceAllVoters(voters.clone());
                    self.raft.change_membership(change, false).await
                }
                Step::RemoveLearners { ids } => {
                    let change = ChangeMembers::RemoveNodes(ids.clone());
                    self.raft.change_membership(change, false).await
                }
            }
        };
        match tokio::time::timeout(CHANGE_TIMEOUT, change).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(ChangeError::Refused(Box::new(e))),
            Err(_) => Err(ChangeError::Timeout),
        }
    }
}

fn log_applied(step: &Step) {
    match step {
        Step::FinishJoint { voters } => {
            tracing::info!(
                change = "finish_joint",
                ?voters,
                "placement membership changed"
            )
        }
        Step::AddLearner { id, addr } => {
            tracing::info!(change = "add_learner", replica = id, %addr, "placement membership changed")
        }
        Step::Promote { voters, added } => {
            tracing::info!(
                change = "promote",
                ?added,
                ?voters,
                "placement membership changed"
            )
        }
        Step::RemoveVoters { voters, removed } => {
            tracing::info!(
                change = "remove_voters",
                ?removed,
                ?voters,
                "placement membership changed"
            )
        }
        Step::RemoveLearners { ids } => {
            tracing::info!(change = "remove_learners", removed = ?ids, "placement membership changed")
        }
    }
}
