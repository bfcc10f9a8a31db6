//! The daemon's membership in a cluster: its placement client.
//!
//! This module owns the daemon's side of the protocol in
//! docs/architecture.md ("Cluster"): joining the placement service, the
//! heartbeat loop that renews the lease and installs new tables, handing
//! actors off when a pending table moves them away, fencing when the lease
//! lapses, and the graceful leave. Requests for actors other daemons own
//! reach them through `forwarder`.
//!
//! The decisions (lease arithmetic, when to hand off and what to report,
//! whether the daemon is still a member) are plain functions and small state
//! machines in `decisions`, so they are tested without sockets; this module
//! is the I/O loop around them.

pub(crate) mod decisions;

use decisions::{
    backoff, beat_failure, lapsed, lease_until, request_timeout, BeatFailure, Drain, Presence,
};

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tonic::{Code, Status};
use tracing::{debug, info, warn};
use troupe_placement::table::Table;
use troupe_placement::view::ClusterPlacement;
use troupe_placement_service::convert::table_from_pb;
use troupe_proto::v1 as pb;
use troupe_proto::v1::placement_client::PlacementClient;
use troupe_runtime::clock::unix_now_ms;
use troupe_runtime::{CallError, Runtime};
use troupe_transport::link::Links;
use troupe_transport::{Peers, TransportError};

/// How the daemon is known in the cluster.
#[derive(Debug, Clone)]
pub struct Identity {
    pub node: String,
    /// host:port other daemons forward calls to.
    pub address: String,
    pub replicas: Vec<String>,
}

/// Where the membership is, for the shutdown path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Joining,
    Member,
    /// The leave completed: no table lists this daemon any more.
    Left,
}

/// The running placement client; dropping it does not stop it ([`stop`]).
///
/// [`stop`]: ClusterHandle::stop
#[derive(Debug)]
pub struct ClusterHandle {
    leave: watch::Sender<bool>,
    phase: watch::Receiver<Phase>,
    task: JoinHandle<()>,
}

impl ClusterHandle {
    /// Leaves the cluster gracefully: asks placement to move this daemon's
    /// actors away, hands them off, and waits (at most `limit`) until
    /// placement promoted a table without this daemon. Returns whether it
    /// did; on `false` the heartbeats go on until [`ClusterHandle::stop`].
    pub async fn leave(&mut self, limit: Duration) -> bool {
        let _ = self.leave.send(true);
        let done = self.phase.wait_for(|p| *p == Phase::Left);
        matches!(tokio::time::timeout(limit, done).await, Ok(Ok(_)))
    }

    /// Stops heartbeating (the process is about to exit).
    pub fn stop(self) {
        self.task.abort();
    }
}

/// Starts the placement client: join, then heartbeat until stopped.
pub fn start(
    identity: Identity,
    placement: Arc<ClusterPlacement>,
    runtime: Runtime,
    peers: Peers,
    links: Option<Links>,
) -> ClusterHandle {
    let (leave_tx, leave_rx) = watch::channel(false);
    let (phase_tx, phase_rx) = watch::channel(Phase::Joining);
    let client = Client {
        identity,
        placement,
        runtime,
        peers,
        links,
        replica: 0,
        phase: phase_tx,
    };
    let task = tokio::spawn(client.run(leave_rx));
    ClusterHandle {
        leave: leave_tx,
        phase: phase_rx,
        task,
    }
}

struct Client {
    identity: Identity,
    placement: Arc<ClusterPlacement>,
    runtime: Runtime,
    /// Placement replicas.
    peers: Peers,
    /// Other daemons.
    links: Option<Links>,
    /// The replica that answered last; requests start there.
    replica: usize,
    phase: watch::Sender<Phase>,
}

/// The lease terms placement gave at the last join.
#[derive(Debug, Clone, Copy)]
struct Terms {
    lease: Duration,
    interval: Duration,
}

/// Why a membership ended.
enum Ended {
    /// The lease lapsed or placement dropped this node: fence, rejoin.
    Lost(&'static str),
    Left,
}

impl Client {
    async fn run(mut self, mut leave: watch::Receiver<bool>) {
        loop {
            let Some(terms) = self.join(&mut leave).await else {
                // Asked to leave before ever joining: nothing to hand off.
                self.phase.send_replace(Phase::Left);
                return;
            };
            self.phase.send_replace(Phase::Member);
            match self.member(terms, &mut leave).await {
                Ended::Left => {
                    info!(node = %self.identity.node, "left the cluster");
                    self.phase.send_replace(Phase::Left);
                    return;
                }
                Ended::Lost(why) => {
                    self.phase.send_replace(Phase::Joining);
                    self.fence(why).await;
                }
            }
        }
    }

    /// Stops serving at once, since another daemon may own these actors
    /// now; then the runtime writes what it held where the store's epochs
    /// allow it and drops its activations.
    async fn fence(&self, why: &str) {
        let end = self.placement.lease_end();
        self.placement.revoke_lease();
        let (now, unix_now) = (Instant::now(), unix_now_ms());
        // The daemon stopped serving when its lease ended (the runtime
        // checks it on every call), which may be a while ago if the process
        // was paused: that is when its activations ended.
        let ended = end.filter(|e| *e < now).map_or(unix_now, |e| {
            unix_now.saturating_sub(u64::try_from((now - e).as_millis()).unwrap_or(u64::MAX))
        });
        warn!(node = %self.identity.node, reason = why, "placement lease lost: fencing, then joining again");
        self.runtime.fence(ended).await;
    }

    fn types(&self) -> Vec<String> {
        self.runtime.hosted_types()
    }

    fn placement_client(&self, index: usize) -> Result<PlacementClient<Channel>, TransportError> {
        let address = &self.identity.replicas[index % self.identity.replicas.len()];
        Ok(PlacementClient::new(self.peers.channel(address)?))
    }

    /// Joins through any replica, retrying with backoff until one accepts.
    /// `None` if a leave was asked for meanwhile.
    async fn join(&mut self, leave: &mut watch::Receiver<bool>) -> Option<Terms> {
        let mut round = 0u32;
        loop {
            for _ in 0..self.identity.replicas.len() {
                if *leave.borrow() {
                    return None;
                }
                let index = self.replica;
                let address = self.identity.replicas[index % self.identity.replicas.len()].clone();
                let request = pb::JoinRequest {
                    node: self.identity.node.clone(),
                    address: self.identity.address.clone(),
                    types: self.types(),
                };
                let sent = Instant::now();
                let result = match self.placement_client(index) {
                    Ok(mut client) => {
                        let mut request = tonic::Request::new(request);
                        request.set_timeout(Duration::from_secs(10));
                        client.join(request).await.map(|r| r.into_inner())
                    }
                    Err(e) => Err(Status::unavailable(e.to_string())),
                };
                match result {
                    Ok(answer) => {
                        let lease = Duration::from_millis(answer.lease_ms);
                        let interval = Duration::from_millis(answer.heartbeat_interval_ms.max(10));
                        if let Some(table) = answer.table {
                            self.placement.set_table(table_from_pb(table));
                        }
                        self.placement.renew_lease(lease_until(sent, lease));
                        info!(
                            node = %self.identity.node,
                            address = %self.identity.address,
                            placement = %address,
                            table = self.placement.table().current.version,
                            lease_ms = answer.lease_ms,
                            "joined the cluster"
                        );
                        return Some(Terms { lease, interval });
                    }
                    Err(status) => {
                        warn!(
                            placement = %address,
                            code = ?status.code(),
                            error = %status.message(),
                            "cannot join the cluster through this replica; trying the next"
                        );
                        self.replica = self.replica.wrapping_add(1);
                    }
                }
            }
            let pause = backoff(round);
            round = round.saturating_add(1);
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                _ = leave.changed() => {}
            }
        }
    }

    /// Heartbeats, installs tables, hands off, and leaves when asked, until
    /// the membership ends.
    async fn member(&mut self, terms: Terms, leave: &mut watch::Receiver<bool>) -> Ended {
        let node = self.identity.node.clone();
        let timeout = request_timeout(terms.lease, terms.interval);
        let mut drain = Drain::default();
        let mut leaving = false;
        let mut next_beat = tokio::time::Instant::now();
        let mut beat: Option<JoinHandle<(Instant, Result<pb::HeartbeatResponse, Status>)>> = None;
        let mut leave_call: Option<JoinHandle<Result<pb::LeaveResponse, Status>>> = None;
        let mut hand_off: Option<JoinHandle<Result<usize, CallError>>> = None;
        // A join answered after its lease already ran out grants nothing to
        // fence; the first acknowledged heartbeat starts the lease instead.
        let mut had_lease = false;
        let mut presence = Presence::default();
        loop {
            let table = self.placement.table();
            if hand_off.is_none() {
                if let Some(version) = drain.start(&table) {
                    let runtime = self.runtime.clone();
                    let placement = self.placement.clone();
                    debug!(node = %node, next = version, "table change pending: handing off actors that move away");
                    let task = tokio::spawn(async move {
                        runtime
                            .hand_off(|actor| placement.owns_in_next(&actor.ty, &actor.id))
                            .await
                    });
                    hand_off = Some(task);
                }
            }
            // Wakes the loop when the lease runs out (only a lease still
            // running: one already over is handled below).
            let lease_end = self
                .placement
                .lease_end()
                .filter(|end| *end > Instant::now())
                .map(tokio::time::Instant::from_std);
            tokio::select! {
                () = tokio::time::sleep_until(next_beat), if beat.is_none() => {
                    let request = pb::HeartbeatRequest {
                        node: node.clone(),
                        drained_version: drain.report(),
                        known_current: table.versions().0,
                        known_next: table.versions().1,
                        types: self.types(),
                    };
                    beat = Some(self.spawn_heartbeat(request, timeout));
                    next_beat = tokio::time::Instant::now() + terms.interval;
                }
                done = join_opt(&mut beat) => {
                    beat = None;
                    match done {
                        Ok((sent, Ok(answer))) => {
                            self.placement.renew_lease(lease_until(sent, Duration::from_millis(answer.lease_ms)));
                            if let Some(table) = answer.table {
                                let table = table_from_pb(table);
                                debug!(node = %node, current = table.current.version, next = table.versions().1, "new placement table");
                                self.install(table);
                            }
                        }
                        Ok((_, Err(status))) => match beat_failure(status.code()) {
                            BeatFailure::NotMember if leaving => return Ended::Left,
                            BeatFailure::NotMember => return Ended::Lost("placement no longer lists this daemon"),
                            BeatFailure::TryElsewhere => {
                                warn!(code = ?status.code(), error = %status.message(), "heartbeat failed; trying the next placement replica");
                                self.replica = self.replica.wrapping_add(1);
                                next_beat = tokio::time::Instant::now();
                            }
                        },
                        Err(e) => warn!(error = %e, "heartbeat task failed"),
                    }
                }
                () = sleep_until_opt(lease_end) => {}
                done = join_opt(&mut hand_off) => {
                    hand_off = None;
                    if let Some(version) = drain.running() {
                        let complete = match done {
                            Ok(Ok(count)) => {
                                if count > 0 {
                                    info!(node = %node, next = version, actors = count, "handed off actors that move away; reporting drained");
                                } else {
                                    debug!(node = %node, next = version, "no actors move away; reporting drained");
                                }
                                true
                            }
                            Ok(Err(e)) => {
                                warn!(node = %node, next = version, error = %e, "hand-off incomplete; trying again");
                                false
                            }
                            Err(e) => {
                                warn!(node = %node, error = %e, "hand-off task failed; trying again");
                                false
                            }
                        };
                        drain.finished(version, complete);
                        // Report at once: placement promotes on it.
                        next_beat = tokio::time::Instant::now();
                    }
                }
                changed = leave.changed(), if !leaving && leave_call.is_none() => {
                    if changed.is_ok() && *leave.borrow() {
                        info!(node = %node, "leaving the cluster: asking placement to move this daemon's actors");
                        leave_call = Some(self.spawn_leave(timeout, Duration::ZERO));
                    }
                }
                done = join_opt(&mut leave_call) => {
                    leave_call = None;
                    match done {
                        Ok(Ok(answer)) => {
                            leaving = true;
                            if let Some(table) = answer.table {
                                self.install(table_from_pb(table));
                            }
                            next_beat = tokio::time::Instant::now();
                        }
                        Ok(Err(status)) if status.code() == Code::NotFound => return Ended::Left,
                        Ok(Err(status)) => {
                            warn!(code = ?status.code(), error = %status.message(), "leave request failed; trying the next placement replica");
                            self.replica = self.replica.wrapping_add(1);
                            leave_call = Some(self.spawn_leave(timeout, terms.interval));
                        }
                        Err(e) => warn!(error = %e, "leave task failed"),
                    }
                }
            }
            if lapsed(self.placement.lease_end(), Instant::now()) {
                if had_lease {
                    return Ended::Lost("no heartbeat was acknowledged within the lease");
                }
            } else {
                had_lease = true;
            }
            if presence.gone(&self.placement.table(), &node) {
                // A table without this daemon: the leave is done, or
                // placement removed it.
                return if leaving {
                    Ended::Left
                } else {
                    Ended::Lost("the placement table no longer lists this daemon")
                };
            }
        }
    }

    fn install(&self, table: Table) {
        let addresses: Vec<String> = table
            .current
            .members
            .iter()
            .chain(table.next.iter().flat_map(|n| n.members.iter()))
            .map(|m| m.address.clone())
            .chain(self.identity.replicas.iter().cloned())
            .collect();
        if self.placement.set_table(table) {
            // Connections to daemons no longer listed are dropped.
            let keep: Vec<&str> = addresses.iter().map(String::as_str).collect();
            self.peers.retain(&keep);
            if let Some(links) = &self.links {
                links.retain(&keep);
            }
        }
    }

    fn spawn_heartbeat(
        &self,
        request: pb::HeartbeatRequest,
        timeout: Duration,
    ) -> JoinHandle<(Instant, Result<pb::HeartbeatResponse, Status>)> {
        let client = self.placement_client(self.replica);
        tokio::spawn(async move {
            // Recorded before sending: the lease counts from here.
            let sent = Instant::now();
            let result = match client {
                Ok(mut client) => {
                    let mut request = tonic::Request::new(request);
                    request.set_timeout(timeout);
                    bounded(timeout, client.heartbeat(request)).await
                }
                Err(e) => Err(Status::unavailable(e.to_string())),
            };
            (sent, result)
        })
    }

    /// Sends Leave after `delay` (a pause between retries, so replicas that
    /// refuse at once are not hammered).
    fn spawn_leave(
        &self,
        timeout: Duration,
        delay: Duration,
    ) -> JoinHandle<Result<pb::LeaveResponse, Status>> {
        let client = self.placement_client(self.replica);
        let node = self.identity.node.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            match client {
                Ok(mut client) => {
                    let mut request = tonic::Request::new(pb::LeaveRequest { node });
                    request.set_timeout(timeout);
                    bounded(timeout, client.leave(request)).await
                }
                Err(e) => Err(Status::unavailable(e.to_string())),
            }
        })
    }
}

/// A placement RPC bounded by `timeout` even if the replica never answers.
async fn bounded<T>(
    timeout: Duration,
    call: impl Future<Output = Result<tonic::Response<T>, Status>>,
) -> Result<T, Status> {
    match tokio::time::timeout(timeout + Duration::from_millis(100), call).await {
        Ok(result) => result.map(tonic::Response::into_inner),
        Err(_) => Err(Status::deadline_exceeded(format!(
            "the placement replica did not answer within {timeout:?}"
        ))),
    }
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Waits for the task in `slot`; never finishes when there is none. The
/// caller empties the slot once it finished.
async fn join_opt<T>(slot: &mut Option<JoinHandle<T>>) -> Result<T, tokio::task::JoinError> {
    match slot {
        Some(task) => task.await,
        None => std::future::pending().await,
    }
}
