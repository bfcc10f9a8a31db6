//! Counters of one channel to one peer, shared by its connections, and of
//! the streams peers opened here; read by `/metrics` and `troupe cluster
//! status`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

#[derive(Debug, Default)]
pub(crate) struct ChannelCounters {
    pub(crate) bytes_sent: AtomicU64,
    pub(crate) bytes_received: AtomicU64,
    pub(crate) messages_sent: AtomicU64,
    pub(crate) messages_received: AtomicU64,
    /// Bytes queued for the peer and not yet written, over all connections.
    pub(crate) queued_bytes: AtomicUsize,
    /// Requests waiting for their reply.
    pub(crate) in_flight: AtomicUsize,
    pub(crate) reconnects: AtomicU64,
    /// Connections whose stream is open.
    pub(crate) connected: AtomicUsize,
    /// Of those, the ones open as `PeerLink.Open` calls.
    pub(crate) connected_grpc: AtomicUsize,
    /// The last ping's round trip, in microseconds (0: none yet).
    pub(crate) rtt_us: AtomicU64,
    /// A connection found the peer older than framed links (said once in
    /// the log per channel, not per connection and attempt).
    pub(crate) peer_predates_framed: AtomicBool,
}

impl ChannelCounters {
    pub(crate) fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// A snapshot of one channel to one peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelStats {
    /// The peer's advertised address.
    pub peer: String,
    /// `call`, `bulk` or `single`.
    pub channel: String,
    /// Connections the channel has to the peer, and how many are up.
    pub connections: usize,
    pub connected: usize,
    /// Of `connected`, those open as `PeerLink.Open` calls (`--peer-protocol
    /// grpc`, or a peer older than framed links); the rest are framed.
    pub connected_grpc: usize,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub messages_sent: u64,
    pub messages_received: u64,
    pub queued_bytes: usize,
    pub in_flight: usize,
    pub reconnects: u64,
    /// The latest measured round trip in microseconds (0: not measured yet).
    pub rtt_us: u64,
}

impl ChannelCounters {
    pub(crate) fn snapshot(&self, peer: &str, channel: &str, connections: usize) -> ChannelStats {
        ChannelStats {
            peer: peer.to_owned(),
            channel: channel.to_owned(),
            connections,
            connected: self.connected.load(Ordering::Relaxed),
            connected_grpc: self.connected_grpc.load(Ordering::Relaxed),
            bytes_sent: self.bytes_sent.load(Ordering::Relaxed),
            bytes_received: self.bytes_received.load(Ordering::Relaxed),
            messages_sent: self.messages_sent.load(Ordering::Relaxed),
            messages_received: self.messages_received.load(Ordering::Relaxed),
            queued_bytes: self.queued_bytes.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            reconnects: self.reconnects.load(Ordering::Relaxed),
            rtt_us: self.rtt_us.load(Ordering::Relaxed),
        }
    }
}

/// Counters of the streams peers opened to this daemon (all peers, both
/// protocols), shared by the serve loops.
#[derive(Debug, Default)]
pub(crate) struct InboundCounters {
    pub(crate) streams: AtomicUsize,
    pub(crate) let_go: AtomicU64,
}

/// A snapshot of the streams peers opened to this daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InboundStats {
    /// Streams being served now.
    pub streams: usize,
    /// Streams ended because their dialler's pings stopped coming (a peer
    /// whose host vanished), since the daemon started.
    pub let_go: u64,
}

impl InboundCounters {
    pub(crate) fn snapshot(&self) -> InboundStats {
        InboundStats {
            streams: self.streams.load(Ordering::Relaxed),
            let_go: self.let_go.load(Ordering::Relaxed),
        }
    }
}

/// Counts one stream as served while it lives, whichever way its serve
/// loop ends (a dropped task included).
pub(crate) struct ServedStream(std::sync::Arc<InboundCounters>);

impl ServedStream {
    pub(crate) fn new(counters: std::sync::Arc<InboundCounters>) -> Self {
        counters.streams.fetch_add(1, Ordering::Relaxed);
        Self(counters)
    }
}

impl Drop for ServedStream {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::Relaxed);
    }
}
