//! `troupe cluster status`: the cluster as placement sees it, with each
//! member daemon's own count of active actors.

use std::time::Duration;

use serde_json::{json, Value};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use troupe_proto::v1 as pb;
use troupe_tls::Connector;

use crate::auth::BearerToken;

use super::links;
use super::render::{self, Table};
use super::{emit, emit_json, fail, root_cause, Exit, Output};
use crate::convert::errors::code_name;

/// Default placement replica address, as `troupe placement serve` listens.
pub const DEFAULT_PLACEMENT: &str = "127.0.0.1:7470";

/// How long to wait for a replica or a member daemon before moving on.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the placement service is, for `troupe cluster` commands.
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterTarget {
    /// Placement replicas, HOST:PORT[,HOST:PORT...]; any one answers.
    #[arg(long, env = "TROUPE_PLACEMENT", value_delimiter = ',', default_value = DEFAULT_PLACEMENT)]
    pub placement: Vec<String>,
    /// Output: `table` for people, `json` for scripts.
    #[arg(short = 'o', long, default_value = "table")]
    pub output: Output,
    #[command(flatten)]
    pub tls: super::tls::TlsClient,
}

/// One member daemon as shown: what the table says and what it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MemberView {
    member: pb::Member,
    in_current: bool,
    in_next: bool,
    heartbeat_ms_ago: Option<u64>,
    /// The daemon's own count, or why it could not be asked.
    actors: Result<u64, String>,
    /// Its links to the other daemons, as it reports them.
    links: Vec<pb::PeerLinkStatus>,
    /// The link streams the other daemons opened to it.
    inbound_links: Option<pb::InboundLinks>,
}

pub async fn cluster_status(target: &ClusterTarget) -> anyhow::Result<()> {
    let tls = target.tls.to_members()?;
    let (replica, status) = ask_placement(&target.placement, tls.as_ref()).await?;
    let members = members(&status, tls.as_ref()).await;
    match target.output {
        Output::Json => emit_json(&status_json(&replica, &status, &members)),
        Output::Table => emit(&status_table(&replica, &status, &members)),
    }
}

fn endpoint(address: &str) -> Result<Endpoint, String> {
    let address = address.trim();
    let uri = if address.contains("://") {
        address.to_owned()
    } else {
        format!("http://{address}")
    };
    Endpoint::from_shared(uri)
        .map(|e| e.connect_timeout(CONNECT_TIMEOUT).timeout(REQUEST_TIMEOUT))
        .map_err(|e| format!("{address:?} is not HOST:PORT ({e})"))
}

async fn connect(address: &str, tls: Option<&Connector>) -> Result<Channel, String> {
    super::tls::connect(endpoint(address)?, tls)
        .await
        .map_err(|e| root_cause(&e))
}

/// ClusterStatus from the first replica that answers; the error says what
/// each one did.
pub(super) async fn ask_placement(
    replicas: &[String],
    tls: Option<&Connector>,
) -> anyhow::Result<(String, pb::ClusterStatusResponse)> {
    let replicas: Vec<&str> = replicas
        .iter()
        .map(|r| r.trim())
        .filter(|r| !r.is_empty())
        .collect();
    if replicas.is_empty() {
        return Err(fail(
            Exit::Usage,
            format!("--placement is empty; give a placement replica as HOST:PORT (e.g. {DEFAULT_PLACEMENT})"),
        ));
    }
    let mut unreachable = Vec::new();
    let mut refused = Vec::new();
    for address in &replicas {
        let channel = match connect(address, tls).await {
            Ok(c) => c,
            Err(why) => {
                unreachable.push(format!("{address}: {why}"));
                continue;
            }
        };
        let mut client = pb::placement_client::PlacementClient::new(channel);
        match client.cluster_status(pb::ClusterStatusRequest {}).await {
            Ok(r) => return Ok((address.to_string(), r.into_inner())),
            Err(status) if std::error::Error::source(&status).is_some() => {
                unreachable.push(format!("{address}: {}", root_cause(&status)));
            }
            Err(status) => refused.push(format!(
                "{address}: {}: {}",
                code_name(status.code()),
                status.message()
            )),
        }
    }
    if refused.is_empty() {
        return Err(fail(
            Exit::Unreachable,
            format!(
                "cannot reach the placement service ({})\n  start it with `troupe placement \
                 serve`, or point --placement / TROUPE_PLACEMENT at its replicas' addresses",
                unreachable.join("; ")
            ),
        ));
    }
    refused.extend(unreachable);
    Err(fail(
        Exit::Daemon,
        format!(
            "the placement service could not answer ({})\n  it may be electing a leader or \
             have lost its majority; retry in a moment",
            refused.join("; ")
        ),
    ))
}

/// Every member of the current and pending table, with its actor count
/// asked from the daemon itself (all at once: an unreachable one costs one
/// timeout, not one each).
async fn members(status: &pb::ClusterStatusResponse, tls: Option<&Connector>) -> Vec<MemberView> {
    let table = status.table.clone().unwrap_or_default();
    let current = table.current.unwrap_or_default();
    let next = table.next;
    let mut views: Vec<MemberView> = Vec::new();
    for member in &current.members {
        views.push(MemberView {
            member: member.clone(),
            in_current: true,
            in_next: next
                .as_ref()
                .is_some_and(|n| n.members.iter().any(|m| m.node == member.node)),
            heartbeat_ms_ago: status.last_heartbeat_ms_ago.get(&member.node).copied(),
            actors: Err(String::new()),
            links: Vec::new(),
            inbound_links: None,
        });
    }
    for member in next.iter().flat_map(|n| &n.members) {
        if !views.iter().any(|v| v.member.node == member.node) {
            views.push(MemberView {
                member: member.clone(),
                in_current: false,
                in_next: true,
                heartbeat_ms_ago: status.last_heartbeat_ms_ago.get(&member.node).copied(),
                actors: Err(String::new()),
                links: Vec::new(),
                inbound_links: None,
            });
        }
    }
    views.sort_by(|a, b| a.member.node.cmp(&b.member.node));
    let counts = futures::future::join_all(
        views
            .iter()
            .map(|v| daemon_status(v.member.address.clone(), tls)),
    )
    .await;
    for (view, status) in views.iter_mut().zip(counts) {
        match status {
            Ok(status) => {
                view.actors = Ok(status.active_actors);
                view.links = status.links;
                view.inbound_links = status.inbound_links;
            }
            Err(e) => view.actors = Err(e),
        }
    }
    views
}

async fn daemon_status(
    address: String,
    tls: Option<&Connector>,
) -> Result<pb::StatusResponse, String> {
    let mut admin = member_admin(&address, tls).await?;
    admin
        .status(pb::StatusRequest {})
        .await
        .map(tonic::Response::into_inner)
        .map_err(member_error)
}

/// A member daemon's admin API, dialled as a member with the API token
/// from the environment.
pub(super) async fn member_admin(
    address: &str,
    tls: Option<&Connector>,
) -> Result<pb::admin_client::AdminClient<InterceptedService<Channel, BearerToken>>, String> {
    let channel = connect(address, tls).await?;
    let token = BearerToken::api_from_env().map_err(|e| e.to_string())?;
    Ok(pb::admin_client::AdminClient::with_interceptor(
        channel, token,
    ))
}

/// What a member's failed answer says: the broken connection's cause, or
/// the status it sent.
pub(super) fn member_error(s: tonic::Status) -> String {
    match std::error::Error::source(&s) {
        Some(_) => root_cause(&s),
        None => format!("{}: {}", code_name(s.code()), s.message()),
    }
}

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

fn status_json(replica: &str, s: &pb::ClusterStatusResponse, members: &[MemberView]) -> Value {
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
        "members": members,
    })
}

fn status_table(replica: &str, s: &pb::ClusterStatusResponse, members: &[MemberView]) -> String {
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
                member: member("a", false),
                in_current: true,
                in_next: true,
                heartbeat_ms_ago: Some(120),
                actors: Ok(5),
                links: Vec::new(),
                inbound_links: Some(pb::InboundLinks {
                    streams: 6,
                    let_go: 2,
                }),
            },
            MemberView {
                member: member("bb", true),
                in_current: true,
                in_next: false,
                heartbeat_ms_ago: Some(80),
                actors: Err("Connection refused (os error 111)".into()),
                links: Vec::new(),
                inbound_links: None,
            },
            MemberView {
                member: member("ccc", false),
                in_current: false,
                in_next: true,
                heartbeat_ms_ago: None,
                actors: Ok(0),
                links: Vec::new(),
                inbound_links: None,
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
