//! Admin requests about one actor (describe, deactivate) answered by the
//! daemon that owns it.
//!
//! Only the owner knows an actor's activation; any other daemon would
//! describe it as inactive (with state from the store, possibly behind
//! write-behind) and could not deactivate it. So in a cluster a daemon
//! passes such a request to its owner's admin API, marked
//! [`FORWARDED_HEADER`]: the owner answers it itself, even if its own table
//! has already moved the actor on, so a request never travels in a circle.

use std::sync::Arc;

use tonic::metadata::MetadataMap;
use tonic::transport::Channel;
use tonic::{Request, Status};
use troupe_placement::{Owner, Placement};
use troupe_proto::v1 as pb;
use troupe_runtime::ActorId;
use troupe_transport::link::Authorization;
use troupe_transport::Peers;

/// Marks an admin request another daemon passed on.
pub(crate) const FORWARDED_HEADER: &str = "troupe-admin-forwarded";

/// Where a cluster daemon sends the admin requests of actors it does not
/// own.
#[derive(Debug, Clone)]
pub struct Owners {
    placement: Arc<dyn Placement>,
    /// Channels to the owners, by address, with the members' TLS.
    peers: Peers,
    /// The API token the daemons of a cluster share (`None`: none needed).
    authorization: Option<Authorization>,
}

impl Owners {
    pub fn new(
        placement: Arc<dyn Placement>,
        peers: Peers,
        authorization: Option<Authorization>,
    ) -> Self {
        Self {
            placement,
            peers,
            authorization,
        }
    }

    /// The owner's admin API when another daemon owns `actor` and the
    /// request did not come from another daemon already.
    pub(super) fn remote(
        &self,
        actor: &ActorId,
        metadata: &MetadataMap,
    ) -> Result<Option<Remote>, Status> {
        if metadata.contains_key(FORWARDED_HEADER) {
            return Ok(None);
        }
        let Owner::Remote { node, address } = self.placement.owner(&actor.ty, &actor.id) else {
            // Here, or nobody's for now: this daemon answers with what it
            // knows.
            return Ok(None);
        };
        let channel = self.peers.channel(&address).map_err(|e| {
            Status::unavailable(format!(
                "actor {actor} lives on daemon {node} at {address}, which this daemon cannot \
                 dial: {e}; ask that daemon (--addr {address})"
            ))
        })?;
        Ok(Some(Remote {
            client: pb::admin_client::AdminClient::new(channel),
            node,
            address,
            authorization: self.authorization.clone(),
        }))
    }
}

/// The admin API of an actor's owner.
pub(super) struct Remote {
    pub(super) client: pb::admin_client::AdminClient<Channel>,
    node: String,
    address: String,
    authorization: Option<Authorization>,
}

impl Remote {
    /// `message` as a request the owner answers itself.
    pub(super) fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        let metadata = request.metadata_mut();
        metadata.insert(
            FORWARDED_HEADER,
            tonic::metadata::AsciiMetadataValue::from_static("1"),
        );
        if let Some(value) = self.authorization.as_ref().and_then(Authorization::current) {
            metadata.insert("authorization", value);
        }
        request
    }

    /// The owner's answer as this daemon's; a failure to reach it names it.
    pub(super) fn answer<T>(
        &self,
        result: Result<tonic::Response<T>, Status>,
    ) -> Result<T, Status> {
        match result {
            Ok(response) => Ok(response.into_inner()),
            // A status tonic made up from a broken connection carries its
            // cause; one the owner sent does not.
            Err(status) if std::error::Error::source(&status).is_some() => {
                Err(Status::unavailable(format!(
                    "the actor's owner, daemon {} at {}, did not answer: {}; retry, or ask it \
                     directly (--addr {})",
                    self.node,
                    self.address,
                    status.message(),
                    self.address
                )))
            }
            Err(status) => Err(status),
        }
    }
}
