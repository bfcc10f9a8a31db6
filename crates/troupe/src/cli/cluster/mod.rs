//! `troupe cluster status`: the cluster as placement sees it, with each
//! member daemon's own count of active actors; gathering it is this file,
//! showing it `view.rs` (the tokens' use over the members `tokens.rs`),
//! and judging it (`--check`) `problems.rs`.

mod problems;
mod tokens;
mod view;

use std::time::Duration;

use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use troupe_proto::v1 as pb;
use troupe_tls::Connector;

use crate::auth::BearerToken;

use super::status::problems::{self as daemon_problems, Problem};
use super::{fail, root_cause, Exit, Output};
use crate::convert::errors::code_name;
use problems::cluster_problems;
use view::{status_json, status_table};

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
    /// What in its own status needs a person (`troupe status --check`).
    problems: Vec<Problem>,
    /// The tokens it accepts, with their use (`tokens.rs`).
    tokens: Vec<pb::TokenUse>,
}

impl MemberView {
    /// A member as the table shows it, before the daemon itself was asked.
    fn unasked(
        member: &pb::Member,
        in_current: bool,
        in_next: bool,
        heartbeat_ms_ago: Option<u64>,
    ) -> Self {
        MemberView {
            member: member.clone(),
            in_current,
            in_next,
            heartbeat_ms_ago,
            actors: Err(String::new()),
            links: Vec::new(),
            inbound_links: None,
            problems: Vec::new(),
            tokens: Vec::new(),
        }
    }
}

/// Prints the cluster; with `check`, also the problems in it and in each
/// member, and exits 7 when there is one.
pub async fn cluster_status(target: &ClusterTarget, check: bool) -> anyhow::Result<()> {
    let tls = target.tls.to_members()?;
    let (replica, status) = ask_placement(&target.placement, tls.as_ref()).await?;
    let members = members(&status, tls.as_ref()).await;
    let found = check.then(|| cluster_problems(&status, &members));
    daemon_problems::emit_checked(
        target.output,
        || status_json(&replica, &status, &members),
        || status_table(&replica, &status, &members),
        found,
        "the cluster",
    )
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
                 serve`, or point --placement / TROUPE_PLACEMENT at its replicas' addresses; \
                 a daemon started without --placement runs alone, with no cluster to show \
                 (`troupe status` shows it)",
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
    let heartbeat = |node: &str| status.last_heartbeat_ms_ago.get(node).copied();
    let in_next = |node: &str| {
        next.as_ref()
            .is_some_and(|n| n.members.iter().any(|m| m.node == node))
    };
    let mut views: Vec<MemberView> = current
        .members
        .iter()
        .map(|m| MemberView::unasked(m, true, in_next(&m.node), heartbeat(&m.node)))
        .collect();
    for member in next.iter().flat_map(|n| &n.members) {
        if !views.iter().any(|v| v.member.node == member.node) {
            views.push(MemberView::unasked(
                member,
                false,
                true,
                heartbeat(&member.node),
            ));
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
                view.problems = daemon_problems::problems(&status, daemon_problems::now_ms());
                view.actors = Ok(status.active_actors);
                view.links = status.links;
                view.inbound_links = status.inbound_links;
                view.tokens = status.security.map(|s| s.tokens).unwrap_or_default();
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
