//! Forwarding a daemon's request to the leader, one hop at most.
//!
//! The leader's address comes from the replica list now, else from the Raft
//! membership (a leader a newer list added, during a scale-up).

use std::time::Duration;

use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};
use troupe_proto::v1::placement_client::PlacementClient;

use super::PlacementService;
use crate::status::address_of;

/// Set on requests a follower forwards, so they are never forwarded again.
const FORWARDED: &str = "troupe-placement-forwarded";
/// Bound on a forwarded request.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(8);

/// Where a request is answered.
pub(super) enum Route {
    Local,
    Forward(PlacementClient<Channel>),
}

impl PlacementService {
    pub(super) fn route<T>(&self, request: &Request<T>) -> Result<Route, Status> {
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
        // A leader missing from the list was added by a leader with a newer
        // list (a scale-up in progress): the membership has its address.
        let metrics = self.inner.raft.metrics().borrow().clone();
        let addr = address_of(id, &self.inner.peers.current(), &metrics).ok_or_else(|| {
            Status::unavailable(format!(
                "the placement leader is replica {id}, which is neither in this replica's \
                 peers list nor in the Raft membership it knows; retry"
            ))
        })?;
        let mut clients = self.inner.leaders.lock().unwrap_or_else(|e| e.into_inner());
        let key = (id, addr.clone());
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
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
        // Only the latest address of each replica is worth keeping.
        clients.retain(|(other, _), _| *other != id);
        clients.insert(key, client.clone());
        Ok(client)
    }
}

/// The request to send to the leader: the same message, marked forwarded.
pub(super) fn forwarded<T>(request: Request<T>) -> Request<T> {
    let mut out = Request::new(request.into_inner());
    out.metadata_mut()
        .insert(FORWARDED, tonic::metadata::MetadataValue::from_static("1"));
    out.set_timeout(FORWARD_TIMEOUT);
    out
}

/// A failure to reach the leader reads as "retry", like an election. The
/// leader's own refusals already say what to do and pass through.
pub(super) fn forward_error(status: Status) -> Status {
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
