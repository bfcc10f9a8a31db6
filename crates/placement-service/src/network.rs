//! Raft RPCs between replicas, over the placement service's own `Raft` rpc.
//!
//! This module owns the replica-to-replica client side: openraft's request
//! is serialised as JSON into `RaftMessage.json` with `kind` naming the
//! RPC; the answer carries openraft's `Result` the same way, so a remote
//! Raft error arrives as the error openraft expects. The server side is
//! `grpc::raft`.
//!
//! A replica's address is the one the replica list (`peers`) gives now, or
//! else the one the Raft membership recorded when it was added: openraft
//! keeps a client per replication stream for as long as the stream lives, so
//! each call looks the address up again and a changed one (a `--peers-file`
//! that moved a replica) takes effect on the next RPC.

use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::transport::{Channel, Endpoint};
use troupe_proto::v1 as pb;
use troupe_proto::v1::placement_client::PlacementClient;
use troupe_tls::Connector;

use super::peers::Peers;
use super::TypeConfig;

type NodeId = u64;

pub const APPEND_ENTRIES: &str = "append_entries";
pub const VOTE: &str = "vote";
pub const INSTALL_SNAPSHOT: &str = "install_snapshot";

/// Connects to replicas by their address in the replica list, else in the
/// Raft membership.
#[derive(Debug, Clone)]
pub struct Network {
    tls: Option<Connector>,
    peers: Peers,
}

impl Network {
    pub fn new(tls: Option<Connector>, peers: Peers) -> Self {
        Self { tls, peers }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        PeerClient::new(target, &node.addr, self.tls.clone(), self.peers.clone())
    }
}

/// One peer's connection; established lazily and re-established by tonic,
/// and anew when the peer's address changes.
#[derive(Debug)]
pub struct PeerClient {
    target: NodeId,
    /// The address the Raft membership recorded.
    member_addr: String,
    /// The address `client` dials.
    addr: String,
    tls: Option<Connector>,
    peers: Peers,
    client: Option<PlacementClient<Channel>>,
}

/// Why a peer could not be asked.
#[derive(Debug, thiserror::Error)]
enum PeerError {
    #[error("replica {target} at {addr} is not reachable: {status}")]
    Status {
        target: NodeId,
        addr: String,
        status: tonic::Status,
    },
    #[error("replica {target} address {addr:?} is not a valid host:port: {source}")]
    BadAddress {
        target: NodeId,
        addr: String,
        source: tonic::transport::Error,
    },
    #[error("replica {target} sent an answer this replica cannot read: {source}")]
    Decode {
        target: NodeId,
        source: serde_json::Error,
    },
    #[error("encoding a Raft message: {0}")]
    Encode(serde_json::Error),
}

impl PeerClient {
    fn new(target: NodeId, member_addr: &str, tls: Option<Connector>, peers: Peers) -> Self {
        PeerClient {
            target,
            member_addr: member_addr.to_owned(),
            addr: member_addr.to_owned(),
            tls,
            peers,
            client: None,
        }
    }

    fn client(&mut self) -> Result<PlacementClient<Channel>, PeerError> {
        let addr = self
            .peers
            .address(self.target)
            .unwrap_or_else(|| self.member_addr.clone());
        if addr != self.addr {
            tracing::info!(replica = self.target, from = %self.addr, to = %addr, "placement replica address changed; reconnecting");
            self.addr = addr;
            self.client = None;
        }
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let endpoint = Endpoint::from_shared(format!("http://{}", self.addr))
            .map_err(|source| PeerError::BadAddress {
                target: self.target,
                addr: self.addr.clone(),
                source,
            })?
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true);
        let channel = match &self.tls {
            Some(tls) => endpoint.connect_with_connector_lazy(tls.clone()),
            None => endpoint.connect_lazy(),
        };
        let client = PlacementClient::new(channel)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        self.client = Some(client.clone());
        Ok(client)
    }

    async fn call<Req, Resp, E>(
        &mut self,
        kind: &str,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let json = serde_json::to_vec(req)
            .map_err(|e| RPCError::Network(NetworkError::new(&PeerError::Encode(e))))?;
        let mut client = self
            .client()
            .map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?;
        let mut request = tonic::Request::new(pb::RaftMessage {
            kind: kind.to_owned(),
            json: json.into(),
        });
        request.set_timeout(option.hard_ttl());
        let answer = match client.raft(request).await {
            Ok(a) => a.into_inner(),
            Err(status) => {
                let unreachable = matches!(
                    status.code(),
                    tonic::Code::Unavailable | tonic::Code::Unknown
                );
                let e = PeerError::Status {
                    target: self.target,
                    addr: self.addr.clone(),
                    status,
                };
                // Unreachable makes openraft back off instead of retrying
                // a down replica in a tight loop.
                return Err(if unreachable {
                    RPCError::Unreachable(Unreachable::new(&e))
                } else {
                    RPCError::Network(NetworkError::new(&e))
                });
            }
        };
        let result: Result<Resp, E> = serde_json::from_slice(&answer.json).map_err(|source| {
            RPCError::Network(NetworkError::new(&PeerError::Decode {
                target: self.target,
                source,
            }))
        })?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(APPEND_ENTRIES, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(INSTALL_SNAPSHOT, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(VOTE, &rpc, &option).await
    }
}
