//! The replicated placement service (`troupe placement serve`).
//!
//! This crate owns one placement replica: its Raft node (openraft), its
//! storage on disk, and the `troupe.v1.Placement` gRPC service daemons and
//! the other replicas call. The protocol is docs/architecture.md, "Cluster".
//!
//! - [`state`]: the deterministic state machine (members, tables, changes).
//! - [`store`]: the log, vote and snapshots in sled.
//! - [`network`]: Raft RPCs to other replicas over the `Raft` rpc.
//! - [`grpc`]: the service: forwarding to the leader, answering daemons.
//! - `leader`: the leader's soft state (leases, drain reports) and the rule
//!   that expires members and promotes tables.
//!
//! - [`membership`]: the rule that makes the Raft membership follow the
//!   leader's `--peers`; `reconcile` probes replicas and applies it.
//! - [`peers`]: the replica list, fixed (`--peers`) or followed in a file
//!   (`--peers-file`), and the one handle every address lookup goes through.
//!
//! Bootstrap: every replica is configured with the ids and addresses of all
//! replicas; the one with the lowest id initialises the Raft cluster when
//! its log is empty, so the first start needs it up (later starts do not).
//! Any other replica with an empty log waits to be added by the leader: a
//! replica that joins a running group (a scale-up) never initialises one.
//! Afterwards the leader grows and shrinks the membership toward its own
//! `--peers`, or the current contents of its `--peers-file` (`membership`
//! says how, and why an older list on another replica cannot undo it).

pub mod convert;
pub mod grpc;
mod leader;
pub mod membership;
pub mod metrics;
pub mod network;
pub mod peers;
mod reconcile;
pub mod state;
mod status;
pub mod store;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{InitializeError, RaftError};
use openraft::{BasicNode, Raft};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};
use tonic_health::ServingStatus;
use troupe_proto::v1::placement_server::PlacementServer;

use state::Command;
use troupe_placement::table::Table;

openraft::declare_raft_types!(
    /// The placement service's Raft types: commands in, tables out.
    pub TypeConfig:
        D = Command,
        R = Table,
        NodeId = u64,
        Node = BasicNode,
        SnapshotData = std::io::Cursor<Vec<u8>>,
);

/// How a replica runs.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// This replica's id; must be a key of `peers`.
    pub id: u64,
    /// Where the log, vote and snapshots live.
    pub data_dir: PathBuf,
    /// Every replica, this one included: id → host:port of its gRPC API.
    /// With `peers_file`, the file's contents at start.
    pub peers: BTreeMap<u64, String>,
    /// Follow this file's list instead of a fixed one: re-read every
    /// reconcile round (`peers::Peers::reload`).
    pub peers_file: Option<PathBuf>,
    /// A member is removed after this long without a heartbeat.
    pub lease: Duration,
    /// How often daemons heartbeat; also the leader's expiry/promotion tick.
    pub heartbeat: Duration,
    /// mTLS for the API and between replicas: only cluster members (a
    /// certificate from the cluster's CA with a member identity) connect.
    /// `None`: plaintext, for loopback only.
    pub tls: Option<troupe_tls::Tls>,
}

/// Default lease: long enough to ride out a GC pause or a leader election.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(3);
/// Default heartbeat: several per lease, so one lost heartbeat is harmless.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_millis(500);

impl ServiceConfig {
    /// A config with the default lease and heartbeat.
    pub fn new(id: u64, data_dir: impl Into<PathBuf>, peers: BTreeMap<u64, String>) -> Self {
        ServiceConfig {
            id,
            data_dir: data_dir.into(),
            peers,
            peers_file: None,
            lease: DEFAULT_LEASE,
            heartbeat: DEFAULT_HEARTBEAT,
            tls: None,
        }
    }

    fn validate(&self) -> Result<(), ServiceError> {
        // A fixed list without this replica is a typo: the replica could
        // never lead a membership change nor form the group. A followed file
        // drops a replica that is being scaled away before the replica
        // stops (and it may restart meanwhile); refusing to start it then
        // would only take a voter away early. It serves on and is removed
        // once stopped (`peers::Peers` logs its absence).
        if self.peers_file.is_none() && !self.peers.contains_key(&self.id) {
            return Err(ServiceError::Config(format!(
                "the peers list must include this replica (id {}) with its address; got ids {:?}",
                self.id,
                self.peers.keys().collect::<Vec<_>>()
            )));
        }
        if let Some((id, _)) = self.peers.iter().find(|(_, a)| a.trim().is_empty()) {
            return Err(ServiceError::Config(format!(
                "replica {id} has an empty address; give every peer as ID=HOST:PORT"
            )));
        }
        if self.heartbeat.is_zero() || self.lease <= self.heartbeat * 2 {
            return Err(ServiceError::Config(format!(
                "the lease ({:?}) must be more than twice the heartbeat interval ({:?}) and the \
                 heartbeat must be positive, or members expire between two heartbeats",
                self.lease, self.heartbeat
            )));
        }
        Ok(())
    }
}

/// Why a replica could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("invalid placement configuration: {0}")]
    Config(String),
    #[error(
        "cannot open the placement data dir {path}: {source}; check that it is writable and that \
         no other replica uses it"
    )]
    Storage { path: PathBuf, source: sled::Error },
    #[error("cannot read the placement data dir {path}: {source}")]
    Snapshot {
        path: PathBuf,
        source: store::StoreOpenError,
    },
    #[error("the Raft node stopped: {0}")]
    Raft(Box<openraft::error::Fatal<u64>>),
    #[error("the placement gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    #[error("cannot read the listening address: {0}")]
    Io(#[from] std::io::Error),
}

impl From<openraft::error::Fatal<u64>> for ServiceError {
    fn from(e: openraft::error::Fatal<u64>) -> Self {
        ServiceError::Raft(Box::new(e))
    }
}

/// A running replica: Raft node, leader tasks and the gRPC service.
#[derive(Debug)]
pub struct Replica {
    service: grpc::PlacementService,
    metrics: metrics::ReplicaMetrics,
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    store_closed: store::StoreClosed,
    tls: Option<troupe_tls::Tls>,
    /// grpc.health.v1 statuses: `""` and `troupe.v1.Placement` SERVING
    /// from start until the replica stops.
    health: HealthReporter,
}

impl Replica {
    /// Opens storage, starts the Raft node and, on the lowest id with an
    /// empty log, initialises the cluster.
    pub async fn start(config: ServiceConfig) -> Result<Replica, ServiceError> {
        config.validate()?;
        std::fs::create_dir_all(&config.data_dir).map_err(|e| ServiceError::Storage {
            path: config.data_dir.clone(),
            source: sled::Error::Io(e),
        })?;
        let db = store::open(&config.data_dir).map_err(|source| ServiceError::Storage {
            path: config.data_dir.clone(),
            source,
        })?;
        let (guard, store_closed) = store::StoreGuard::new();
        let log =
            store::LogStore::new(&db, guard.clone()).map_err(|source| ServiceError::Storage {
                path: config.data_dir.clone(),
                source,
            })?;
        let sm =
            store::StateMachineStore::new(&db, guard).map_err(|source| ServiceError::Snapshot {
                path: config.data_dir.clone(),
                source,
            })?;

        let raft_config = openraft::Config {
            cluster_name: "troupe-placement".into(),
            // Elections finish well within a lease, so a leader change
            // does not make members' leases lapse.
            heartbeat_interval: 100,
            election_timeout_min: 500,
            election_timeout_max: 1000,
            ..Default::default()
        };
        let raft_config = Arc::new(
            raft_config
                .validate()
                .map_err(|e| ServiceError::Config(format!("raft timing: {e}")))?,
        );
        let applied = sm.applied();
        let peers = match &config.peers_file {
            Some(path) => peers::Peers::from_file(config.id, path.clone(), config.peers.clone()),
            None => peers::Peers::fixed(config.id, config.peers.clone()),
        };
        let raft = Raft::new(
            config.id,
            raft_config,
            network::Network::new(
                config.tls.clone().map(troupe_tls::Connector::to_members),
                peers.clone(),
            ),
            log.clone(),
            sm.clone(),
        )
        .await?;

        // Never true for a replica its file does not list: only a listed
        // lowest id forms a group.
        let lowest = config.peers.keys().next().copied();
        if lowest == Some(config.id) && !raft.is_initialized().await? {
            let nodes: BTreeMap<u64, BasicNode> = config
                .peers
                .iter()
                .map(|(id, addr)| (*id, BasicNode { addr: addr.clone() }))
                .collect();
            match raft.initialize(nodes).await {
                Ok(()) => tracing::info!(id = config.id, "initialised the placement Raft cluster"),
                // Another start got there first (idempotent restart).
                Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {}
                Err(RaftError::APIError(e)) => {
                    return Err(ServiceError::Config(format!(
                        "cannot initialise the Raft cluster: {e}"
                    )))
                }
                Err(RaftError::Fatal(f)) => return Err(f.into()),
            }
        }

        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let service = grpc::PlacementService::new(&config, peers.clone(), raft, applied, log);
        let tls = config.tls.clone();
        let reconciler = reconcile::Reconciler::new(
            config.id,
            service.raft().clone(),
            peers,
            config.tls.clone().map(troupe_tls::Connector::to_members),
        );
        let leader_changes = metrics::LeaderChanges::default();
        let tasks = vec![
            tokio::spawn(reconciler.run(stop_rx.clone())),
            tokio::spawn(
                leader_changes
                    .clone()
                    .watch(service.raft().metrics(), stop_rx.clone()),
            ),
            tokio::spawn(service.clone().leader_loop(stop_rx)),
        ];
        let metrics = metrics::ReplicaMetrics::new(&service, leader_changes);
        drop(db);
        let health = HealthReporter::new();
        health
            .set_serving::<PlacementServer<grpc::PlacementService>>()
            .await;
        Ok(Replica {
            service,
            metrics,
            stop,
            tasks,
            store_closed,
            tls,
            health,
        })
    }

    /// The gRPC service, to mount on a server.
    pub fn grpc(&self) -> PlacementServer<grpc::PlacementService> {
        PlacementServer::new(self.service.clone())
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20)
    }

    /// The service handle (Raft state, tables), e.g. for tests.
    pub fn service(&self) -> &grpc::PlacementService {
        &self.service
    }

    /// What `/metrics` shows of the replica, to encode while it serves.
    pub fn metrics(&self) -> metrics::ReplicaMetrics {
        self.metrics.clone()
    }

    /// The replica's health statuses, to serve on another listener too
    /// (kubelet's plaintext probes).
    pub fn health(&self) -> HealthReporter {
        self.health.clone()
    }

    /// Serves the placement API and grpc.health.v1 on `listener` until
    /// `shutdown` completes, then reports NOT_SERVING and stops Raft.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ServiceError> {
        let addr: SocketAddr = listener.local_addr()?;
        tracing::info!(%addr, id = self.service.id(), "placement replica serving");
        let health = self.health.clone();
        let shutdown = async move {
            shutdown.await;
            health
                .set_service_status("", ServingStatus::NotServing)
                .await;
            health
                .set_not_serving::<PlacementServer<grpc::PlacementService>>()
                .await;
        };
        let router = tonic::transport::Server::builder()
            .add_service(HealthServer::new(HealthService::from_health_reporter(
                self.health.clone(),
            )))
            .add_service(self.grpc());
        let result = match &self.tls {
            Some(tls) => {
                router
                    .serve_with_incoming_shutdown(tls.incoming(listener), shutdown)
                    .await
            }
            None => {
                router
                    .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
                    .await
            }
        };
        self.stop().await;
        result.map_err(Into::into)
    }

    /// Stops the leader tasks and the Raft node, and waits (bounded) for
    /// the data dir to be closed, so the same process can open it again.
    pub async fn stop(self) {
        self.stop.send_replace(true);
        for t in self.tasks {
            let _ = t.await;
        }
        if let Err(e) = self.service.raft().shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
        drop(self.service);
        if tokio::time::timeout(Duration::from_secs(10), self.store_closed.closed())
            .await
            .is_err()
        {
            tracing::warn!("placement storage still in use 10s after shutdown");
        }
    }
}
