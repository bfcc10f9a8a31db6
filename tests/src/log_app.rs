//! [`LogApp`]: an app whose actors keep a log of the numbers sent to them,
//! for durable-tell tests: a number logged twice is a tell whose state
//! effects applied twice, one out of place a tell delivered out of order.
//!
//! Methods: `append(n)` adds `n` to state key `log` (a JSON array);
//! `flaky(n)` too, but raises while the app is told to fail
//! ([`LogApp::set_failing`]); `hold(ms)` keeps the actor busy; any other
//! method raises.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::bail;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;

use crate::*;

type Logs = Arc<Mutex<HashMap<(String, String), Vec<i64>>>>;

/// A running [`LogApp`]; dropping it closes its stream.
#[derive(Debug)]
pub struct LogApp {
    task: JoinHandle<()>,
    failing: Arc<AtomicBool>,
}

impl Drop for LogApp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The log stored in an actor's state entries (empty when none).
pub fn log_of(entries: &HashMap<String, bytes::Bytes>) -> anyhow::Result<Vec<i64>> {
    match entries.get("log") {
        Some(v) => Ok(serde_json::from_slice(v)?),
        None => Ok(Vec::new()),
    }
}

fn kwarg(payload: &Option<pb::Payload>, name: &str) -> i64 {
    payload
        .as_ref()
        .and_then(|p| serde_json::from_slice::<serde_json::Value>(&p.data).ok())
        .and_then(|v| v.get("kwargs")?.get(name)?.as_i64())
        .unwrap_or(0)
}

impl LogApp {
    /// Whether `flaky` raises from now on.
    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    pub async fn attach(addr: SocketAddr, types: Vec<pb::ActorTypeSpec>) -> anyhow::Result<LogApp> {
        let channel = Channel::from_shared(format!("http://{addr}"))?
            .connect()
            .await?;
        let mut client = pb::app_host_client::AppHostClient::new(channel);
        let (out, rx) = mpsc::unbounded_channel();
        out.send(register_message("log-test-app", types))?;
        let mut inbound = within(
            WAIT,
            "Attach",
            client.attach(UnboundedReceiverStream::new(rx)),
        )
        .await??
        .into_inner();
        match within(WAIT, "Registered", inbound.message())
            .await??
            .and_then(|m| m.kind)
        {
            Some(pb::daemon_message::Kind::Registered(_)) => {}
            other => bail!("expected Registered, got {other:?}"),
        }
        let logs = Logs::default();
        let failing = Arc::new(AtomicBool::new(false));
        let flaky = failing.clone();
        let task = tokio::spawn(async move {
            use pb::app_message::Kind as Out;
            use pb::daemon_message::Kind;
            while let Ok(Some(message)) = inbound.message().await {
                match message.kind {
                    Some(Kind::Activate(a)) => {
                        let key = a.actor.map(|a| (a.r#type, a.id)).unwrap_or_default();
                        let log = a
                            .state
                            .get("log")
                            .and_then(|v| serde_json::from_slice(v).ok())
                            .unwrap_or_default();
                        if let Ok(mut logs) = logs.lock() {
                            logs.insert(key, log);
                        }
                        let _ = out.send(pb::AppMessage {
                            kind: Some(Out::Activated(pb::ActivateResult {
                                call_id: a.call_id,
                                ..Default::default()
                            })),
                        });
                    }
                    Some(Kind::Deactivate(d)) => {
                        let _ = out.send(pb::AppMessage {
                            kind: Some(Out::Deactivated(pb::DeactivateResult {
                                call_id: d.call_id,
                                changes: Vec::new(),
                            })),
                        });
                    }
                    Some(Kind::Turn(t)) => {
                        let fail = t.name == "flaky" && flaky.load(Ordering::SeqCst);
                        tokio::spawn(turn(t, fail, logs.clone(), out.clone()));
                    }
                    _ => {}
                }
            }
        });
        Ok(LogApp { task, failing })
    }
}

async fn turn(t: pb::Turn, fail: bool, logs: Logs, out: mpsc::UnboundedSender<pb::AppMessage>) {
    use pb::turn_result::Outcome;
    let key = t
        .actor
        .as_ref()
        .map(|a| (a.r#type.clone(), a.id.clone()))
        .unwrap_or_default();
    let (outcome, changes) = match t.name.as_str() {
        "append" | "flaky" if !fail => {
            let n = kwarg(&t.payload, "n");
            let log = logs.lock().map(|mut logs| {
                let log = logs.entry(key).or_default();
                log.push(n);
                serde_json::to_vec(log).unwrap_or_default()
            });
            let change = pb::StateChange {
                key: "log".into(),
                op: Some(pb::state_change::Op::Set(log.unwrap_or_default().into())),
            };
            (Outcome::Reply(json_payload("null")), vec![change])
        }
        "hold" => {
            let ms = u64::try_from(kwarg(&t.payload, "ms")).unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            (Outcome::Reply(json_payload("null")), Vec::new())
        }
        other => (
            Outcome::Error(pb::ActorFailure {
                r#type: "ValueError".into(),
                message: format!("{other} failed on purpose"),
                details: String::new(),
            }),
            Vec::new(),
        ),
    };
    let _ = out.send(pb::AppMessage {
        kind: Some(pb::app_message::Kind::TurnResult(pb::TurnResult {
            call_id: t.call_id,
            outcome: Some(outcome),
            changes,
            ..Default::default()
        })),
    });
}

/// Sends `method(n=n)` to `ty/id` as a durable tell: `Ok` once stored.
pub async fn tell_durable(
    client: &mut Client,
    ty: &str,
    id: &str,
    method: &str,
    n: i64,
) -> Result<(), tonic::Status> {
    let request = pb::TellRequest {
        actor: Some(actor(ty, id)),
        method: method.into(),
        payload: Some(json_payload(format!(
            "{{\"args\":[],\"kwargs\":{{\"n\":{n},\"ms\":{n}}}}}"
        ))),
        delivery: pb::Delivery::Durable.into(),
        ..Default::default()
    };
    client.0.tell(request).await.map(drop)
}
