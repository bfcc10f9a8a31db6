//! `troupe actors list | deactivate` (`get` is `actors_get`, `purge` is
//! `purge`).

use std::collections::HashSet;

use serde_json::{json, Value};
use troupe_proto::v1 as pb;

use super::render::{self, Table};
use super::type_hint::note_if_unhosted;
use super::{actor_name, all_pages, connect, emit, emit_json, Admin, Output, Target};

pub(super) fn actor_ref(ty: &str, id: &str) -> Option<pb::ActorRef> {
    Some(pb::ActorRef {
        r#type: ty.to_owned(),
        id: id.to_owned(),
    })
}

/// Every active actor (of `ty`, or of every type when empty).
async fn active(
    admin: &Admin,
    request: &super::failure::Request<'_>,
    ty: &str,
) -> anyhow::Result<Vec<pb::ActorInfo>> {
    all_pages(|page_token| {
        let mut admin = admin.clone();
        let ask = pb::ListActorsRequest {
            r#type: ty.to_owned(),
            page_size: 1000,
            page_token,
        };
        async move {
            let page = admin
                .list_actors(ask)
                .await
                .map_err(|s| request.failed(s))?
                .into_inner();
            Ok((page.actors, page.next_page_token))
        }
    })
    .await
}

pub async fn actors_list(
    target: &Target,
    actor_type: Option<String>,
    stored: bool,
) -> anyhow::Result<()> {
    let daemon = connect(target).await?;
    let admin = daemon.admin();
    let ty = actor_type.unwrap_or_default();
    let of_type = if ty.is_empty() {
        String::new()
    } else {
        format!(" of type {ty}")
    };
    if stored {
        return stored_list(target, &daemon, &admin, &ty).await;
    }
    let request = daemon.request(format!("list active actors{of_type}"));
    let actors = active(&admin, &request, &ty).await?;
    if target.output == Output::Json {
        return emit_json(&Value::Array(actors.iter().map(actor_json).collect()));
    }
    if actors.is_empty() {
        emit(&format!("no active actors{of_type}\n"))?;
        if !ty.is_empty() {
            note_if_unhosted(&daemon, &ty).await;
        }
        return Ok(());
    }
    let mut t = Table::new(ACTOR_COLUMNS);
    for a in &actors {
        t.row(actor_row(a));
    }
    emit(&t.render())
}

/// The columns of an active actor's row ([`actor_row`]).
pub(super) const ACTOR_COLUMNS: &[(&str, bool)] = &[
    ("TYPE", false),
    ("ID", false),
    ("STATUS", false),
    ("MAILBOX", true),
    ("TURNS", true),
    ("DIRTY", false),
    ("IDLE", true),
];

pub(super) fn actor_row(a: &pb::ActorInfo) -> Vec<String> {
    let actor = a.actor.clone().unwrap_or_default();
    vec![
        actor.r#type,
        actor.id,
        render::activation_status(a.status).to_owned(),
        a.mailbox_depth.to_string(),
        a.turns.to_string(),
        render::yes_no(a.dirty).to_owned(),
        render::duration(a.idle_ms),
    ]
}

pub(super) fn actor_json(a: &pb::ActorInfo) -> Value {
    let actor = a.actor.clone().unwrap_or_default();
    json!({
        "type": actor.r#type,
        "id": actor.id,
        "status": render::activation_status(a.status),
        "mailbox": a.mailbox_depth,
        "turns": a.turns,
        "dirty": a.dirty,
        "idle_ms": a.idle_ms,
    })
}

/// `actors list --stored --type T`: ids with stored state, and whether each
/// is active right now.
async fn stored_list(
    target: &Target,
    daemon: &super::Daemon,
    admin: &Admin,
    ty: &str,
) -> anyhow::Result<()> {
    let request = daemon.request(format!("list stored actors of type {ty}"));
    let ids = all_pages(|page_token| {
        let mut admin = admin.clone();
        let ask = pb::ListStoredActorsRequest {
            r#type: ty.to_owned(),
            page_size: 1000,
            page_token,
        };
        let request = &request;
        async move {
            let page = admin
                .list_stored_actors(ask)
                .await
                .map_err(|s| request.failed(s))?
                .into_inner();
            Ok((page.ids, page.next_page_token))
        }
    })
    .await?;
    let active: HashSet<String> = active(admin, &request, ty)
        .await?
        .into_iter()
        .filter_map(|a| a.actor.map(|a| a.id))
        .collect();
    if target.output == Output::Json {
        let rows = ids
            .iter()
            .map(|id| json!({"type": ty, "id": id, "active": active.contains(id)}))
            .collect();
        return emit_json(&Value::Array(rows));
    }
    if ids.is_empty() {
        return emit(&format!("no stored actors of type {ty}\n"));
    }
    let mut t = Table::new(&[("TYPE", false), ("ID", false), ("ACTIVE", false)]);
    for id in ids {
        let is_active = render::yes_no(active.contains(&id)).to_owned();
        t.row(vec![ty.to_owned(), id, is_active]);
    }
    emit(&t.render())
}

pub async fn actors_deactivate(
    target: &Target,
    actor_type: String,
    id: String,
) -> anyhow::Result<()> {
    let daemon = connect(target).await?;
    let mut admin = daemon.admin();
    let name = actor_name(&actor_type, &id);
    let request = daemon.request(format!("deactivate {name}"));
    let reply = admin
        .deactivate_actor(pb::DeactivateActorRequest {
            actor: actor_ref(&actor_type, &id),
        })
        .await
        .map_err(|s| request.failed(s))?
        .into_inner();
    match target.output {
        Output::Json => emit_json(&json!({
            "type": actor_type,
            "id": id,
            "deactivated": reply.deactivated,
        })),
        Output::Table if reply.deactivated => emit(&format!(
            "deactivated {name}: its state is flushed; the next call activates it again\n"
        )),
        Output::Table => emit(&format!("{name} was not active; nothing to do\n")),
    }
}
