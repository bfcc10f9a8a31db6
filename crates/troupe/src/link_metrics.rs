//! The links to other daemons as OpenMetrics families, from
//! `Links::stats` at each scrape: traffic, queue depth, reconnects and the
//! measured round trip, per peer and channel; and from
//! `Links::inbound_stats`, the streams peers opened here.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use troupe_transport::link::{ChannelStats, InboundStats};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LinkLabels {
    peer: String,
    channel: String,
}

type Counters = Family<LinkLabels, Counter>;
type Gauges = Family<LinkLabels, Gauge>;
type Seconds = Family<LinkLabels, Gauge<f64, std::sync::atomic::AtomicU64>>;

/// Appends the link families to `out`, OpenMetrics text ending in `# EOF`.
pub fn encode(stats: &[ChannelStats], inbound: InboundStats, out: &mut String) -> std::fmt::Result {
    let mut registry = Registry::with_prefix("troupe_peer_link");
    let (sent, received, sent_messages, received_messages, reconnects) = (
        Counters::default(),
        Counters::default(),
        Counters::default(),
        Counters::default(),
        Counters::default(),
    );
    let (queued, in_flight, connections, connected, connected_grpc) = (
        Gauges::default(),
        Gauges::default(),
        Gauges::default(),
        Gauges::default(),
        Gauges::default(),
    );
    let rtt = Seconds::default();
    let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    for s in stats {
        let labels = LinkLabels {
            peer: s.peer.clone(),
            channel: s.channel.clone(),
        };
        sent.get_or_create(&labels).inc_by(s.bytes_sent);
        received.get_or_create(&labels).inc_by(s.bytes_received);
        sent_messages.get_or_create(&labels).inc_by(s.messages_sent);
        received_messages
            .get_or_create(&labels)
            .inc_by(s.messages_received);
        reconnects.get_or_create(&labels).inc_by(s.reconnects);
        queued.get_or_create(&labels).set(gauge(s.queued_bytes));
        in_flight.get_or_create(&labels).set(gauge(s.in_flight));
        connections.get_or_create(&labels).set(gauge(s.connections));
        connected.get_or_create(&labels).set(gauge(s.connected));
        connected_grpc
            .get_or_create(&labels)
            .set(gauge(s.connected_grpc));
        if s.rtt_us > 0 {
            rtt.get_or_create(&labels).set(s.rtt_us as f64 / 1e6);
        }
    }
    registry.register_with_unit("sent", "Bytes written to the peer", Unit::Bytes, sent);
    registry.register_with_unit(
        "received",
        "Bytes read from the peer",
        Unit::Bytes,
        received,
    );
    registry.register("sent_messages", "Messages sent to the peer", sent_messages);
    registry.register(
        "received_messages",
        "Messages received from the peer",
        received_messages,
    );
    registry.register(
        "reconnects",
        "Connections that broke and were dialled again",
        reconnects,
    );
    registry.register_with_unit(
        "queued",
        "Bytes queued for the peer and not yet written",
        Unit::Bytes,
        queued,
    );
    registry.register(
        "in_flight",
        "Requests waiting for the peer's reply",
        in_flight,
    );
    registry.register("connections", "Connections the channel keeps", connections);
    registry.register("connected", "Connections whose stream is open", connected);
    registry.register(
        "connected_grpc",
        "Of the open connections, those on PeerLink calls (a peer older than framed links, or \
         --peer-protocol grpc)",
        connected_grpc,
    );
    registry.register_with_unit(
        "rtt",
        "The latest measured round trip of the channel",
        Unit::Seconds,
        rtt,
    );
    let inbound_streams: Gauge = Gauge::default();
    inbound_streams.set(gauge(inbound.streams));
    registry.register(
        "inbound_streams",
        "Link streams other daemons opened to this one, served now",
        inbound_streams,
    );
    let let_go: Counter = Counter::default();
    let_go.inc_by(inbound.let_go);
    registry.register(
        "inbound_let_go",
        "Link streams ended because their dialler's keep-alive pings stopped coming (its host \
         vanished without closing them)",
        let_go,
    );
    prometheus_client::encoding::text::encode(out, &registry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_channel_shows_with_its_labels() -> std::fmt::Result {
        let stats = ChannelStats {
            peer: "10.0.0.2:7420".into(),
            channel: "bulk".into(),
            connections: 4,
            connected: 3,
            connected_grpc: 1,
            bytes_sent: 1000,
            bytes_received: 2000,
            messages_sent: 3,
            messages_received: 4,
            queued_bytes: 512,
            in_flight: 2,
            reconnects: 1,
            rtt_us: 20_000,
        };
        let mut out = String::new();
        let inbound = InboundStats {
            streams: 2,
            let_go: 1,
        };
        encode(&[stats], inbound, &mut out)?;
        for line in [
            "troupe_peer_link_sent_bytes_total{peer=\"10.0.0.2:7420\",channel=\"bulk\"} 1000",
            "troupe_peer_link_queued_bytes{peer=\"10.0.0.2:7420\",channel=\"bulk\"} 512",
            "troupe_peer_link_connected_grpc{peer=\"10.0.0.2:7420\",channel=\"bulk\"} 1",
            "troupe_peer_link_reconnects_total{peer=\"10.0.0.2:7420\",channel=\"bulk\"} 1",
            "troupe_peer_link_rtt_seconds{peer=\"10.0.0.2:7420\",channel=\"bulk\"} 0.02",
            "troupe_peer_link_inbound_streams 2",
            "troupe_peer_link_inbound_let_go_total 1",
        ] {
            assert!(out.contains(line), "{line} missing from:\n{out}");
        }
        assert!(out.ends_with("# EOF\n"));
        Ok(())
    }
}
