//! Daemon-to-daemon connections.
//!
//! With several daemons, a request that arrives at a daemon not owning the
//! actor goes to the owner. [`link`] owns how: long-lived streams to each
//! peer in channels (small calls, bulk payloads), batched, chunked and
//! matched to replies by id. [`Peers`] keeps the plain gRPC channels to the
//! placement replicas (membership and hand-off: control traffic, on
//! connections of their own). The binary turns runtime requests into link
//! messages; this crate knows only `troupe.v1`.

pub mod link;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};
use tonic::Status;
use tracing::debug;

/// Request header carrying how many times a call has been forwarded; the
/// receiving daemon refuses to forward it past its limit.
pub const FORWARDED_HEADER: &str = "troupe-forwarded";

/// W3C trace context headers, as callers send them to any daemon.
pub const TRACEPARENT_HEADER: &str = "traceparent";
pub const TRACESTATE_HEADER: &str = "tracestate";

/// A boxed future, as the daemon's [`link::Inbound`] answers.
pub type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// What a request travels as, which picks its channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageClass {
    /// Calls and replies under the bulk threshold.
    Small,
    /// Calls and replies whose payload reaches it.
    Bulk,
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
    /// More is queued for the peer than the channel may hold: the peer (or
    /// the link to it) does not keep up.
    #[error(
        "the {channel} link to the daemon at {address} has {queued} bytes queued, its limit \
         ({limit}, --peer-queue-bytes): that daemon or the network to it does not keep up; retry \
         with backoff"
    )]
    Overloaded {
        address: String,
        channel: &'static str,
        queued: usize,
        limit: usize,
    },
}

/// Settings for the placement channels.
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
    /// mTLS to the replicas; `None`: plaintext.
    pub tls: Option<troupe_tls::Connector>,
}

impl Default for PeersConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(2),
            keep_alive_interval: Duration::from_secs(10),
            keep_alive_timeout: Duration::from_secs(5),
            max_message_bytes: 8 * 1024 * 1024 + 64 * 1024,
            default_timeout: Duration::from_secs(60),
            tls: None,
        }
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

/// One gRPC connection per placement replica, created on first use and
/// shared by every request to it (HTTP/2 multiplexes them).
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
        let channel = match &config.tls {
            Some(tls) => endpoint.connect_with_connector_lazy(tls.clone()),
            None => endpoint.connect_with_connector_lazy(troupe_coalesce::Connector),
        };
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
}

/// The innermost cause: "Connection refused (os error 111)" says more than
/// "transport error" wrapped around it.
pub(crate) fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut inner = error;
    while let Some(source) = inner.source() {
        inner = source;
    }
    inner.to_string()
}
