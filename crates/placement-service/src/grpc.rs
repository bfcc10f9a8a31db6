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

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use openraft::error::{ClientWriteError, RaftError};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::Raft;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};
use troupe_proto::v1 as pb;
use troupe_proto::v1::placement_client::PlacementClient;

use super::leader::{decide, Soft};
use super::network::{APPEND_ENTRIES, INSTALL_SNAPSHOT, VOTE};
use super::state::{types_differ, Command};
use super::status::{address_of, replicas};
use super::store::{Applied, LogStore};
use super::TypeConfig;
use troupe_placement::table::{Member, Table};

use crate::convert::table_to_pb;

/// Set on requests a follower forwards, so they are never forwarded again.
const FORWARDED: &str = "troupe-placement-forwarded";
/// Bound on a Raft write or leadership check: without a quorum it never
/// completes, and the daemon should retry elsewhere rather than hang.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on a forwarded request.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(8);

/// One replica's service; cheap to clone.
#[derive(Clone)]
pub struct PlacementService {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PlacementService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlacementService")
            .field("id", &self.inner.id)
            .field("peers", &self.inner.peers)
            .finish_non_exhaustive()
    }
}

struct Inner {
    id: u64,
    raft: Raft<TypeConfig>,
    applied: Arc<RwLock<Applied>>,
    log: LogStore,
    peers: BTreeMap<u64, String>,
    lease: Duration,
    heartbeat: Duration,
    /// mTLS to the other replicas, when on.
    tls: Option<troupe_tls::Connector>,
    soft: Mutex<Soft>,
    leaders: Mutex<HashMap<u64, PlacementClient<Channel>>>,
}

enum Route {
    Local,
    Forward(PlacementClient<Channel>),
}

impl PlacementService {
    pub(super) fn new(
        config: &super::ServiceConfig,
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
                peers: config.peers.clone(),
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

    fn route<T>(&self, request: &Request<T>) -> Result<Route, Status> {
        match self.leader() {
            Some(id) if id == self.inner.id => Ok(Route::Local),
            Some(_) if request.metadata().contains_key(FORWARDED) => Err(Status::unavailable(
                "placement leadership is changing (the replica this request was forwarded to is \
                 no longer the leader); retry",
            )),
            Some(id) => Ok(Route::Forward(self.leader_client(id)?)),
            None => Err(Status::unavailable(
                "no placement leader: an election is in progress; retry shortly",
            )),
        }
    }

    fn leader_client(&self, id: u64) -> Result<PlacementClient<Channel>, Status> {
        let mut clients = self.inner.leaders.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = clients.get(&id) {
            return Ok(c.clone());
        }
        // A leader missing from --peers was added by a leader with a newer
        // list (a scale-up in progress): the membership has its address.
        let metrics = self.inner.raft.metrics().borrow().clone();
        let addr = address_of(id, &self.inner.peers, &metrics).ok_or_else(|| {
            Status::unavailable(format!(
                "the placement leader is replica {id}, which is neither in this replica's \
                 --peers nor in the Raft membership it knows; retry"
            ))
        })?;
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| {
                Status::internal(format!(
                    "replica {id} address {addr:?} is not a valid host:port: {e}"
                ))
            })?
            .connect_timeout(Duration::from_secs(1))
            .timeout(FORWARD_TIMEOUT);
        let channel = match &self.inner.tls {
            Some(tls) => endpoint.connect_with_connector_lazy(tls.clone()),
            None => endpoint.connect_lazy(),
        };
        let client = PlacementClient::new(channel);
        clients.insert(id, client.clone());
        Ok(client)
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

    async fn local_join(&self, req: pb::JoinRequest) -> Result<pb::JoinResponse, Status> {
        let received = Instant::now();
        if req.node.is_empty() || req.address.is_empty() {
            return Err(Status::invalid_argument(
                "join needs the daemon's node name and the host:port of its gRPC API",
            ));
        }
        // The clock starts before the write: if the write fails, a later
        // join or heartbeat moves it on; it never makes removal later than
        // lease after this receipt.
        self.soft().heard(&req.node, received);
        let member = Member {
            node: req.node.clone(),
            address: req.address,
            types: req.types,
            leaving: false,
        };
        self.write(Command::Join { member }).await?;
        let table = self.table();
        tracing::info!(node = %req.node, version = table.current.version, "member joined");
        Ok(pb::JoinResponse {
            lease_ms: self.lease_ms(),
            heartbeat_interval_ms: self.heartbeat_ms(),
            table: Some(table_to_pb(table)),
        })
    }

    async fn local_heartbeat(
        &self,
        req: pb::HeartbeatRequest,
    ) -> Result<pb::HeartbeatResponse, Status> {
        let received = Instant::now();
        self.confirm_leader().await?;
        let member = self.read_applied().state.members.get(&req.node).cloned();
        let Some(member) = member else {
            return Err(Status::not_found(format!(
                "node {:?} is not a member of the cluster (its lease lapsed and it was removed, \
                 or it never joined): stop serving and join again",
                req.node
            )));
        };
        {
            let mut soft = self.soft();
            soft.heard(&req.node, received);
            let d = soft.drained.entry(req.node.clone()).or_insert(0);
            *d = (*d).max(req.drained_version);
        }
        if types_differ(&member, &req.types) {
            tracing::info!(node = %req.node, types = ?req.types, "member's actor types changed");
            self.write(Command::Join {
                member: Member {
                    types: req.types,
                    ..member
                },
            })
            .await?;
        }
        let table = self.table();
        let changed = table.versions() != (req.known_current, req.known_next);
        Ok(pb::HeartbeatResponse {
            lease_ms: self.lease_ms(),
            table: changed.then(|| table_to_pb(table)),
        })
    }

    async fn local_leave(&self, req: pb::LeaveRequest) -> Result<pb::LeaveResponse, Status> {
        let received = Instant::now();
        let known = self.read_applied().state.members.contains_key(&req.node);
        if known {
            self.soft().heard(&req.node, received);
            self.write(Command::Leave {
                node: req.node.clone(),
            })
            .await?;
            tracing::info!(node = %req.node, "member leaving");
        }
        Ok(pb::LeaveResponse {
            table: Some(table_to_pb(self.table())),
        })
    }

    fn local_status(&self, leading: bool) -> pb::ClusterStatusResponse {
        let metrics = self.inner.raft.metrics().borrow().clone();
        let leader = metrics.current_leader;
        let now = Instant::now();
        let (table, heartbeats) = if leading {
            let table = self.table();
            let members: Vec<String> = self.read_applied().state.members.keys().cloned().collect();
            let soft = self.soft();
            let heartbeats = members
                .into_iter()
                .map(|n| {
                    let ago = now.saturating_duration_since(soft.clock(&n)).as_millis();
                    (n, u64::try_from(ago).unwrap_or(u64::MAX))
                })
                .collect();
            (table, heartbeats)
        } else {
            (self.applied_table(), HashMap::new())
        };
        let replicas = replicas(
            self.inner.id,
            self.inner.log.last_index(),
            &self.inner.peers,
            &metrics,
        );
        pb::ClusterStatusResponse {
            leader: leader.map(|l| l.to_string()).unwrap_or_default(),
            leader_address: leader
                .and_then(|l| address_of(l, &self.inner.peers, &metrics))
                .unwrap_or_default(),
            replicas,
            table: Some(table_to_pb(table)),
            last_heartbeat_ms_ago: heartbeats,
        }
    }

    /// Runs on every replica; acts only while this one leads: removes
    /// members silent for longer than the lease, promotes `next` once
    /// everyone it waits for has drained.
    pub(super) async fn leader_loop(self, mut stop: tokio::sync::watch::Receiver<bool>) {
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

    async fn handle_raft(&self, msg: pb::RaftMessage) -> Result<pb::RaftMessage, Status> {
        let raft = &self.inner.raft;
        let json = match msg.kind.as_str() {
            APPEND_ENTRIES => {
                let req: AppendEntriesRequest<TypeConfig> = decode(&msg)?;
                encode(&raft.append_entries(req).await)?
            }
            VOTE => {
                let req: VoteRequest<u64> = decode(&msg)?;
                encode(&raft.vote(req).await)?
            }
            INSTALL_SNAPSHOT => {
                let req: InstallSnapshotRequest<TypeConfig> = decode(&msg)?;
                encode(&raft.install_snapshot(req).await)?
            }
            other => {
                return Err(Status::invalid_argument(format!(
                    "unknown Raft message kind {other:?}; run the same troupe version on every \
                     placement replica"
                )))
            }
        };
        Ok(pb::RaftMessage {
            kind: msg.kind,
            json: json.into(),
        })
    }
}

fn decode<T: DeserializeOwned>(msg: &pb::RaftMessage) -> Result<T, Status> {
    serde_json::from_slice(&msg.json).map_err(|e| {
        Status::invalid_argument(format!(
            "Raft message {:?} is not valid ({e}); run the same troupe version on every placement \
             replica",
            msg.kind
        ))
    })
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, Status> {
    serde_json::to_vec(value).map_err(|e| Status::internal(format!("encoding a Raft answer: {e}")))
}

/// The request to send to the leader: the same message, marked forwarded.
fn forwarded<T>(request: Request<T>) -> Request<T> {
    let mut out = Request::new(request.into_inner());
    out.metadata_mut()
        .insert(FORWARDED, tonic::metadata::MetadataValue::from_static("1"));
    out.set_timeout(FORWARD_TIMEOUT);
    out
}

/// A failure to reach the leader reads as "retry", like an election. The
/// leader's own refusals already say what to do and pass through.
fn forward_error(status: Status) -> Status {
    let transient = matches!(
        status.code(),
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::DeadlineExceeded
    );
    if transient && !status.message().contains("retry") {
        Status::unavailable(format!(
            "the placement leader did not answer this replica's forward ({}); retry",
            status.message()
        ))
    } else {
        status
    }
}

#[tonic::async_trait]
impl pb::placement_server::Placement for PlacementService {
    async fn join(
        &self,
        request: Request<pb::JoinRequest>,
    ) -> Result<Response<pb::JoinResponse>, Status> {
        match self.route(&request)? {
            Route::Local => self
                .local_join(request.into_inner())
                .await
                .map(Response::new),
            Route::Forward(mut leader) => {
                leader.join(forwarded(request)).await.map_err(forward_error)
            }
        }
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        match self.route(&request)? {
            Route::Local => self
                .local_heartbeat(request.into_inner())
                .await
                .map(Response::new),
            Route::Forward(mut leader) => leader
                .heartbeat(forwarded(request))
                .await
                .map_err(forward_error),
        }
    }

    async fn leave(
        &self,
        request: Request<pb::LeaveRequest>,
    ) -> Result<Response<pb::LeaveResponse>, Status> {
        match self.route(&request)? {
            Route::Local => self
                .local_leave(request.into_inner())
                .await
                .map(Response::new),
            Route::Forward(mut leader) => leader
                .leave(forwarded(request))
                .await
                .map_err(forward_error),
        }
    }

    async fn get_table(
        &self,
        request: Request<pb::GetTableRequest>,
    ) -> Result<Response<pb::PlacementTable>, Status> {
        match self.route(&request)? {
            Route::Local => Ok(Response::new(table_to_pb(self.table()))),
            Route::Forward(mut leader) => leader
                .get_table(forwarded(request))
                .await
                .map_err(forward_error),
        }
    }

    async fn cluster_status(
        &self,
        request: Request<pb::ClusterStatusRequest>,
    ) -> Result<Response<pb::ClusterStatusResponse>, Status> {
        // Status is for operators: while there is no leader (or it cannot
        // be reached) this replica's own view is more useful than an error.
        match self.route(&request) {
            Ok(Route::Local) => Ok(Response::new(self.local_status(true))),
            Ok(Route::Forward(mut leader)) => match leader.cluster_status(forwarded(request)).await
            {
                Ok(r) => Ok(r),
                Err(_) => Ok(Response::new(self.local_status(false))),
            },
            Err(_) => Ok(Response::new(self.local_status(false))),
        }
    }

    async fn raft(
        &self,
        request: Request<pb::RaftMessage>,
    ) -> Result<Response<pb::RaftMessage>, Status> {
        self.handle_raft(request.into_inner())
            .await
            .map(Response::new)
    }
}
