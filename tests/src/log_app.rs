//! [`LogApp`]: an app whose actors keep a log of the numbers sent to them,
//! for durable-tell tests: a number logged twice is a tell whose state
//! effects applied twice, one out of place a tell delivered out of order.
//!
//! Methods: `append(n)` adds `n` to state key `log` (a JSON array);
//! `flaky(n)` too, but raises while the app is told to fail
//! ([`LogApp::set_failing`]); `slow_flaky(ms)` is `flaky` after `ms` of
//! work (so a retry can be watched); `hold(ms)` keeps the actor busy; any
//! other method raises.

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

use crate::store::TestStore;
use crate::*;

/// The actor type the helpers below start and read.
pub const LOG_TYPE: &str = "log";

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
        Self::attach_over(channel, types).await
    }

    /// [`LogApp::attach`] over a channel of the caller's (e.g. with TLS).
    pub async fn attach_over(
        channel: Channel,
        types: Vec<pb::ActorTypeSpec>,
    ) -> anyhow::Result<LogApp> {
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
                        let fail = matches!(t.name.as_str(), "flaky" | "slow_flaky")
                            && flaky.load(Ordering::SeqCst);
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
    if t.name == "slow_flaky" {
        let ms = u64::try_from(kwarg(&t.payload, "ms")).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let (outcome, changes) = match t.name.as_str() {
        "append" | "flaky" | "slow_flaky" if !fail => {
            let n = kwarg(&t.payload, "n");
            let log = logs.lock().map(|mut logs| {
                let log = logs.entry(key).or_default();
                log.push(n);
                serde_json::to_vec(log).unwrap_or_default()
            });
            let change = pb::StateChange {
                ttl_ms: None,
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
                details: format!("Traceback (most recent call last):\n  File \"log.py\", line 9, in {other}\nValueError: {other} failed on purpose\n"),
                ..Default::default()
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
    tell_with(client, ty, id, method, n, pb::Delivery::Durable).await
}

/// Sends `method(n=n)` to `ty/id` as a tell with `delivery`.
pub async fn tell_with(
    client: &mut Client,
    ty: &str,
    id: &str,
    method: &str,
    n: i64,
    delivery: pb::Delivery,
) -> Result<(), tonic::Status> {
    let request = pb::TellRequest {
        actor: Some(actor(ty, id)),
        method: method.into(),
        payload: Some(json_payload(format!(
            "{{\"args\":[],\"kwargs\":{{\"n\":{n},\"ms\":{n}}}}}"
        ))),
        delivery: delivery.into(),
        ..Default::default()
    };
    client.0.tell(request).await.map(drop)
}

// ---------------------------------------------------- daemons for the tests

/// The daemon's flags: `store`, and a flush interval of an hour, so that
/// only the group commits of durable tells write anything.
pub fn crash_args(store: &TestStore) -> Vec<String> {
    let mut args = store.args();
    args.extend(["--flush-interval".into(), "1h".into()]);
    args
}

/// The restarted daemon's flags: the default flush interval, so that the
/// inbox removals of the tells it delivers are written (with their state)
/// and the inbox is seen to empty.
pub fn restart_args(store: &TestStore) -> Vec<String> {
    store.args()
}

pub async fn start(dir: &std::path::Path, args: &[String]) -> anyhow::Result<(Daemon, LogApp)> {
    start_typed(dir, args, type_spec(LOG_TYPE)).await
}

pub async fn start_typed(
    dir: &std::path::Path,
    args: &[String],
    spec: pb::ActorTypeSpec,
) -> anyhow::Result<(Daemon, LogApp)> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let daemon = Daemon::start(dir, &args).await?;
    let app = LogApp::attach(daemon.addr, vec![spec]).await?;
    Ok((daemon, app))
}

/// The stored log of `LOG_TYPE/id` once its inbox is empty and it holds at least
/// `at_least` numbers (pending tells are delivered by the inbox scan; a
/// handled tell leaves the stored inbox with the flush of its turn's state).
pub async fn settled_log(daemon: &Daemon, id: &str, at_least: usize) -> anyhow::Result<Vec<i64>> {
    let client = daemon.client().await?;
    let admin = daemon.admin().await?;
    poll_until(Duration::from_secs(30), "pending durable tells", || {
        let (mut client, mut admin) = (client.clone(), admin.clone());
        async move {
            let (entries, _) = client.state(LOG_TYPE, id).await?;
            let log = log_of(&entries)?;
            let described = admin
                .describe_actor(pb::DescribeActorRequest {
                    actor: Some(actor(LOG_TYPE, id)),
                })
                .await?
                .into_inner();
            Ok((described.inbox_depth == 0 && log.len() >= at_least).then_some(log))
        }
    })
    .await
    .map_err(|e| e.context(format!("daemon log:\n{}", daemon.log())))
}
