//! `troupe cluster actors`: the active actors of every member daemon, with
//! the node each lives on. A daemon lists only its own activations, so in a
//! cluster this asks placement for the members and each member for its
//! list, all at once.

use serde_json::{json, Value};
use troupe_proto::v1 as pb;
use troupe_tls::Connector;

use super::actors::{actor_json, actor_row, ACTOR_COLUMNS};
use super::cluster::{ask_placement, member_admin, member_error, ClusterTarget};
use super::render::Table;
use super::{emit, emit_json, fail, Exit, Output};

/// Actors asked of a member per page.
const PAGE: u32 = 1_000;

/// A member that could not give its list, and why.
struct Unlisted {
    node: String,
    address: String,
    error: String,
}

pub async fn cluster_actors(
    target: &ClusterTarget,
    actor_type: Option<String>,
) -> anyhow::Result<()> {
    let tls = target.tls.to_members()?;
    let (_, status) = ask_placement(&target.placement, tls.as_ref()).await?;
    let ty = actor_type.unwrap_or_default();
    let members = members_of(&status);
    let lists = futures::future::join_all(
        members
            .iter()
            .map(|(_, address)| listed_by(address, tls.as_ref(), &ty)),
    )
    .await;
    let mut rows: Vec<(String, pb::ActorInfo)> = Vec::new();
    let mut unlisted = Vec::new();
    for ((node, address), list) in members.into_iter().zip(lists) {
        match list {
            Ok(actors) => rows.extend(actors.into_iter().map(|a| (node.clone(), a))),
            Err(error) => unlisted.push(Unlisted {
                node,
                address,
                error,
            }),
        }
    }
    // An actor lives on one member; while it moves it may show on two.
    rows.sort_by(|(na, a), (nb, b)| {
        let key = |info: &pb::ActorInfo| {
            let r = info.actor.clone().unwrap_or_default();
            (r.r#type, r.id)
        };
        key(a).cmp(&key(b)).then_with(|| na.cmp(nb))
    });
    match target.output {
        Output::Json => emit_json(&json!({
            "actors": rows
                .iter()
                .map(|(node, a)| {
                    let mut row = actor_json(a);
                    row["node"] = Value::String(node.clone());
                    row
                })
                .collect::<Vec<_>>(),
            "unreachable": unlisted
                .iter()
                .map(|u| json!({"node": u.node, "address": u.address, "error": u.error}))
                .collect::<Vec<_>>(),
        }))?,
        Output::Table => emit(&table(&rows, &ty))?,
    }
    if unlisted.is_empty() {
        return Ok(());
    }
    let which: Vec<String> = unlisted
        .iter()
        .map(|u| format!("{} at {}: {}", u.node, u.address, u.error))
        .collect();
    Err(fail(
        Exit::Unreachable,
        format!(
            "the list lacks the actors of {} member(s) that did not answer ({}); check that \
             they run and that this host reaches their addresses, or ask one with `troupe \
             actors list --addr ADDRESS`",
            unlisted.len(),
            which.join("; ")
        ),
    ))
}

/// Every daemon of the current table and of the one being moved to, by
/// node name.
fn members_of(status: &pb::ClusterStatusResponse) -> Vec<(String, String)> {
    let table = status.table.clone().unwrap_or_default();
    let mut members: Vec<(String, String)> = table
        .current
        .iter()
        .chain(table.next.iter())
        .flat_map(|t| &t.members)
        .map(|m| (m.node.clone(), m.address.clone()))
        .collect();
    members.sort();
    members.dedup_by(|a, b| a.0 == b.0);
    members
}

/// Every active actor of one member (of `ty`, or of every type).
async fn listed_by(
    address: &str,
    tls: Option<&Connector>,
    ty: &str,
) -> Result<Vec<pb::ActorInfo>, String> {
    let mut admin = member_admin(address, tls).await?;
    let mut all = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = admin
            .list_actors(pb::ListActorsRequest {
                r#type: ty.to_owned(),
                page_size: PAGE,
                page_token,
            })
            .await
            .map_err(member_error)?
            .into_inner();
        all.extend(page.actors);
        if page.next_page_token.is_empty() {
            return Ok(all);
        }
        page_token = page.next_page_token;
    }
}

fn table(rows: &[(String, pb::ActorInfo)], ty: &str) -> String {
    if rows.is_empty() {
        return if ty.is_empty() {
            "no active actors in the cluster\n".to_owned()
        } else {
            format!("no active actors of type {ty} in the cluster\n")
        };
    }
    let mut columns = vec![("NODE", false)];
    columns.extend_from_slice(ACTOR_COLUMNS);
    let mut t = Table::new(&columns);
    for (node, a) in rows {
        let mut row = vec![node.clone()];
        row.extend(actor_row(a));
        t.row(row);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(node: &str, address: &str) -> pb::Member {
        pb::Member {
            node: node.into(),
            address: address.into(),
            ..Default::default()
        }
    }

    #[test]
    fn members_are_those_of_both_tables_once() {
        let status = pb::ClusterStatusResponse {
            table: Some(pb::PlacementTable {
                current: Some(pb::TableVersion {
                    members: vec![member("b", "10.0.0.2:7420"), member("a", "10.0.0.1:7420")],
                    ..Default::default()
                }),
                next: Some(pb::TableVersion {
                    members: vec![member("a", "10.0.0.1:7420"), member("c", "10.0.0.3:7420")],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let nodes: Vec<String> = members_of(&status).into_iter().map(|(n, _)| n).collect();
        assert_eq!(nodes, ["a", "b", "c"]);
    }
}
