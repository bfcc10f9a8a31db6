//! Daemon-to-daemon connections.
//!
//! With several daemons, a call that arrives at a daemon not owning the actor
//! is forwarded to the owner. This crate owns those connections: [`Peers`]
//! keeps one gRPC channel per peer address (connected on first use, then
//! reused by every call to that peer) and forwards `ActorClient` RPCs over
//! it with the call's deadline, trace context and hop count
//! ([`Forward`]). The binary turns runtime calls into requests; this crate
//! knows only `troupe.v1`.
//!
//! The multi-channel transport (several connections per peer, message
//! classes on separate channels, per-actor-pair affinity) grows here later;
//! [`MessageClass`] already names the classes the channels will be split by.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};
use tracing::debug;
use troupe_proto::v1 as pb;

/// Request header carrying how many times a call has been forwarded; the
/// receiving daemon refuses to forward it past its limit.
pub const FORWARDED_HEADER: &str = "troupe-forwarded";

/// W3C trace context headers, as callers send them to any daemon.
pub const TRACEPARENT_HEADER: &str = "traceparent";
pub const TRACESTATE_HEADER: &str = "tracestate";

/// Traffic classes that get their own channels to a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageClass {
    /// Calls and replies under the small-payload threshold.
    Small,
    /// Calls and replies whose payload passes the threshold.
    Bulk,
    /// Placement, hand-off and membership traffic.
    Control,
}

impl MessageClass {
    /// Payloads from this size on travel on the bulk channel.
    pub const BULK_THRESHOLD: usize = 64 * 1024;

    /// The class of a call carrying `payload_len` bytes.
    pub fn for_payload(payload_len: usize) -> Self {
        if payload_len >= Self::BULK_THRESHOLD {
            Self::Bulk
        } else {
            Self::Small
        }
    }
}

/// Why a forwarded request got no answer from the peer.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The address cannot be dialled at all (a bad entry in the table).
    #[error("peer address {address:?} is not host:port ({reason}); check the --advertise setting of that daemon")]
    InvalidAddress { address: String, reason: String },
    /// No connection to the peer, or it broke during the request.
    #[error("cannot reach the daemon at {address} ({reason})")]
    Unreachable { address: String, reason: String },
    /// The peer did not answer before the call's deadline.
    #[error("the daemon at {address} did not answer within {timeout:?}")]
    Timeout { address: String, timeout: Duration },
    /// The peer answered with an error status: pass it on as it is.
    #[error("the daemon at {address} answered {}: {}", .status.code(), .status.message())]
    Remote { address: String, status: Status },
}

/// Settings for connections to peers.
#[derive(Debug, Clone)]
pub struct PeersConfig {
    /// How long dialling a peer may take before it counts as unreachable.
    pub connect_timeout: Duration,
    /// HTTP/2 pings on idle connections find a dead peer before a call waits
    /// on it for its whole deadline.
    pub keep_alive_interval: Duration,
    pub keep_alive_timeout: Duration,
    /// Largest message sent or accepted (payloads plus framing); the same
    /// bound the daemon's own server uses.
    pub max_message_bytes: usize,
    /// Upper bound on a forwarded request without a deadline of its own.
    pub default_timeout: Duration,
}

impl Default for PeersConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(2),
            keep_alive_interval: Duration::from_secs(10),
            keep_alive_timeout: Duration::from_secs(5),
            max_message_bytes: 8 * 1024 * 1024 + 64 * 1024,
            default_timeout: Duration::from_secs(60),
        }
    }
}

/// What travels with a forwarded request besides its body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Forward {
    /// Times the call has been forwarded, this forward included.
    pub hops: u32,
    /// Time left until the caller's deadline; `None`: the peer's default.
    pub timeout: Option<Duration>,
    /// W3C trace context to continue on the peer (empty: none).
    pub traceparent: String,
    pub tracestate: String,
}

impl Forward {
    /// `body` as a request carrying the deadline (`grpc-timeout`), trace
    /// context and `troupe-forwarded` headers.
    pub fn request<T>(&self, body: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(body);
        if let Some(timeout) = self.timeout {
            request.set_timeout(timeout);
        }
        let metadata = request.metadata_mut();
        metadata.insert(FORWARDED_HEADER, MetadataValue::from(self.hops));
        for (name, value) in [
            (TRACEPARENT_HEADER, &self.traceparent),
            (TRACESTATE_HEADER, &self.tracestate),
        ] {
            // A value that is no valid header came from a caller's header
            // in the first place; dropping it only loses the trace link.
            if let (false, Ok(value)) = (value.is_empty(), value.parse()) {
                metadata.insert(name, value);
            }
        }
        request
    }
}

/// The `troupe-forwarded` hop count of an incoming request (0: not forwarded).
pub fn forwarded_hops(metadata: &tonic::metadata::MetadataMap) -> u32 {
    metadata
        .get(FORWARDED_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// One gRPC connection per peer daemon, created on first use and shared by
/// every request to that peer (HTTP/2 multiplexes them).
#[derive(Debug, Clone)]
pub struct Peers {
    inner: Arc<PeersInner>,
}

#[derive(Debug)]
struct PeersInner {
    config: PeersConfig,
    channels: Mutex<HashMap<String, Channel>>,
}

impl Default for Peers {
    fn default() -> Self {
        Self::new(PeersConfig::default())
    }
}

impl Peers {
    pub fn new(config: PeersConfig) -> Self {
        Self {
            inner: Arc::new(PeersInner {
                config,
                channels: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The channel to the peer at `address` (`host:port` or
    /// `http://host:port`). It connects on its first request and reconnects
    /// by itself after a failure.
    pub fn channel(&self, address: &str) -> Result<Channel, TransportError> {
        // A poisoned lock only means a thread panicked while inserting; the
        // map itself is always whole.
        let mut channels = self
            .inner
            .channels
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(channel) = channels.get(address) {
            return Ok(channel.clone());
        }
        let config = &self.inner.config;
        let uri = if address.contains("://") {
            address.to_owned()
        } else {
            format!("http://{address}")
        };
        let endpoint = Endpoint::from_shared(uri)
            .map_err(|e| TransportError::InvalidAddress {
                address: address.to_owned(),
                reason: e.to_string(),
            })?
            .connect_timeout(config.connect_timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(config.keep_alive_interval)
            .keep_alive_timeout(config.keep_alive_timeout);
        let channel = endpoint.connect_lazy();
        debug!(peer = %address, "new peer channel");
        channels.insert(address.to_owned(), channel.clone());
        Ok(channel)
    }

    /// Drops the channels to peers not in `addresses` (daemons that left).
    pub fn retain(&self, addresses: &[&str]) {
        let mut channels = self
            .inner
            .channels
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        channels.retain(|a, _| addresses.contains(&a.as_str()));
    }

    /// How many peers have a channel.
    pub fn len(&self) -> usize {
        self.inner
            .channels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn client(
        &self,
        address: &str,
    ) -> Result<pb::actor_client_client::ActorClientClient<Channel>, TransportError> {
        let limit = self.inner.config.max_message_bytes;
        Ok(
            pb::actor_client_client::ActorClientClient::new(self.channel(address)?)
                .max_decoding_message_size(limit)
                .max_encoding_message_size(limit),
        )
    }

    /// Runs `Invoke` on the peer.
    pub async fn invoke(
        &self,
        address: &str,
        request: pb::InvokeRequest,
        forward: &Forward,
    ) -> Result<pb::InvokeResponse, TransportError> {
        self.forward(
            address,
            request,
            forward,
            |mut client, request| async move { client.invoke(request).await },
        )
        .await
    }

    /// Delivers `Tell` to the peer (returns once the peer queued it).
    pub async fn tell(
        &self,
        address: &str,
        request: pb::TellRequest,
        forward: &Forward,
    ) -> Result<pb::TellResponse, TransportError> {
        self.forward(
            address,
            request,
            forward,
            |mut client, request| async move { client.tell(request).await },
        )
        .await
    }

    /// Forwards any `ActorClient` RPC: `rpc` picks the method, e.g.
    /// `|mut c, r| async move { c.get_state(r).await }`. The request carries
    /// `forward`'s headers, and waiting is bounded by its timeout.
    pub async fn forward<Req, Resp, F, Fut>(
        &self,
        address: &str,
        body: Req,
        forward: &Forward,
        rpc: F,
    ) -> Result<Resp, TransportError>
    where
        F: FnOnce(pb::actor_client_client::ActorClientClient<Channel>, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, Status>>,
    {
        let client = self.client(address)?;
        let timeout = forward.timeout.unwrap_or(self.inner.config.default_timeout);
        let request = Forward {
            timeout: Some(timeout),
            ..forward.clone()
        }
        .request(body);
        // The peer enforces grpc-timeout itself; this bound covers a peer
        // that stopped answering altogether (e.g. SIGSTOPped) with a
        // connection that still looks open.
        let slack = Duration::from_millis(250);
        match tokio::time::timeout(timeout + slack, rpc(client, request)).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(classify(address, status, timeout)),
            Err(_) => Err(TransportError::Timeout {
                address: address.to_owned(),
                timeout,
            }),
        }
    }
}

/// A status the client library made up from a broken connection carries the
/// I/O error as its source; one the peer sent has none.
fn classify(address: &str, status: Status, timeout: Duration) -> TransportError {
    if status.code() == Code::Unavailable || status.code() == Code::Unknown {
        if let Some(source) = std::error::Error::source(&status) {
            return TransportError::Unreachable {
                address: address.to_owned(),
                reason: root_cause(source),
            };
        }
    }
    if status.code() == Code::Cancelled {
        // The channel's own deadline (from grpc-timeout) fired.
        if status.message() == tonic::TimeoutExpired(()).to_string() {
            return TransportError::Timeout {
                address: address.to_owned(),
                timeout,
            };
        }
        if std::error::Error::source(&status).is_some() {
            return TransportError::Unreachable {
                address: address.to_owned(),
                reason: root_cause(&status),
            };
        }
    }
    TransportError::Remote {
        address: address.to_owned(),
        status,
    }
}

/// The innermost cause: "Connection refused (os error 111)" says more than
/// "transport error" wrapped around it.
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut inner = error;
    while let Some(source) = inner.source() {
        inner = source;
    }
    inner.to_string()
}

#[cfg(test)]
mod tests;
