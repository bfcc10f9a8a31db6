//! The `Placement` handlers: each runs here on the leader, or goes to it
//! (`forward`); ClusterStatus answers with this replica's own view when no
//! leader can be asked.

use std::collections::HashMap;
use std::time::Instant;

use tonic::{Request, Response, Status};
use troupe_placement::table::Member;
use troupe_proto::v1 as pb;

use super::forward::{forward_error, forwarded, Route};
use super::PlacementService;
use crate::convert::table_to_pb;
use crate::state::{types_differ, Command};
use crate::status::{address_of, replicas};

impl PlacementService {
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
        // A leaver's types no longer matter: it is absent from the next table.
        if !member.leaving && types_differ(&member, &req.types) {
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
            &self.inner.peers.current(),
            &metrics,
        );
        pb::ClusterStatusResponse {
            leader: leader.map(|l| l.to_string()).unwrap_or_default(),
            leader_address: leader
                .and_then(|l| address_of(l, &self.inner.peers.current(), &metrics))
                .unwrap_or_default(),
            replicas,
            table: Some(table_to_pb(table)),
            last_heartbeat_ms_ago: heartbeats,
        }
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
