//! A minimal Rust app for benchmarks: hosts `echo` (stateless: returns its
//! payload), `counter` (stateful: reads and writes key `count`, write-behind)
//! and `counter_durable` (the same in `durable` state mode) over the real app
//! stream, answering each turn as soon as it arrives.
//!
//! `bench_app ADDR` — prints `registered` once the daemon accepted it.

use std::collections::HashMap;

use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use troupe_proto::v1 as pb;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7420".into());
    let mut client = pb::app_host_client::AppHostClient::connect(format!("http://{addr}")).await?;
    let (tx, rx) = mpsc::unbounded_channel();
    let spec = |name: &str| pb::ActorTypeSpec {
        name: name.into(),
        max_mailbox: 10_000,
        ..Default::default()
    };
    tx.send(pb::AppMessage {
        kind: Some(pb::app_message::Kind::Register(pb::Register {
            app_name: "bench-app".into(),
            types: vec![
                spec("echo"),
                spec("counter"),
                pb::ActorTypeSpec {
                    state_mode: pb::StateMode::Durable as i32,
                    ..spec("counter_durable")
                },
            ],
            sdk: "rust-bench".into(),
        })),
    })?;
    let mut inbound = client
        .attach(UnboundedReceiverStream::new(rx))
        .await?
        .into_inner();
    // Instance state per actor, as an SDK keeps it.
    let mut counts: HashMap<(String, String), u64> = HashMap::new();
    while let Some(message) = inbound.message().await? {
        use pb::daemon_message::Kind;
        let reply = match message.kind {
            Some(Kind::Registered(_)) => {
                println!("registered");
                continue;
            }
            Some(Kind::Activate(a)) => {
                let actor = a.actor.unwrap_or_default();
                let count = a
                    .state
                    .get("count")
                    .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
                    .unwrap_or(0);
                counts.insert((actor.r#type, actor.id), count);
                pb::app_message::Kind::Activated(pb::ActivateResult {
                    call_id: a.call_id,
                    ..Default::default()
                })
            }
            Some(Kind::Turn(t)) => {
                let actor = t.actor.unwrap_or_default();
                if actor.r#type.starts_with("counter") {
                    let count = counts.entry((actor.r#type, actor.id)).or_default();
                    *count += 1;
                    let value = count.to_string();
                    pb::app_message::Kind::TurnResult(pb::TurnResult {
                        call_id: t.call_id,
                        outcome: Some(pb::turn_result::Outcome::Reply(pb::Payload {
                            data: value.clone().into_bytes().into(),
                            content_type: pb::ContentType::Json as i32,
                        })),
                        changes: vec![pb::StateChange {
                            key: "count".into(),
                            op: Some(pb::state_change::Op::Set(value.into_bytes().into())),
                        }],
                        ..Default::default()
                    })
                } else {
                    pb::app_message::Kind::TurnResult(pb::TurnResult {
                        call_id: t.call_id,
                        outcome: Some(pb::turn_result::Outcome::Reply(
                            t.payload.unwrap_or_default(),
                        )),
                        changes: Vec::new(),
                        ..Default::default()
                    })
                }
            }
            Some(Kind::Deactivate(d)) => {
                let actor = d.actor.unwrap_or_default();
                counts.remove(&(actor.r#type, actor.id));
                pb::app_message::Kind::Deactivated(pb::DeactivateResult {
                    call_id: d.call_id,
                    changes: Vec::new(),
                })
            }
            None => continue,
        };
        tx.send(pb::AppMessage { kind: Some(reply) })?;
    }
    Ok(())
}
