//! The `troupe.v1.Placement` service of one replica.
//!
//! This module owns what a replica answers. Daemon requests are handled by
//! the Raft leader; followers forward them (one hop: a forwarded request
//! reaching a non-leader is refused, so two replicas with different ideas of
//! the leader cannot bounce it around). The leader's soft state (leases,
//! drain reports) and the tick that expires members and promotes tables are
//! in `leader`.
//!
//! Lease safety needs every acknowledged heartbeat to come from a replica
//! that was still the leader after it received it: a deposed leader that
//! does not know it yet would otherwise renew a lease the new leader is not
//! counting. So a heartbeat is answered only after a quorum confirms this
//! replica's leadership (openraft's read index).
//!
//! - this file: the service's state, Raft writes and leadership checks, and
//!   the leader's tick;
//! - `daemons`: the `Placement` handlers (join, heartbeat, leave, table,
//!   status);
//! - `forward`: routing a request to the leader when this replica is not it;
//! - `raft`: the server side of replica-to-replica Raft RPCs.

mod daemons;
mod forward;
mod raft;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
use std::time::{Duration, Instant};

use openraft::error::{ClientWriteError, RaftError};
use openraft::Raft;
use tonic::transport::Channel;
use tonic::Status;
use troupe_proto::v1::placement_client::PlacementClient;

use super::leader::{decide, Soft};
use super::peers::Peers;
use super::state::Command;
use super::store::{Applied, LogStore};
use super::TypeConfig;
use troupe_placement::table::Table;

/// Bound on a Raft write or leadership check: without a quorum it never
/// completes, and the daemon should retry elsewhere rather than hang.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// One replica's service; cheap to clone.
#[derive(Clone)]
pub struct PlacementService {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PlacementService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlacementService")
            .field("id", &self.inner.id)
            .field("peers", &self.inner.peers.current())
            .finish_non_exhaustive()
    }
}

struct Inner {
    id: u64,
    raft: Raft<TypeConfig>,
    applied: Arc<RwLock<Applied>>,
    log: LogStore,
    /// The replica list now (`--peers`, or `--peers-file` as last read).
    peers: Peers,
    lease: Duration,
    heartbeat: Duration,
    /// mTLS to the other replicas, when on.
    tls: Option<troupe_tls::Connector>,
    soft: Mutex<Soft>,
    /// Clients of the leader by (replica, address): a replica whose address
    /// changed in the list gets a new one.
    leaders: Mutex<HashMap<(u64, String), PlacementClient<Channel>>>,
}

/// A handle that does not keep the service (and with it the Raft node and
/// its store) alive: what lives as long as a metrics endpoint may, which
/// must not hold up the store's closing when the replica stops.
#[derive(Clone, Debug)]
pub(crate) struct WeakService(Weak<Inner>);

impl WeakService {
    /// The service, while the replica has not dropped it.
    pub(crate) fn upgrade(&self) -> Option<PlacementService> {
        self.0.upgrade().map(|inner| PlacementService { inner })
    }
}

impl PlacementService {
    pub(crate) fn downgrade(&self) -> WeakService {
        WeakService(Arc::downgrade(&self.inner))
    }

    pub(crate) fn new(
        config: &crate::ServiceConfig,
        peers: Peers,
        raft: Raft<TypeConfig>,
        applied: Arc<RwLock<Applied>>,
        log: LogStore,
    ) -> Self {
        PlacementService {
            inner: Arc::new(Inner {
                id: config.id,
                raft,
                applied,
                log,
                peers,
                lease: config.lease,
                heartbeat: config.heartbeat,
                tls: config.tls.clone().map(troupe_tls::Connector::to_members),
                soft: Mutex::new(Soft {
                    term: None,
                    since: Instant::now(),
                    last_heard: HashMap::new(),
                    drained: HashMap::new(),
                }),
                leaders: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// This replica's id.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The Raft node.
    pub fn raft(&self) -> &Raft<TypeConfig> {
        &self.inner.raft
    }

    /// The leader this replica knows of, if any.
    pub fn leader(&self) -> Option<u64> {
        self.inner.raft.metrics().borrow().current_leader
    }

    /// The table as applied on this replica (without drain reports).
    pub fn applied_table(&self) -> Table {
        self.read_applied().state.table()
    }

    fn read_applied(&self) -> std::sync::RwLockReadGuard<'_, Applied> {
        // Writers replace or mutate the state with infallible code; a
        // poisoned lock cannot hide a half-applied entry.
        self.inner.applied.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The soft state for the current term, reset when the term changed.
    fn soft(&self) -> MutexGuard<'_, Soft> {
        let term = self.inner.raft.metrics().borrow().current_term;
        let mut soft = self.inner.soft.lock().unwrap_or_else(|e| e.into_inner());
        if soft.term != Some(term) {
            *soft = Soft {
                term: Some(term),
                since: Instant::now(),
                last_heard: HashMap::new(),
                drained: HashMap::new(),
            };
        }
        soft
    }

    /// On the leader, how long ago each member of the applied table last
    /// heartbeated (counted from this leader's start at most); elsewhere
    /// nothing, since only the leader hears heartbeats.
    pub(crate) fn heartbeat_ages(&self, now: Instant) -> Vec<(String, Duration)> {
        if self.leader() != Some(self.inner.id) {
            return Vec::new();
        }
        let members = self.applied_table().current.members;
        let soft = self.soft();
        members
            .into_iter()
            .map(|m| {
                let age = now.saturating_duration_since(soft.clock(&m.node));
                (m.node, age)
            })
            .collect()
    }

    /// A member is removed after this long without a heartbeat.
    pub(crate) fn lease(&self) -> Duration {
        self.inner.lease
    }

    fn lease_ms(&self) -> u64 {
        u64::try_from(self.inner.lease.as_millis()).unwrap_or(u64::MAX)
    }

    fn heartbeat_ms(&self) -> u64 {
        u64::try_from(self.inner.heartbeat.as_millis()).unwrap_or(u64::MAX)
    }

    /// The table with `waiting_for` narrowed by the drain reports received.
    fn table(&self) -> Table {
        let mut table = self.applied_table();
        if let Some(next) = &table.next {
            let soft = self.soft();
            table
                .waiting_for
                .retain(|n| soft.drained.get(n).copied().unwrap_or(0) < next.version);
        }
        table
    }

    async fn write(&self, command: Command) -> Result<Table, Status> {
        let what = format!("{command:?}");
        match tokio::time::timeout(WRITE_TIMEOUT, self.inner.raft.client_write(command)).await {
            Ok(Ok(r)) => Ok(r.data),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_)))) => {
                Err(Status::unavailable(
                    "this placement replica lost the leadership while writing; retry",
                ))
            }
            Ok(Err(RaftError::APIError(e))) => Err(Status::internal(format!(
                "placement could not record {what}: {e}"
            ))),
            Ok(Err(RaftError::Fatal(e))) => Err(Status::unavailable(format!(
                "this placement replica is stopping ({e}); retry against another replica"
            ))),
            Err(_) => Err(Status::unavailable(format!(
                "placement could not commit {what} within {WRITE_TIMEOUT:?}: a majority of \
                 replicas is not reachable; retry"
            ))),
        }
    }

    /// Confirms with a quorum that this replica still leads, after the
    /// request being answered was received.
    async fn confirm_leader(&self) -> Result<(), Status> {
        match tokio::time::timeout(WRITE_TIMEOUT, self.inner.raft.ensure_linearizable()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(Status::unavailable(format!(
                "this placement replica is not the leader any more ({e}); retry"
            ))),
            Err(_) => Err(Status::unavailable(format!(
                "placement could not confirm its leadership within {WRITE_TIMEOUT:?}: a majority \
                 of replicas is not reachable; retry"
            ))),
        }
    }

    /// Runs on every replica; acts only while this one leads: removes
    /// members silent for longer than the lease, promotes `next` once
    /// everyone it waits for has drained.
    pub(crate) async fn leader_loop(self, mut stop: tokio::sync::watch::Receiver<bool>) {
        // A fifth of the heartbeat: a crashed member's removal (and with it
        // the failover) follows its lease's end closely.
        let mut tick = tokio::time::interval(self.inner.heartbeat / 5);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
            if self.leader() != Some(self.inner.id) {
                continue;
            }
            if let Some(command) = self.leader_decision(Instant::now()) {
                let what = format!("{command:?}");
                match self.write(command).await {
                    Ok(table) => tracing::info!(
                        command = %what,
                        current = table.current.version,
                        next = table.next.as_ref().map_or(0, |n| n.version),
                        "placement change recorded"
                    ),
                    Err(e) => {
                        tracing::warn!(command = %what, error = %e.message(), "placement change not recorded")
                    }
                }
            }
        }
    }

    /// What the leader should propose now, if anything.
    fn leader_decision(&self, now: Instant) -> Option<Command> {
        let applied = self.read_applied();
        let mut soft = self.soft();
        decide(&applied.state, &mut soft, now, self.inner.lease)
    }
}
