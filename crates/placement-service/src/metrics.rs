//! What a replica tells Prometheus: its Raft role and progress, the
//! leader's view of the followers and of the daemons' heartbeats, and the
//! placement table it applied. Read from Raft's own metrics and the
//! service's state when scraped; the one thing counted as it happens is a
//! change of leader, by a task watching Raft's metrics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use openraft::{BasicNode, RaftMetrics};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use tokio::sync::watch;

use crate::grpc::{PlacementService, WeakService};

/// A replica's metrics, cheap to clone. It does not keep the replica (and
/// its store) alive: once the replica stopped, a scrape finds nothing to
/// show, and an endpoint still serving never holds up the store's closing.
#[derive(Debug, Clone)]
pub struct ReplicaMetrics {
    service: WeakService,
    leader_changes: LeaderChanges,
}

/// The replica while a scrape reads it.
struct Live {
    service: PlacementService,
    leader_changes: LeaderChanges,
}

/// The leaders this replica has seen take over, the first included.
#[derive(Debug, Clone, Default)]
pub(crate) struct LeaderChanges(Arc<AtomicU64>);

impl LeaderChanges {
    /// Counts each leader that becomes known and differs from the last
    /// one known, until `stop` turns true or Raft shuts down. A term
    /// without a leader (an election) does not count by itself.
    pub(crate) async fn watch(
        self,
        mut metrics: watch::Receiver<RaftMetrics<u64, BasicNode>>,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut known = None;
        loop {
            let leader = metrics.borrow_and_update().current_leader;
            if leader.is_some() && leader != known {
                self.0.fetch_add(1, Ordering::Relaxed);
                known = leader;
            }
            tokio::select! {
                changed = metrics.changed() => if changed.is_err() { return },
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
        }
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Version {
    version: &'static str,
    id: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReplicaLabel {
    replica: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabel {
    node: String,
}

type Seconds = Gauge<f64, AtomicU64>;

fn gauge(value: u64) -> Gauge {
    let g = Gauge::default();
    g.set(i64::try_from(value).unwrap_or(i64::MAX));
    g
}

fn seconds(value: f64) -> Seconds {
    let g = Seconds::default();
    g.set(value);
    g
}

impl ReplicaMetrics {
    pub(crate) fn new(service: &PlacementService, leader_changes: LeaderChanges) -> Self {
        Self {
            service: service.downgrade(),
            leader_changes,
        }
    }

    /// Appends the families to `out`, OpenMetrics text ending in `# EOF`
    /// (only that once the replica stopped).
    pub fn encode(&self, out: &mut String) -> std::fmt::Result {
        let mut registry = Registry::with_prefix("troupe_placement");
        if let Some(service) = self.service.upgrade() {
            let live = Live {
                service,
                leader_changes: self.leader_changes.clone(),
            };
            live.register(&mut registry);
        }
        prometheus_client::encoding::text::encode(out, &registry)
    }
}

impl Live {
    fn register(&self, registry: &mut Registry) {
        let raft = self.service.raft().metrics().borrow().clone();
        let info: Family<Version, Gauge> = Family::default();
        info.get_or_create(&Version {
            version: env!("CARGO_PKG_VERSION"),
            id: self.service.id().to_string(),
        })
        .set(1);
        registry.register("replica_info", "The replica's version and Raft id", info);
        self.encode_raft(&raft, registry);
        self.encode_table(registry);
    }

    fn encode_raft(&self, raft: &RaftMetrics<u64, BasicNode>, registry: &mut Registry) {
        let own = self.service.id();
        let leads = raft.current_leader == Some(own);
        registry.register("raft_term", "The Raft term", gauge(raft.current_term));
        registry.register(
            "raft_leader",
            "1 on the replica that leads, else 0",
            gauge(u64::from(leads)),
        );
        registry.register(
            "raft_has_leader",
            "1 while this replica knows a leader, else 0 (an election, or no quorum)",
            gauge(u64::from(raft.current_leader.is_some())),
        );
        let leader_changes = Counter::<u64>::default();
        leader_changes.inc_by(self.leader_changes.get());
        registry.register(
            "raft_leader_changes",
            "Leaders this replica has seen take over since it started, the first included",
            leader_changes,
        );
        let last_log = raft.last_log_index.unwrap_or(0);
        registry.register(
            "raft_last_log_index",
            "The last entry in this replica's log",
            gauge(last_log),
        );
        registry.register(
            "raft_applied_index",
            "The last entry this replica applied to its placement state",
            gauge(raft.last_applied.map_or(0, |l| l.index)),
        );
        let membership = raft.membership_config.membership();
        registry.register(
            "raft_voters",
            "Voting replicas in the membership",
            gauge(membership.voter_ids().count() as u64),
        );
        registry.register(
            "raft_learners",
            "Replicas catching up before they vote",
            gauge(membership.learner_ids().count() as u64),
        );
        if !leads {
            return;
        }
        // The leader's view: how far behind each follower is, and how long
        // since a quorum last acknowledged it (a leader cut off from the
        // others keeps believing it leads until that grows past a timeout).
        let lag: Family<ReplicaLabel, Gauge> = Family::default();
        for (id, matched) in raft.replication.iter().flatten() {
            if *id == own {
                continue;
            }
            let matched = matched.as_ref().map_or(0, |l| l.index);
            lag.get_or_create(&ReplicaLabel {
                replica: id.to_string(),
            })
            .set(i64::try_from(last_log.saturating_sub(matched)).unwrap_or(i64::MAX));
        }
        registry.register(
            "raft_replication_lag_entries",
            "On the leader: entries each follower has yet to take",
            lag,
        );
        if let Some(ms) = raft.millis_since_quorum_ack {
            registry.register_with_unit(
                "raft_quorum_ack_age",
                "On the leader: time since a quorum last acknowledged it",
                Unit::Seconds,
                seconds(ms as f64 / 1000.0),
            );
        }
    }

    fn encode_table(&self, registry: &mut Registry) {
        let table = self.service.applied_table();
        registry.register(
            "table_version",
            "The placement table version this replica applied",
            gauge(table.current.version),
        );
        registry.register(
            "daemons",
            "Daemons in the placement table",
            gauge(table.current.members.len() as u64),
        );
        registry.register(
            "table_changing",
            "1 while a new table waits for the daemons to drain for it, else 0",
            gauge(u64::from(table.next.is_some())),
        );
        registry.register(
            "table_waiting_for_daemons",
            "Daemons a new table still waits to hear drained",
            gauge(table.waiting_for.len() as u64),
        );
        registry.register_with_unit(
            "lease",
            "A daemon is removed after this long without a heartbeat (--lease)",
            Unit::Seconds,
            seconds(self.service.lease().as_secs_f64()),
        );
        let ages = self.service.heartbeat_ages(Instant::now());
        if ages.is_empty() {
            return;
        }
        let family: Family<NodeLabel, Seconds> = Family::default();
        for (node, age) in ages {
            family
                .get_or_create(&NodeLabel { node })
                .set(age.as_secs_f64());
        }
        registry.register_with_unit(
            "daemon_heartbeat_age",
            "On the leader: time since each daemon's last heartbeat (removed past the lease)",
            Unit::Seconds,
            family,
        );
    }
}
