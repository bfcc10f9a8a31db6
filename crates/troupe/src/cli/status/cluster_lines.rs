//! The cluster lines of `troupe status`, on a cluster member only: whether
//! it may serve its actors now (its placement lease) and the table it
//! routes by, and the link streams other daemons opened to it.

use troupe_proto::v1 as pb;

use crate::cli::plural;

/// On a daemon that runs alone, one line saying so; empty on a daemon older
/// than the CLI, which reports neither that nor inbound links.
pub(super) fn cluster_pairs(s: &pb::StatusResponse) -> Vec<(&'static str, String)> {
    if s.standalone {
        return vec![(
            "placement",
            "in-process: this daemon runs alone and places every actor itself (daemons \
             started with --placement and a shared store form a cluster)"
                .to_owned(),
        )];
    }
    let Some(links) = &s.inbound_links else {
        return Vec::new();
    };
    let placement = if s.serving {
        format!(
            "serving, by placement table version {} (`troupe cluster status` for the members)",
            s.placement_version
        )
    } else {
        format!(
            "NOT SERVING: its placement lease lapsed (placement did not answer its heartbeats \
             in time), so every call to its actors gets UNAVAILABLE until it rejoins; last \
             table version {} (`troupe cluster status`)",
            s.placement_version
        )
    };
    vec![
        ("placement", placement),
        (
            "inbound links",
            format!(
                "{} from other daemons; {} let go since start (their pings stopped)",
                plural(links.streams, "stream", "streams"),
                links.let_go
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::super::{status_json, status_table};
    use super::*;

    fn member(serving: bool) -> pb::StatusResponse {
        pb::StatusResponse {
            placement_version: 7,
            serving,
            inbound_links: Some(pb::InboundLinks {
                streams: 6,
                let_go: 2,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_member_shows_its_lease_table_and_inbound_links() {
        let text = status_table(&member(true));
        for line in [
            "placement         serving, by placement table version 7 (`troupe cluster status` for \
             the members)\n",
            "inbound links     6 streams from other daemons; 2 let go since start (their pings \
             stopped)\n",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
        let json = status_json(&member(true));
        assert_eq!(json["inbound_links"]["streams"], 6, "{json}");
        assert_eq!(json["inbound_links"]["let_go"], 2, "{json}");
        assert_eq!(json["placement_version"], 7, "{json}");
        assert_eq!(json["serving"], true, "{json}");
    }

    #[test]
    fn a_member_whose_lease_lapsed_says_its_calls_are_refused() {
        let text = status_table(&member(false));
        assert!(
            text.contains(
                "placement         NOT SERVING: its placement lease lapsed (placement did not \
                 answer its heartbeats in time), so every call to its actors gets UNAVAILABLE \
                 until it rejoins; last table version 7 (`troupe cluster status`)\n"
            ),
            "{text}"
        );
        assert_eq!(status_json(&member(false))["serving"], false);
    }

    #[test]
    fn a_daemon_that_runs_alone_says_so() {
        let alone = pb::StatusResponse {
            standalone: true,
            ..Default::default()
        };
        let text = status_table(&alone);
        assert!(
            text.contains("placement         in-process: this daemon runs alone"),
            "{text}"
        );
        assert!(!text.contains("inbound links"), "{text}");
        let json = status_json(&alone);
        assert_eq!(json["standalone"], true, "{json}");
        assert_eq!(json["inbound_links"], Value::Null, "{json}");
        assert_eq!(status_json(&member(true))["standalone"], false);
    }

    #[test]
    fn a_daemon_older_than_the_cli_has_no_cluster_lines() {
        let older = status_table(&pb::StatusResponse::default());
        assert!(!older.contains("inbound links"), "{older}");
        assert!(!older.contains("placement "), "{older}");
        assert_eq!(
            status_json(&pb::StatusResponse::default())["inbound_links"],
            Value::Null
        );
    }
}
