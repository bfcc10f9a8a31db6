//! [`TestApp`]: a well-behaved app hosting counters over the app stream.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;
use tonic::Streaming;

use crate::*;

/// An actor type with the daemon's defaults except the name.
pub fn type_spec(name: &str) -> pb::ActorTypeSpec {
    pb::ActorTypeSpec {
        name: name.to_owned(),
        ..Default::default()
    }
}

/// [`type_spec`] for a type that lets a call chain re-enter its actors.
pub fn reentrant_type(name: &str) -> pb::ActorTypeSpec {
    pb::ActorTypeSpec {
        reentrant: true,
        ..type_spec(name)
    }
}

pub type ActorKey = (String, String);

fn key_of(actor: &Option<pb::ActorRef>) -> ActorKey {
    actor
        .as_ref()
        .map(|a| (a.r#type.clone(), a.id.clone()))
        .unwrap_or_default()
}

/// What a [`TestApp`] has seen so far.
#[derive(Debug, Default, Clone)]
pub struct AppEvents {
    pub activations: Vec<ActorKey>,
    pub deactivations: Vec<(ActorKey, Reason)>,
    /// Turns answered.
    pub turns: u64,
    pub in_flight: HashMap<ActorKey, u32>,
    /// The most turns of one actor the app ever had in hand at once.
    pub max_concurrent: HashMap<ActorKey, u32>,
    /// Set when the daemon's stream ended: Ok(()) or the error status text.
    pub stream_end: Option<Result<(), String>>,
    /// Each turn the app ran: the actor and when it started (unix ms).
    pub turns_run: Vec<(ActorKey, u64)>,
    /// Activations and turns refused because their lease deadline had
    /// passed when they arrived, as SDKs refuse them.
    pub lease_refusals: Vec<ActorKey>,
}

impl AppEvents {
    pub fn deactivated(&self, ty: &str, id: &str, reason: Reason) -> bool {
        self.deactivations
            .iter()
            .any(|((t, i), r)| t == ty && i == id && *r == reason)
    }
}

/// A well-behaved app hosting counters: state key "count" (a JSON number);
/// methods "incr" (`{"kwargs":{"by":N}}`, default 1; replies the new
/// count; an alarm firing runs it too), "incr_pair" (the same, and sets key
/// "copy" to the same value in the same turn), "get", "add_item" (takes one
/// argument `sku` and replies it, refusing other arguments with `TypeError`
/// as Python's argument binding does), "fail" (raises
/// ValueError("boom")), "metadata" (replies the call's metadata as a JSON
/// object), "sleep" (`{"kwargs":{"ms":N}}`: holds the turn open
/// that long, then replies null), and "put_raw" (stores the call's payload
/// bytes as they are under key "raw" and replies them with content type
/// BYTES: state and results that are not JSON), "incr_publish" (as
/// "incr", and publishes the new count, then `{"after": count}`, to the
/// actor's watchers), "publish_fail" (publishes, then raises) and
/// "publish_many" (publishes more events than a turn may).
///
/// Like the SDKs, it refuses an activation or a turn that arrives after its
/// lease deadline (`lease_expired`).
///
/// Each turn runs in its own task that yields before it replies, so if the
/// daemon ever ran two turns of one actor at once, updates would be lost and
/// `max_concurrent` would show it.
#[derive(Debug)]
pub struct TestApp {
    events: Arc<watch::Sender<AppEvents>>,
    out: mpsc::UnboundedSender<pb::AppMessage>,
    task: JoinHandle<()>,
    pub registered: pb::Registered,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestApp {
    pub async fn attach(
        addr: SocketAddr,
        types: Vec<pb::ActorTypeSpec>,
    ) -> anyhow::Result<TestApp> {
        let channel = Channel::from_shared(format!("http://{addr}"))?
            .connect()
            .await?;
        Self::attach_over(channel, types).await
    }

    /// [`TestApp::attach`] over a channel already connected (e.g. with TLS).
    pub async fn attach_over(
        channel: Channel,
        types: Vec<pb::ActorTypeSpec>,
    ) -> anyhow::Result<TestApp> {
        // Any turn the daemon may send (tests raise --max-payload-bytes).
        let mut client = pb::app_host_client::AppHostClient::new(channel)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        let (out, rx) = mpsc::unbounded_channel();
        out.send(pb::AppMessage {
            kind: Some(pb::app_message::Kind::Register(pb::Register {
                app_name: "rust-test-app".into(),
                types,
                sdk: "troupe-tests".into(),
                accepts_batches: false,
                max_receive_bytes: 0,
                api_version: pb::API_VERSION,
                accepts_parts: false,
                accepts_cancel: false,
            })),
        })?;
        let mut inbound = within(
            WAIT,
            "Attach",
            client.attach(UnboundedReceiverStream::new(rx)),
        )
        .await??
        .into_inner();
        let registered = match within(WAIT, "Registered", inbound.message())
            .await??
            .and_then(|m| m.kind)
        {
            Some(pb::daemon_message::Kind::Registered(r)) => r,
            other => bail!("expected Registered, got {other:?}"),
        };
        let events = Arc::new(watch::Sender::new(AppEvents::default()));
        let task = tokio::spawn(serve_counter(inbound, out.clone(), events.clone()));
        Ok(TestApp {
            events,
            out,
            task,
            registered,
        })
    }

    /// A snapshot of the events.
    pub fn events(&self) -> AppEvents {
        self.events.borrow().clone()
    }

    /// Waits (bounded) until `pred` holds for the events.
    pub async fn wait_for(
        &self,
        what: &str,
        limit: Duration,
        pred: impl FnMut(&AppEvents) -> bool,
    ) -> anyhow::Result<AppEvents> {
        let mut rx = self.events.subscribe();
        let seen = within(limit, what, rx.wait_for(pred)).await?;
        let events = seen
            .map_err(|_| anyhow!("the app stopped while waiting for {what}"))?
            .clone();
        Ok(events)
    }

    /// Closes the stream from the app's side.
    pub fn detach(self) {
        drop(self)
    }

    /// Sends any message on the app's stream (for protocol tests).
    pub fn send(&self, message: pb::AppMessage) -> anyhow::Result<()> {
        self.out
            .send(message)
            .map_err(|_| anyhow!("app stream closed"))
    }
}

/// The integer keyword argument `name` of a JSON payload (`{"kwargs": {...}}`).
fn json_kwarg(payload: &Option<pb::Payload>, name: &str) -> Option<i64> {
    let data = payload.as_ref().map(|p| p.data.clone()).unwrap_or_default();
    serde_json::from_slice::<serde_json::Value>(&data)
        .ok()
        .and_then(|v| v.get("kwargs")?.get(name)?.as_i64())
}

/// The stack trace "fail" reports, as the Python SDK would: callers must
/// see it whole, newlines and non-ASCII included, through every hop.
pub const FAIL_TRACE: &str = "Traceback (most recent call last):\n  File \"counter.py\", line 7, in fail\n    raise ValueError(\"boom\")\nValueError: boom — 100%\n";

fn parse_by(payload: &Option<pb::Payload>) -> i64 {
    json_kwarg(payload, "by").unwrap_or(1)
}

/// Binds the arguments of "add_item(sku)" the way the Python SDK does, with
/// its failure types: `PayloadError` for a payload that is no call,
/// `TypeError` for arguments that do not fit the signature.
fn bind_sku(payload: &Option<pb::Payload>) -> Result<String, pb::ActorFailure> {
    let refuse = |ty: &str, message: String| pb::ActorFailure {
        r#type: ty.into(),
        message,
        details: String::new(),
        kind: pb::FailureKind::BadArguments.into(),
    };
    let data = payload.as_ref().map(|p| p.data.clone()).unwrap_or_default();
    let call: serde_json::Value = serde_json::from_slice(&data).map_err(|e| {
        refuse(
            "PayloadError",
            format!("call payload is not valid JSON: {e}"),
        )
    })?;
    let args = call.get("args").and_then(|a| a.as_array()).cloned();
    let kwargs = call.get("kwargs").and_then(|k| k.as_object()).cloned();
    let (Some(args), Some(kwargs)) = (args, kwargs) else {
        return Err(refuse(
            "PayloadError",
            "not {\"args\": [...], \"kwargs\": {...}}".into(),
        ));
    };
    if let Some(other) = kwargs.keys().find(|k| *k != "sku") {
        return Err(refuse(
            "TypeError",
            format!("add_item() got an unexpected keyword argument '{other}'"),
        ));
    }
    match (args.as_slice(), kwargs.get("sku")) {
        ([sku], None) | ([], Some(sku)) => Ok(sku.to_string()),
        ([], None) => Err(refuse(
            "TypeError",
            "add_item() missing 1 required positional argument: 'sku'".into(),
        )),
        _ => Err(refuse(
            "TypeError",
            "add_item() takes 2 positional arguments but more were given".into(),
        )),
    }
}

async fn serve_counter(
    mut inbound: Streaming<pb::DaemonMessage>,
    out: mpsc::UnboundedSender<pb::AppMessage>,
    events: Arc<watch::Sender<AppEvents>>,
) {
    use pb::daemon_message::Kind;
    let counts: Arc<Mutex<HashMap<ActorKey, i64>>> = Arc::default();
    let end = loop {
        let message = match inbound.message().await {
            Ok(Some(m)) => m,
            Ok(None) => break Ok(()),
            Err(status) => break Err(format!("{:?}: {}", status.code(), status.message())),
        };
        match message.kind {
            Some(Kind::Activate(a)) if lease_over(a.lease_deadline_unix_ms) => {
                events.send_modify(|e| e.lease_refusals.push(key_of(&a.actor)));
                let _ = out.send(pb::AppMessage {
                    kind: Some(pb::app_message::Kind::Activated(pb::ActivateResult {
                        call_id: a.call_id,
                        lease_expired: true,
                        ..Default::default()
                    })),
                });
            }
            Some(Kind::Activate(a)) => {
                let key = key_of(&a.actor);
                let count = a
                    .state
                    .get("count")
                    .and_then(|v| serde_json::from_slice::<i64>(v).ok())
                    .unwrap_or(0);
                if let Ok(mut counts) = counts.lock() {
                    counts.insert(key.clone(), count);
                }
                events.send_modify(|e| e.activations.push(key));
                let _ = out.send(pb::AppMessage {
                    kind: Some(pb::app_message::Kind::Activated(pb::ActivateResult {
                        call_id: a.call_id,
                        error: None,
                        changes: Vec::new(),
                        ..Default::default()
                    })),
                });
            }
            Some(Kind::Deactivate(d)) => {
                let key = key_of(&d.actor);
                if let Ok(mut counts) = counts.lock() {
                    counts.remove(&key);
                }
                let reason = Reason::try_from(d.reason).unwrap_or(Reason::Unspecified);
                events.send_modify(|e| e.deactivations.push((key, reason)));
                let _ = out.send(pb::AppMessage {
                    kind: Some(pb::app_message::Kind::Deactivated(pb::DeactivateResult {
                        call_id: d.call_id,
                        changes: Vec::new(),
                    })),
                });
            }
            Some(Kind::Turn(t)) if lease_over(t.lease_deadline_unix_ms) => {
                events.send_modify(|e| e.lease_refusals.push(key_of(&t.actor)));
                let _ = out.send(pb::AppMessage {
                    kind: Some(pb::app_message::Kind::TurnResult(pb::TurnResult {
                        call_id: t.call_id,
                        lease_expired: true,
                        ..Default::default()
                    })),
                });
            }
            Some(Kind::Turn(t)) => {
                events.send_modify(|e| {
                    e.turns_run
                        .push((key_of(&t.actor), crate::cluster_harness::unix_now_ms()))
                });
                tokio::spawn(counter_turn(t, counts.clone(), out.clone(), events.clone()));
            }
            // It did not set accepts_batches, accepts_parts nor accepts_cancel.
            Some(Kind::Cancel(_)) => {
                break Err("the daemon sent CancelTurn to an app that does not accept it".into())
            }
            Some(Kind::Batch(_)) => {
                break Err("the daemon sent a batch to an app that does not accept them".into())
            }
            Some(Kind::Part(_)) => {
                break Err("the daemon sent a piece to an app that does not accept them".into())
            }
            Some(Kind::Registered(_)) | None => {}
        }
    };
    events.send_modify(|e| e.stream_end = Some(end));
}

/// Whether a lease deadline (unix ms; 0: none) has passed.
fn lease_over(deadline_unix_ms: u64) -> bool {
    deadline_unix_ms != 0 && crate::cluster_harness::unix_now_ms() >= deadline_unix_ms
}

async fn counter_turn(
    turn: pb::Turn,
    counts: Arc<Mutex<HashMap<ActorKey, i64>>>,
    out: mpsc::UnboundedSender<pb::AppMessage>,
    events: Arc<watch::Sender<AppEvents>>,
) {
    let key = key_of(&turn.actor);
    events.send_modify(|e| {
        let n = e.in_flight.entry(key.clone()).or_default();
        *n += 1;
        let now = *n;
        let max = e.max_concurrent.entry(key.clone()).or_default();
        *max = (*max).max(now);
    });
    if turn.expired_keys.iter().any(|k| k == "count") {
        if let Ok(mut c) = counts.lock() {
            c.remove(&key);
        }
    }
    let read = || {
        counts
            .lock()
            .ok()
            .and_then(|c| c.get(&key).copied())
            .unwrap_or(0)
    };
    let current = read();
    // Give any overlapping turn of this actor the chance to interleave.
    for _ in 0..5 {
        tokio::task::yield_now().await;
    }
    let json = |v: i64| Some(pb::turn_result::Outcome::Reply(json_payload(v.to_string())));
    // What the turn publishes to the actor's watchers.
    let mut published = Vec::new();
    let (outcome, changes) = match turn.name.as_str() {
        "sleep" => {
            let ms = json_kwarg(&turn.payload, "ms").unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(u64::try_from(ms).unwrap_or(0))).await;
            (
                Some(pb::turn_result::Outcome::Reply(json_payload("null"))),
                Vec::new(),
            )
        }
        // `incr_for(by, ttl_ms)`: the count expires ttl_ms after the turn.
        // `incr_publish(by)` publishes the new count (a JSON number), then
        // `{"after": count}`.
        "incr" | "alarm" | "incr_for" | "incr_publish" => {
            let new = current + parse_by(&turn.payload);
            if let Ok(mut c) = counts.lock() {
                c.insert(key.clone(), new);
            }
            if turn.name == "incr_publish" {
                published.push(json_payload(new.to_string()));
                published.push(json_payload(format!(r#"{{"after":{new}}}"#)));
            }
            let change = pb::StateChange {
                ttl_ms: json_kwarg(&turn.payload, "ttl_ms").and_then(|t| u64::try_from(t).ok()),
                key: "count".into(),
                op: Some(pb::state_change::Op::Set(new.to_string().into())),
            };
            (json(new), vec![change])
        }
        "incr_pair" => {
            // Two keys per turn, always equal: a store that ever shows them
            // different has torn a turn apart.
            let new = current + parse_by(&turn.payload);
            if let Ok(mut c) = counts.lock() {
                c.insert(key.clone(), new);
            }
            let set = |k: &str| pb::StateChange {
                ttl_ms: None,
                key: k.into(),
                op: Some(pb::state_change::Op::Set(new.to_string().into())),
            };
            (json(new), vec![set("count"), set("copy")])
        }
        "get" => (json(current), Vec::new()),
        // More events than a turn may publish: the daemon fails the turn.
        "publish_many" => {
            published.extend((0..257).map(|n| json_payload(n.to_string())));
            (json(current), Vec::new())
        }
        // Publishes an event, then fails: nobody may see the event.
        "publish_fail" => {
            published.push(json_payload(r#""never seen""#));
            (
                Some(pb::turn_result::Outcome::Error(pb::ActorFailure {
                    r#type: "ValueError".into(),
                    message: "failed after publishing".into(),
                    ..Default::default()
                })),
                Vec::new(),
            )
        }
        "add_item" => match bind_sku(&turn.payload) {
            Ok(sku) => (
                Some(pb::turn_result::Outcome::Reply(json_payload(sku))),
                Vec::new(),
            ),
            Err(failure) => (Some(pb::turn_result::Outcome::Error(failure)), Vec::new()),
        },
        "echo" => {
            let reply = turn.payload.unwrap_or_default();
            (Some(pb::turn_result::Outcome::Reply(reply)), Vec::new())
        }
        "metadata" => {
            let metadata: std::collections::BTreeMap<&String, &String> =
                turn.metadata.iter().collect();
            (
                Some(pb::turn_result::Outcome::Reply(json_payload(
                    serde_json::json!(metadata).to_string(),
                ))),
                Vec::new(),
            )
        }
        "put_raw" => {
            let data = turn.payload.map(|p| p.data).unwrap_or_default();
            let change = pb::StateChange {
                ttl_ms: None,
                key: "raw".into(),
                op: Some(pb::state_change::Op::Set(data.clone())),
            };
            let reply = pb::Payload {
                data,
                content_type: pb::ContentType::Bytes as i32,
            };
            (Some(pb::turn_result::Outcome::Reply(reply)), vec![change])
        }
        "fail" => (
            Some(pb::turn_result::Outcome::Error(pb::ActorFailure {
                r#type: "ValueError".into(),
                message: "boom".into(),
                details: FAIL_TRACE.into(),
                ..Default::default()
            })),
            Vec::new(),
        ),
        // A TypeError the method raised, said so (as the SDKs do) or not
        // (as SDKs from before FailureKind).
        "fail_type" | "fail_type_unsaid" => (
            Some(pb::turn_result::Outcome::Error(pb::ActorFailure {
                r#type: "TypeError".into(),
                message: "unsupported operand".into(),
                details: String::new(),
                kind: if turn.name == "fail_type" {
                    pb::FailureKind::Raised.into()
                } else {
                    pb::FailureKind::Unspecified.into()
                },
            })),
            Vec::new(),
        ),
        other => (
            Some(pb::turn_result::Outcome::Error(pb::ActorFailure {
                r#type: "AttributeError".into(),
                message: format!("counter has no method {other:?}"),
                details: String::new(),
                kind: pb::FailureKind::NoSuchMethod.into(),
            })),
            Vec::new(),
        ),
    };
    // Leave the turn before answering: the daemon may send the next turn of
    // this actor as soon as it has the answer.
    events.send_modify(|e| {
        if let Some(n) = e.in_flight.get_mut(&key) {
            *n -= 1;
        }
        e.turns += 1;
    });
    let _ = out.send(pb::AppMessage {
        kind: Some(pb::app_message::Kind::TurnResult(pb::TurnResult {
            call_id: turn.call_id,
            outcome,
            changes,
            events: published,
            ..Default::default()
        })),
    });
}
