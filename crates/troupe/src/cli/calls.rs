//! `troupe invoke` and `troupe state get`: the client API from the shell.

use serde_json::{json, Value};
use troupe_proto::v1 as pb;

use super::render::{Shown, Table};
use super::{actor_name, connect, emit, emit_json, fail, Exit, Output, Target};

fn actor_ref(ty: String, id: String) -> Option<pb::ActorRef> {
    Some(pb::ActorRef { r#type: ty, id })
}

pub async fn invoke(
    target: &Target,
    actor_type: String,
    id: String,
    method: String,
    data: Option<String>,
) -> anyhow::Result<()> {
    let data = data.unwrap_or_else(|| "{}".into());
    // Checked here rather than by the actor: a typo in the shell should not
    // cost a turn, and the message can show the expected shape.
    if let Err(e) = serde_json::from_str::<Value>(&data) {
        return Err(fail(
            Exit::Usage,
            format!(
                "--data is not JSON ({e}): {data}\n  \
                 pass the arguments as {{\"args\": [...], \"kwargs\": {{...}}}}, \
                 e.g. --data '{{\"kwargs\": {{\"by\": 5}}}}' (docs/payloads.md)"
            ),
        ));
    }
    let daemon = connect(target).await?;
    let mut client = pb::actor_client_client::ActorClientClient::new(daemon.channel.clone());
    let name = actor_name(&actor_type, &id);
    let request = daemon.request(if method.is_empty() {
        format!("call {name}")
    } else {
        format!("call {name}.{method}")
    });
    let reply = client
        .invoke(pb::InvokeRequest {
            actor: actor_ref(actor_type, id),
            method,
            payload: Some(pb::Payload {
                data: data.into_bytes().into(),
                content_type: pb::ContentType::Json as i32,
            }),
            ..Default::default()
        })
        .await
        .map_err(|s| request.failed(s))?
        .into_inner();
    let value = Shown::payload(reply.payload.as_ref());
    match target.output {
        Output::Json => emit_json(&value.json()),
        Output::Table => emit(&format!("{}\n", value.pretty())),
    }
}

pub async fn state_get(
    target: &Target,
    actor_type: String,
    id: String,
    key: Option<String>,
) -> anyhow::Result<()> {
    let daemon = connect(target).await?;
    let mut client = pb::actor_client_client::ActorClientClient::new(daemon.channel.clone());
    let name = actor_name(&actor_type, &id);
    let request = daemon.request(format!("read the state of {name}"));
    let reply = client
        .get_state(pb::GetStateRequest {
            actor: actor_ref(actor_type.clone(), id.clone()),
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
                    actor: actor_ref(actor_type.clone(), id.clone()),
                    keys: Vec::new(),
                })
                .await
                .map_err(|s| request.failed(s))?
                .into_inner();
            let mut keys: Vec<String> = all.entries.into_keys().collect();
            keys.sort();
            let has = if keys.is_empty() {
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

    match target.output {
        Output::Json => {
            let state: serde_json::Map<String, Value> = entries
                .iter()
                .map(|(k, v)| (k.clone(), Shown::of(v).json()))
                .collect();
            emit_json(&json!({ "active": reply.active, "state": state }))
        }
        // One key: its value alone, ready to read or paste.
        Output::Table if key.is_some() => {
            let text = entries
                .first()
                .map(|(_, v)| Shown::of(v).pretty())
                .unwrap_or_default();
            emit(&format!("{text}\n"))
        }
        Output::Table if entries.is_empty() => emit(&format!("{name} has no state\n")),
        Output::Table => {
            let mut t = Table::new(&[("KEY", false), ("VALUE", false)]);
            for (k, v) in entries {
                t.row(vec![k, Shown::of(&v).text()]);
            }
            emit(&t.render())
        }
    }
}
