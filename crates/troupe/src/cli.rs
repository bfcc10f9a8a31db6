//! Client commands of the `troupe` binary: talk to a running daemon.

use anyhow::Context;
use tonic::transport::Channel;
use troupe_proto::v1 as pb;

/// Where the daemon is, for client commands.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// Daemon address (host:port or http://host:port).
    #[arg(long, env = "TROUPE_ADDR", default_value = crate::config::DEFAULT_LISTEN, global = true)]
    pub addr: String,
    /// Output: `table` for people, `json` for scripts.
    #[arg(short = 'o', long, default_value = "table", global = true)]
    pub output: Output,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Table,
    Json,
}

async fn channel(target: &Target) -> anyhow::Result<Channel> {
    let uri = if target.addr.contains("://") {
        target.addr.clone()
    } else {
        format!("http://{}", target.addr)
    };
    Channel::from_shared(uri.clone())
        .with_context(|| format!("{:?} is not a valid daemon address", target.addr))?
        .connect()
        .await
        .with_context(|| {
            format!(
                "cannot reach the troupe daemon at {}; start it with `troupe serve` or set --addr / TROUPE_ADDR",
                target.addr
            )
        })
}

/// Shows a payload as JSON when it is JSON, otherwise as base64-free hex-ish text.
fn show_bytes(data: &[u8]) -> serde_json::Value {
    serde_json::from_slice(data)
        .unwrap_or_else(|_| serde_json::Value::String(format!("<{} bytes, not JSON>", data.len())))
}

fn status_error(status: tonic::Status) -> anyhow::Error {
    let ty = status
        .metadata()
        .get(crate::convert::ERROR_TYPE_TRAILER)
        .and_then(|v| v.to_str().ok())
        .map(|t| format!(" ({t})"))
        .unwrap_or_default();
    anyhow::anyhow!("{:?}{ty}: {}", status.code(), status.message())
}

pub async fn invoke(
    target: &Target,
    actor_type: String,
    id: String,
    method: String,
    data: Option<String>,
) -> anyhow::Result<()> {
    let data = data.unwrap_or_else(|| "{}".into());
    serde_json::from_str::<serde_json::Value>(&data)
        .with_context(|| format!("--data is not JSON: {data}"))?;
    let mut client = pb::actor_client_client::ActorClientClient::new(channel(target).await?);
    let reply = client
        .invoke(pb::InvokeRequest {
            actor: Some(pb::ActorRef {
                r#type: actor_type,
                id,
            }),
            method,
            payload: Some(pb::Payload {
                data: data.into_bytes().into(),
                content_type: pb::ContentType::Json as i32,
            }),
            ..Default::default()
        })
        .await
        .map_err(status_error)?
        .into_inner();
    let value = show_bytes(&reply.payload.map(|p| p.data).unwrap_or_default());
    println!("{}", serde_json::to_string_pretty(&value)?);
    Ok(())
}

pub async fn state_get(
    target: &Target,
    actor_type: String,
    id: String,
    key: Option<String>,
) -> anyhow::Result<()> {
    let mut client = pb::actor_client_client::ActorClientClient::new(channel(target).await?);
    let reply = client
        .get_state(pb::GetStateRequest {
            actor: Some(pb::ActorRef {
                r#type: actor_type,
                id,
            }),
            keys: key.into_iter().collect(),
        })
        .await
        .map_err(status_error)?
        .into_inner();
    let mut entries: Vec<_> = reply.entries.into_iter().collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    match target.output {
        Output::Json => {
            let map: serde_json::Map<_, _> = entries
                .iter()
                .map(|(k, v)| (k.clone(), show_bytes(v)))
                .collect();
            let out = serde_json::json!({ "active": reply.active, "state": map });
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
        Output::Table => {
            println!("{:<24} VALUE", "KEY");
            for (k, v) in entries {
                println!("{k:<24} {}", show_bytes(&v));
            }
        }
    }
    Ok(())
}

pub async fn actors_list(target: &Target, actor_type: Option<String>) -> anyhow::Result<()> {
    let mut client = pb::admin_client::AdminClient::new(channel(target).await?);
    let mut token = String::new();
    let mut all = Vec::new();
    loop {
        let page = client
            .list_actors(pb::ListActorsRequest {
                r#type: actor_type.clone().unwrap_or_default(),
                page_size: 500,
                page_token: token,
            })
            .await
            .map_err(status_error)?
            .into_inner();
        all.extend(page.actors);
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    match target.output {
        Output::Json => {
            let rows: Vec<_> = all
                .iter()
                .map(|a| {
                    let actor = a.actor.clone().unwrap_or_default();
                    serde_json::json!({
                        "type": actor.r#type, "id": actor.id, "mailbox": a.mailbox_depth,
                        "turns": a.turns, "dirty": a.dirty, "idle_ms": a.idle_ms,
                    })
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&rows)?);
        }
        Output::Table => {
            println!(
                "{:<16} {:<24} {:>7} {:>8} {:>6} {:>9}",
                "TYPE", "ID", "MAILBOX", "TURNS", "DIRTY", "IDLE"
            );
            for a in all {
                let actor = a.actor.unwrap_or_default();
                println!(
                    "{:<16} {:<24} {:>7} {:>8} {:>6} {:>8}s",
                    actor.r#type,
                    actor.id,
                    a.mailbox_depth,
                    a.turns,
                    a.dirty,
                    a.idle_ms / 1000
                );
            }
        }
    }
    Ok(())
}

pub async fn status(target: &Target) -> anyhow::Result<()> {
    let mut client = pb::admin_client::AdminClient::new(channel(target).await?);
    let s = client
        .status(pb::StatusRequest {})
        .await
        .map_err(status_error)?
        .into_inner();
    match target.output {
        Output::Json => {
            let types: Vec<_> = s
                .types
                .iter()
                .map(|t| serde_json::json!({"name": t.name, "apps": t.apps, "active_actors": t.active_actors}))
                .collect();
            let out = serde_json::json!({
                "version": s.version, "uptime_ms": s.uptime_ms, "store": s.store,
                "active_actors": s.active_actors, "dirty_actors": s.dirty_actors, "types": types,
            });
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
        Output::Table => {
            println!("version        {}", s.version);
            println!("uptime         {}s", s.uptime_ms / 1000);
            println!("store          {}", s.store);
            println!("active actors  {}", s.active_actors);
            println!("dirty actors   {}", s.dirty_actors);
            println!("\n{:<20} {:>7}  APPS", "TYPE", "ACTIVE");
            for t in s.types {
                println!(
                    "{:<20} {:>7}  {}",
                    t.name,
                    t.active_actors,
                    t.apps.join(", ")
                );
            }
        }
    }
    Ok(())
}

pub async fn reminders_list(
    target: &Target,
    actor_type: Option<String>,
    actor_id: Option<String>,
) -> anyhow::Result<()> {
    let mut client = pb::actor_client_client::ActorClientClient::new(channel(target).await?);
    let mut token = String::new();
    let mut all = Vec::new();
    loop {
        let page = client
            .list_reminders(pb::ListRemindersRequest {
                r#type: actor_type.clone().unwrap_or_default(),
                id: actor_id.clone().unwrap_or_default(),
                page_size: 1000,
                page_token: token,
            })
            .await
            .map_err(status_error)?
            .into_inner();
        all.extend(page.reminders);
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let due = |ms: u64| {
        humantime::format_rfc3339_millis(
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms),
        )
        .to_string()
    };
    match target.output {
        Output::Json => {
            let rows: Vec<_> = all
                .iter()
                .map(|r| {
                    let actor = r.actor.clone().unwrap_or_default();
                    serde_json::json!({
                        "type": actor.r#type, "id": actor.id,
                        "name": if r.alarm { "(alarm)".to_owned() } else { r.name.clone() },
                        "alarm": r.alarm, "next_due": due(r.next_due_unix_ms),
                        "next_due_unix_ms": r.next_due_unix_ms, "period_ms": r.period_ms,
                        "remaining": r.remaining, "attempts": r.attempts, "fired": r.fired,
                    })
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&rows)?);
        }
        Output::Table => {
            println!(
                "{:<14} {:<16} {:<16} {:<26} {:>10} {:>8} {:>7}",
                "TYPE", "ID", "NAME", "NEXT DUE", "PERIOD", "ATTEMPTS", "FIRED"
            );
            for r in all {
                let actor = r.actor.unwrap_or_default();
                let period = if r.period_ms == 0 {
                    "-".to_owned()
                } else {
                    humantime::format_duration(std::time::Duration::from_millis(r.period_ms))
                        .to_string()
                };
                let name = if r.alarm {
                    "(alarm)".to_owned()
                } else {
                    r.name
                };
                println!(
                    "{:<14} {:<16} {:<16} {:<26} {:>10} {:>8} {:>7}",
                    actor.r#type,
                    actor.id,
                    name,
                    due(r.next_due_unix_ms),
                    period,
                    r.attempts,
                    r.fired
                );
            }
        }
    }
    Ok(())
}
