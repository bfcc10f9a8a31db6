//! The links between daemons as `troupe cluster status` shows them: one row
//! per daemon, peer and channel, from each daemon's own Status; and the
//! streams peers opened to a daemon, as it and `troupe status` show them.

use serde_json::{json, Value};
use troupe_proto::v1 as pb;

use super::render::{bytes, Table};

/// How a channel's open connections travel: framed links, PeerLink calls
/// (the peer predates framed links, or `--peer-protocol grpc`), or both
/// while some have fallen back and others not yet.
fn protocol(l: &pb::PeerLinkStatus) -> &'static str {
    match (l.connected, l.connected_grpc) {
        (0, _) => "-",
        (_, 0) => "framed",
        (up, grpc) if grpc >= up => "grpc",
        _ => "framed+grpc",
    }
}

fn rtt(us: u64) -> String {
    match us {
        0 => "-".into(),
        us if us < 10_000 => format!("{:.2}ms", us as f64 / 1000.0),
        us => format!("{}ms", us / 1000),
    }
}

pub fn table(daemons: &[(&str, &[pb::PeerLinkStatus])]) -> String {
    let mut t = Table::new(&[
        ("NODE", false),
        ("PEER", false),
        ("CHANNEL", false),
        ("UP", true),
        ("PROTOCOL", false),
        ("RTT", true),
        ("QUEUED", true),
        ("IN FLIGHT", true),
        ("RECONNECTS", true),
        ("SENT", true),
        ("RECEIVED", true),
    ]);
    for (node, links) in daemons {
        for l in *links {
            t.row(vec![
                (*node).to_owned(),
                l.peer.clone(),
                l.channel.clone(),
                format!("{}/{}", l.connected, l.connections),
                protocol(l).to_owned(),
                rtt(l.rtt_us),
                bytes(l.queued_bytes),
                l.in_flight.to_string(),
                l.reconnects.to_string(),
                bytes(l.bytes_sent),
                bytes(l.bytes_received),
            ]);
        }
    }
    t.render()
}

/// The streams other daemons opened to a daemon, in the JSON of both status
/// commands; `null` when it did not say (a single node, an older daemon).
pub fn inbound_json(links: Option<&pb::InboundLinks>) -> Value {
    links.map_or(Value::Null, |l| {
        json!({
            "streams": l.streams,
            "let_go": l.let_go,
        })
    })
}

/// The streams other daemons opened to a member, with those let go since
/// it started when there were any: a peer whose pings stopped shows here
/// before anywhere else. `-` when the member could not say.
pub fn inbound_cell(links: Option<&pb::InboundLinks>) -> String {
    match links {
        None => "-".to_owned(),
        Some(l) if l.let_go == 0 => l.streams.to_string(),
        Some(l) => format!("{} ({} let go)", l.streams, l.let_go),
    }
}

pub fn json(links: &[pb::PeerLinkStatus]) -> Value {
    links
        .iter()
        .map(|l| {
            json!({
                "peer": l.peer,
                "channel": l.channel,
                "connections": l.connections,
                "connected": l.connected,
                "connected_grpc": l.connected_grpc,
                "rtt_us": l.rtt_us,
                "queued_bytes": l.queued_bytes,
                "in_flight": l.in_flight,
                "reconnects": l.reconnects,
                "bytes_sent": l.bytes_sent,
                "bytes_received": l.bytes_received,
                "messages_sent": l.messages_sent,
                "messages_received": l.messages_received,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_per_daemon_peer_and_channel() {
        let link = pb::PeerLinkStatus {
            peer: "10.0.0.2:7420".into(),
            channel: "bulk".into(),
            connections: 4,
            connected: 3,
            rtt_us: 20_400,
            queued_bytes: 3 << 20,
            bytes_sent: 5 << 30,
            ..Default::default()
        };
        let out = table(&[("a", std::slice::from_ref(&link))]);
        for cell in [
            "10.0.0.2:7420",
            "bulk",
            "3/4",
            "framed",
            "20ms",
            "3.0 MiB",
            "5.0 GiB",
        ] {
            assert!(out.contains(cell), "{cell} missing:\n{out}");
        }
        assert_eq!(json(std::slice::from_ref(&link))[0]["connected"], 3);
        // A peer older than framed links: its connections fell back.
        let old = pb::PeerLinkStatus {
            connected_grpc: 3,
            ..link
        };
        assert!(table(&[("a", &[old])]).contains(" grpc "));
    }

    #[test]
    fn the_inbound_cell_names_let_go_streams_only_when_there_were_some() {
        let links = |streams, let_go| pb::InboundLinks { streams, let_go };
        assert_eq!(inbound_cell(None), "-");
        assert_eq!(inbound_cell(Some(&links(4, 0))), "4");
        assert_eq!(inbound_cell(Some(&links(0, 3))), "0 (3 let go)");
    }
}
