//! Links: the long-lived streams a daemon keeps to each peer and forwards
//! every per-actor request over.
//!
//! To each peer a daemon opens the channels of its [`ChannelPlan`]: by
//! default `call` (small calls and replies) and `bulk` (payloads from the
//! bulk threshold on, cut into chunks that interleave with other messages),
//! each with a few connections of its own, so a small call never waits
//! behind a large one, and one connection's HTTP/2 flow-control window does
//! not cap the whole peer. Membership and hand-off traffic keeps its own
//! connection (the placement channel, [`crate::Peers`]). Requests with the
//! same affinity (the same target actor and call chain) always ride the same
//! connection, so their order holds; different ones spread over the
//! channel's connections.
//!
//! `wire` cuts and reassembles frames, `frames_io` puts them on a connection
//! of the framed protocol, `connection` keeps one connection up, `serve`
//! answers the streams peers open, `accept` tells a framed link's
//! connection from an HTTP/2 client's on the daemon's port, `stats` counts
//! what goes by.

mod accept;
mod config;
mod connection;
mod frames_io;
mod serve;
mod stats;
mod wire;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use troupe_proto::v1 as pb;

pub use accept::{Admit, NotALink};
pub use config::{
    Authorization, ChannelPlan, ChannelPlanError, LinkProtocol, LinkProtocolError, LinksConfig,
    Window, WindowError,
};
pub use serve::{status_of_reply, status_reply, Inbound, LinkServer};
pub use stats::{ChannelStats, InboundStats};

use crate::{MessageClass, TransportError};
use connection::Connection;
use stats::{ChannelCounters, InboundCounters};

/// One channel to one peer.
#[derive(Debug)]
struct Channel {
    name: &'static str,
    connections: Vec<Connection>,
    counters: Arc<ChannelCounters>,
}

impl Channel {
    fn open(address: &str, name: &'static str, count: usize, config: &Arc<LinksConfig>) -> Self {
        let counters = Arc::new(ChannelCounters::default());
        let connections = (0..count.max(1))
            .map(|_| Connection::open(address, name, config.clone(), counters.clone()))
            .collect();
        Self {
            name,
            connections,
            counters,
        }
    }

    fn pick(&self, affinity: u64) -> Option<&Connection> {
        let n = self.connections.len() as u64;
        let index = affinity.checked_rem(n)?;
        self.connections.get(usize::try_from(index).ok()?)
    }
}

/// The channels to one peer.
#[derive(Debug)]
struct PeerLinks {
    /// `Single`: one; `Split`: call, then bulk.
    channels: Vec<Channel>,
}

/// The links to every peer, opened on first use.
#[derive(Debug, Clone)]
pub struct Links {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: Arc<LinksConfig>,
    peers: Mutex<HashMap<String, Arc<PeerLinks>>>,
    /// Tells the streams peers opened here that the daemon is closing.
    closing: tokio::sync::watch::Sender<bool>,
    inbound: Arc<InboundCounters>,
}

impl Links {
    pub fn new(config: LinksConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                config: Arc::new(config),
                peers: Mutex::new(HashMap::new()),
                closing: tokio::sync::watch::Sender::new(false),
                inbound: Arc::default(),
            }),
        }
    }

    pub fn config(&self) -> &LinksConfig {
        &self.inner.config
    }

    fn peer(&self, address: &str) -> Arc<PeerLinks> {
        let mut peers = self.inner.peers.lock();
        if let Some(peer) = peers.get(address) {
            return peer.clone();
        }
        let config = &self.inner.config;
        let channels = match config.channels {
            ChannelPlan::Single(n) => vec![Channel::open(address, "single", n, config)],
            ChannelPlan::Split { call, bulk } => vec![
                Channel::open(address, "call", call, config),
                Channel::open(address, "bulk", bulk, config),
            ],
        };
        let peer = Arc::new(PeerLinks { channels });
        peers.insert(address.to_owned(), peer.clone());
        peer
    }

    /// The class a request carrying `payload_bytes` travels in.
    pub fn class_of(&self, payload_bytes: usize) -> MessageClass {
        if payload_bytes >= self.inner.config.bulk_threshold {
            MessageClass::Bulk
        } else {
            MessageClass::Small
        }
    }

    /// Sends `request` to the daemon at `address` and waits for its reply,
    /// bounded by the request's own timeout (or the default). Requests with
    /// the same `affinity` and class ride the same connection, in order.
    pub async fn request(
        &self,
        address: &str,
        class: MessageClass,
        affinity: u64,
        mut request: pb::LinkRequest,
    ) -> Result<pb::LinkReply, TransportError> {
        let timeout = match request.timeout_ms {
            0 => self.inner.config.default_timeout,
            ms => Duration::from_millis(ms),
        };
        request.timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let peer = self.peer(address);
        let index = match (class, peer.channels.len()) {
            (MessageClass::Bulk, 2) => 1,
            _ => 0,
        };
        let connection = peer
            .channels
            .get(index)
            .and_then(|channel| channel.pick(affinity))
            .ok_or_else(|| TransportError::Unreachable {
                address: address.to_owned(),
                reason: "no link to it".into(),
            })?;
        connection.request(request, timeout).await
    }

    /// Closes the links to peers not in `addresses` (daemons that left).
    pub fn retain(&self, addresses: &[&str]) {
        self.inner
            .peers
            .lock()
            .retain(|address, _| addresses.contains(&address.as_str()));
    }

    /// Each channel to each peer, sorted by peer then channel.
    pub fn stats(&self) -> Vec<ChannelStats> {
        let peers: Vec<(String, Arc<PeerLinks>)> = self
            .inner
            .peers
            .lock()
            .iter()
            .map(|(address, peer)| (address.clone(), peer.clone()))
            .collect();
        let mut stats: Vec<ChannelStats> = peers
            .iter()
            .flat_map(|(address, peer)| {
                peer.channels.iter().map(move |channel| {
                    channel
                        .counters
                        .snapshot(address, channel.name, channel.connections.len())
                })
            })
            .collect();
        stats.sort_by(|a, b| (&a.peer, &a.channel).cmp(&(&b.peer, &b.channel)));
        stats
    }

    /// The streams peers opened to this daemon.
    pub fn inbound_stats(&self) -> InboundStats {
        self.inner.inbound.snapshot()
    }

    /// What answers the links peers open to this daemon: as a gRPC service
    /// ([`LinkServer::into_service`]) and on framed connections
    /// ([`LinkServer::split_incoming`]).
    pub fn server(&self, inbound: Arc<dyn Inbound>) -> LinkServer {
        LinkServer::new(
            &self.inner.config,
            inbound,
            self.inner.closing.subscribe(),
            self.inner.inbound.clone(),
        )
    }

    /// The daemon is closing: the streams peers opened here stop taking
    /// requests, answer those they took, and end (so the server's graceful
    /// stop does not wait on them); peers fail only what they sent after.
    pub fn drain_inbound(&self) {
        self.inner.closing.send_replace(true);
    }
}

/// A well-spread affinity for a target actor and the call chain a request
/// belongs to (empty: none), stable across daemons and runs.
pub fn affinity(actor_type: &str, actor_id: &str, chain: &str) -> u64 {
    // FNV-1a: stable (the std hasher is seeded per process) and plenty for
    // spreading keys over a handful of connections.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in [actor_type, actor_id, chain] {
        for byte in part.bytes().chain(std::iter::once(0xff)) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}
