//! `troupe state get`: an actor's state as the client API reads it, with
//! when each key that expires does.

use serde_json::{json, Value};
use troupe_proto::v1 as pb;

use super::actors::actor_ref;
use super::render::{self, Shown, Table};
use super::type_hint::note_if_unhosted;
use super::{actor_name, connect, emit, emit_json, fail, Exit, Output, Target};

pub async fn state_get(
    target: &Target,
    actor_type: String,
    id: String,
    key: Option<String>,
) -> anyhow::Result<()> {
    let daemon = connect(target).await?;
    let mut client = daemon.actor_client();
    let name = actor_name(&actor_type, &id);
    let request = daemon.request(format!("read the state of {name}"));
    let reply = client
        .get_state(pb::GetStateRequest {
            actor: actor_ref(&actor_type, &id),
            keys: key.iter().cloned().collect(),
        })
        .await
        .map_err(|s| request.failed(s))?
        .into_inner();
    let mut entries: Vec<_> = reply.entries.into_iter().collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));

    if let Some(key) = &key {
        if entries.is_empty() {
            // Name the keys there are, so the next try can be right.
            let all = client
                .get_state(pb::GetStateRequest {
                    actor: actor_ref(&actor_type, &id),
                    keys: Vec::new(),
                })
                .await
                .map_err(|s| request.failed(s))?
                .into_inner();
            let mut keys: Vec<String> = all.entries.into_keys().collect();
            keys.sort();
            let has = if keys.is_empty() {
                note_if_unhosted(&daemon, &actor_type).await;
                "it has no state".to_owned()
            } else {
                format!("its keys: {}", keys.join(", "))
            };
            return Err(fail(
                Exit::NotFound,
                format!("{name} has no state key {key:?} ({has})"),
            ));
        }
    }

    let expires = |k: &str| reply.expires_unix_ms.get(k).copied().unwrap_or(0);
    match target.output {
        Output::Json => {
            let state: serde_json::Map<String, Value> = entries
                .iter()
                .map(|(k, v)| (k.clone(), Shown::of(v).json()))
                .collect();
            let (mut at, mut at_ms) = (serde_json::Map::new(), serde_json::Map::new());
            for (k, ms) in &reply.expires_unix_ms {
                at.insert(k.clone(), json!(render::time(*ms)));
                at_ms.insert(k.clone(), json!(ms));
            }
            emit_json(&json!({
                "active": reply.active,
                "state": state,
                "expires": at,
                "expires_unix_ms": at_ms,
            }))
        }
        // One key: its value alone, ready to read or paste.
        Output::Table if key.is_some() => {
            let text = entries
                .first()
                .map(|(_, v)| Shown::of(v).pretty())
                .unwrap_or_default();
            emit(&format!("{text}\n"))
        }
        Output::Table if entries.is_empty() => {
            emit(&format!("{name} has no state\n"))?;
            note_if_unhosted(&daemon, &actor_type).await;
            Ok(())
        }
        // An EXPIRES column only when a key expires: most actors have none.
        Output::Table if reply.expires_unix_ms.is_empty() => {
            let mut t = Table::new(&[("KEY", false), ("VALUE", false)]);
            for (k, v) in entries {
                t.row(vec![k, Shown::of(&v).text()]);
            }
            emit(&t.render())
        }
        Output::Table => {
            let mut t = Table::new(&[("KEY", false), ("EXPIRES", false), ("VALUE", false)]);
            for (k, v) in entries {
                let at = render::time_cell(expires(&k));
                t.row(vec![k, at, Shown::of(&v).text()]);
            }
            emit(&t.render())
        }
    }
}
