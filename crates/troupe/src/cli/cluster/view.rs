//! How `troupe cluster status` shows what it gathered: a table for people,
//! JSON for scripts.

use serde_json::{json, Value};
use troupe_proto::v1 as pb;

use super::tokens::{tokens_json, tokens_table};
use super::MemberView;
use crate::cli::links;
use crate::cli::render::{self, Table};

/// Where a member stands in the change in progress.
fn role(v: &MemberView, pending: bool) -> &'static str {
    match (v.in_current, v.in_next, v.member.leaving) {
        (_, _, true) => "leaving",
        (false, true, _) => "joining",
        (true, false, _) if pending => "leaving",
        _ => "member",
    }
}

/// A replica's part in the Raft group; `None`: listed in the answering
/// replica's --peers but not a member (not added yet, or removed).
fn raft_role(r: &pb::Replica) -> Option<&'static str> {
    match (r.voter, r.learner) {
        (true, _) => Some("voter"),
        (false, true) => Some("learner"),
        (false, false) => None,
    }
}

pub(super) fn status_json(
    replica: &str,
    s: &pb::ClusterStatusResponse,
    members: &[MemberView],
) -> Value {
    let table = s.table.clone().unwrap_or_default();
    let pending = table.next.is_some();
    let replicas: Vec<Value> = s
        .replicas
        .iter()
        .map(|r| {
            json!({
                "id": r.id,
                "address": r.address,
                "leader": r.leader,
                "raft": raft_role(r),
                "last_log_index": r.last_log_index,
            })
        })
        .collect();
    let tokens = tokens_json(members);
    let members: Vec<Value> = members
        .iter()
        .map(|v| {
            json!({
                "node": v.member.node,
                "address": v.member.address,
                "types": v.member.types,
                "leaving": v.member.leaving,
                "role": role(v, pending),
                "in_current": v.in_current,
                "in_next": pending.then_some(v.in_next),
                "last_heartbeat_ms_ago": v.heartbeat_ms_ago,
                "reachable": v.actors.is_ok(),
                "active_actors": v.actors.as_ref().ok(),
                "error": v.actors.as_ref().err(),
                "links": links::json(&v.links),
                "inbound_links": links::inbound_json(v.inbound_links.as_ref()),
            })
        })
        .collect();
    json!({
        "placement": replica,
        "leader": (!s.leader.is_empty()).then_some(&s.leader),
        "leader_address": (!s.leader_address.is_empty()).then_some(&s.leader_address),
        "replicas": replicas,
        "version": table.current.as_ref().map_or(0, |c| c.version),
        "pending": table.next.as_ref().map(|n| json!({
            "version": n.version,
            "waiting_for": table.waiting_for,
        })),
        "tokens": tokens,
        "members": members,
    })
}

pub(super) fn status_table(
    replica: &str,
    s: &pb::ClusterStatusResponse,
    members: &[MemberView],
) -> String {
    let table = s.table.clone().unwrap_or_default();
    let leader = if s.leader.is_empty() {
        "none (electing)".to_owned()
    } else {
        format!("{} at {}", s.leader, s.leader_address)
    };
    let pending = match &table.next {
        None => "none".to_owned(),
        Some(n) if table.waiting_for.is_empty() => format!("version {} (promoting)", n.version),
        Some(n) => format!(
            "version {}, waiting for {} to drain",
            n.version,
            table.waiting_for.join(", ")
        ),
    };
    let mut out = render::fields(&[
        ("placement", replica.to_owned()),
        ("leader", leader),
        (
            "table",
            format!(
                "version {}",
                table.current.as_ref().map_or(0, |c| c.version)
            ),
        ),
        ("pending change", pending),
    ]);
    out.push('\n');
    let mut t = Table::new(&[
        ("REPLICA", false),
        ("ADDRESS", false),
        ("LEADER", false),
        ("RAFT", false),
        ("LAST LOG INDEX", true),
    ]);
    for r in &s.replicas {
        t.row(vec![
            r.id.clone(),
            r.address.clone(),
            render::yes_no(r.leader).to_owned(),
            raft_role(r).unwrap_or("-").to_owned(),
            r.last_log_index.to_string(),
        ]);
    }
    out.push_str(&t.render());
    out.push('\n');
    if members.is_empty() {
        out.push_str("no daemons have joined\n");
        return out;
    }
    let mut t = Table::new(&[
        ("NODE", false),
        ("ADDRESS", false),
        ("RAFT", false),
        ("TYPES", false),
        ("HEARTBEAT", true),
        ("ACTORS", true),
        ("LINKS IN", true),
    ]);
    for v in members {
        t.row(vec![
            v.member.node.clone(),
            v.member.address.clone(),
            role(v, table.next.is_some()).to_owned(),
            if v.member.types.is_empty() {
                "-".to_owned()
            } else {
                v.member.types.join(", ")
            },
            v.heartbeat_ms_ago.map_or_else(
                || "-".to_owned(),
                |ms| format!("{} ago", render::duration(ms)),
            ),
            match &v.actors {
                Ok(n) => n.to_string(),
                Err(_) => "unreachable".to_owned(),
            },
            links::inbound_cell(v.inbound_links.as_ref()),
        ]);
    }
    out.push_str(&t.render());
    let linked: Vec<(&str, &[pb::PeerLinkStatus])> = members
        .iter()
        .map(|v| (v.member.node.as_str(), v.links.as_slice()))
        .collect();
    if linked.iter().any(|(_, l)| !l.is_empty()) {
        out.push('\n');
        out.push_str(&links::table(&linked));
    }
    let tokens = tokens_table(members, crate::cli::status::problems::now_ms());
    if !tokens.is_empty() {
        out.push('\n');
        out.push_str(&tokens);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(node: &str, leaving: bool) -> pb::Member {
        pb::Member {
            node: node.into(),
            address: format!("10.0.0.{}:7420", node.len()),
            types: vec!["counter".into()],
            leaving,
        }
    }

    fn status() -> pb::ClusterStatusResponse {
        pb::ClusterStatusResponse {
            leader: "1".into(),
            leader_address: "127.0.0.1:7471".into(),
            replicas: vec![pb::Replica {
                id: "1".into(),
                address: "127.0.0.1:7471".into(),
                leader: true,
                last_log_index: 9,
                voter: true,
                learner: false,
            }],
            table: Some(pb::PlacementTable {
                current: Some(pb::TableVersion {
                    version: 3,
                    members: vec![member("a", false), member("bb", true)],
                }),
                next: Some(pb::TableVersion {
                    version: 4,
                    members: vec![member("a", false), member("ccc", false)],
                }),
                waiting_for: vec!["bb".into()],
            }),
            last_heartbeat_ms_ago: [("a".to_owned(), 120), ("bb".to_owned(), 80)]
                .into_iter()
                .collect(),
        }
    }

    fn views() -> Vec<MemberView> {
        vec![
            MemberView {
                actors: Ok(5),
                inbound_links: Some(pb::InboundLinks {
                    streams: 6,
                    let_go: 2,
                }),
                ..MemberView::unasked(&member("a", false), true, true, Some(120))
            },
            MemberView {
                actors: Err("Connection refused (os error 111)".into()),
                ..MemberView::unasked(&member("bb", true), true, false, Some(80))
            },
            MemberView {
                actors: Ok(0),
                ..MemberView::unasked(&member("ccc", false), false, true, None)
            },
        ]
    }

    #[test]
    fn json_lists_members_roles_and_the_pending_change() {
        let out = status_json("127.0.0.1:7471", &status(), &views());
        assert_eq!(out["version"], 3);
        assert_eq!(out["pending"]["version"], 4);
        assert_eq!(out["pending"]["waiting_for"], json!(["bb"]));
        assert_eq!(out["leader"], "1");
        assert_eq!(out["replicas"][0]["raft"], "voter");
        let members = out["members"].as_array().cloned().unwrap_or_default();
        assert_eq!(members.len(), 3);
        assert_eq!(members[0]["active_actors"], 5);
        assert_eq!(members[0]["role"], "member");
        assert_eq!(members[1]["role"], "leaving");
        assert_eq!(members[1]["reachable"], false);
        assert_eq!(members[1]["active_actors"], Value::Null);
        assert_eq!(members[2]["role"], "joining");
        assert_eq!(members[2]["last_heartbeat_ms_ago"], Value::Null);
    }

    #[test]
    fn the_table_shows_unreachable_members() {
        let out = status_table("127.0.0.1:7471", &status(), &views());
        assert!(out.contains("version 4, waiting for bb to drain"), "{out}");
        assert!(out.contains("unreachable"), "{out}");
        assert!(out.contains("1 at 127.0.0.1:7471"), "{out}");
        assert!(out.contains("joining"), "{out}");
        assert!(out.contains("LINKS IN"), "{out}");
        assert!(out.contains("6 (2 let go)"), "{out}");
    }
}
