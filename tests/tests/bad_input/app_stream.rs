//! The app stream (AppHost.Attach): the messages a misbehaving app sends,
//! the scripts a stream case follows, and how one case is run.

use bytes::Bytes;
use prost::Message as _;
use tokio::task::JoinHandle;
use tonic::Status;
use troupe_tests::*;

use crate::expect::{mismatch, Expect};

pub fn enc(message: pb::AppMessage) -> Bytes {
    message.encode_to_vec().into()
}

pub fn msg(kind: pb::app_message::Kind) -> pb::AppMessage {
    pb::AppMessage { kind: Some(kind) }
}

pub fn set(key: &str, value: impl Into<Bytes>) -> pb::StateChange {
    pb::StateChange {
        ttl_ms: None,
        key: key.into(),
        op: Some(pb::state_change::Op::Set(value.into())),
    }
}

pub fn turn_result(call_id: u64, reply: impl Into<Bytes>, changes: Vec<pb::StateChange>) -> Bytes {
    enc(msg(pb::app_message::Kind::TurnResult(pb::TurnResult {
        call_id,
        outcome: Some(pb::turn_result::Outcome::Reply(json_payload(reply))),
        changes,
        ..Default::default()
    })))
}

/// A Register for `ty`, changed by `f`.
pub fn register(ty: &str, f: impl FnOnce(&mut pb::Register)) -> Bytes {
    let mut message = register_message("bad-input", vec![type_spec(ty)]);
    if let Some(pb::app_message::Kind::Register(r)) = message.kind.as_mut() {
        f(r);
    }
    enc(message)
}

pub fn first_type(r: &mut pb::Register) -> &mut pb::ActorTypeSpec {
    if r.types.is_empty() {
        r.types.push(pb::ActorTypeSpec::default());
    }
    &mut r.types[0]
}

pub fn deactivated(call_id: u64) -> pb::AppMessage {
    msg(pb::app_message::Kind::Deactivated(pb::DeactivateResult {
        call_id,
        changes: vec![],
    }))
}

/// A TurnResult with any outcome, for answers that break the rules.
pub fn answer(
    call_id: u64,
    outcome: Option<pb::turn_result::Outcome>,
    lease_expired: bool,
) -> Bytes {
    enc(msg(pb::app_message::Kind::TurnResult(pb::TurnResult {
        call_id,
        outcome,
        changes: vec![set("k", "v2")],
        lease_expired,
        events: Vec::new(),
    })))
}

/// The app's answers to the turn with this call id.
pub type Answers = fn(u64) -> Vec<Bytes>;

/// What a stream case does after opening the stream (for type `ty`).
pub enum Script {
    /// The first message, which the daemon answers (Attach's own status).
    Open(Box<dyn Fn(&str) -> Bytes>, Expect),
    /// Registers, then sends these; the stream must end so.
    AfterRegister(Vec<Bytes>, Expect),
    /// Registers; a call stores k = "v1" through the app; a second call's
    /// turn is answered with these. Its caller gets the first expectation,
    /// the stream the second (`Ok`: it stays open and serves a next turn);
    /// k reads back "v1" either way.
    Turn(Answers, Expect, Expect),
}

pub struct StreamCase {
    pub what: String,
    pub script: Script,
}

pub fn opened(
    what: impl Into<String>,
    first: impl Fn(&str) -> Bytes + 'static,
    expect: Expect,
) -> StreamCase {
    scripted(what, Script::Open(Box::new(first), expect))
}

pub fn scripted(what: impl Into<String>, script: Script) -> StreamCase {
    StreamCase {
        what: what.into(),
        script,
    }
}

/// Invokes `ty/r1.method` in a task (the raw app answers it meanwhile).
fn spawn_call(client: &Client, ty: &str, method: &str) -> JoinHandle<Result<Bytes, Status>> {
    let mut client = client.clone();
    let (ty, method) = (ty.to_owned(), method.to_owned());
    tokio::spawn(async move { client.invoke_raw(&ty, "r1", &method, "{}").await })
}

async fn call_result(
    call: JoinHandle<Result<Bytes, Status>>,
) -> anyhow::Result<Result<Bytes, Status>> {
    Ok(within(WAIT, "a call to the raw app", call).await??)
}

/// Runs one stream case on type `ty`; what went wrong, if anything.
pub async fn run_stream_case(
    daemon: &Daemon,
    client: &mut Client,
    ty: &str,
    script: &Script,
) -> anyhow::Result<Vec<String>> {
    let mut wrong = Vec::new();
    match script {
        Script::Open(first, expect) => {
            let opened = RawApp::open(daemon.addr, first(ty)).await;
            let opened = match opened {
                Ok(mut raw) => match raw.recv().await?.and_then(|m| m.kind) {
                    Some(pb::daemon_message::Kind::Registered(r)) => Ok(r),
                    other => anyhow::bail!("expected Registered, got {other:?}"),
                },
                Err(status) => Err(status),
            };
            wrong.extend(mismatch(*expect, &opened));
        }
        Script::AfterRegister(messages, expect) => {
            let (mut raw, _) = RawApp::register(daemon.addr, vec![type_spec(ty)]).await?;
            for bytes in messages {
                raw.send_bytes(bytes.clone())?;
            }
            let end = raw.ended().await?.map_or(Ok(()), Err);
            wrong.extend(mismatch(*expect, &end).map(|m| format!("stream end: {m}")));
        }
        Script::Turn(answer, on_call, on_stream) => {
            let (mut raw, _) = RawApp::register(daemon.addr, vec![type_spec(ty)]).await?;
            let call = spawn_call(client, ty, "set");
            let turn = raw.next_turn().await?;
            raw.send_bytes(turn_result(turn.call_id, "1", vec![set("k", "v1")]))?;
            call_result(call).await?.map_err(anyhow::Error::new)?;

            let call = spawn_call(client, ty, "set");
            let turn = raw.next_turn().await?;
            for bytes in answer(turn.call_id) {
                raw.send_bytes(bytes)?;
            }
            let got = call_result(call).await?;
            wrong.extend(mismatch(*on_call, &got).map(|m| format!("the call: {m}")));
            match on_stream {
                // The stream goes on: the next turn is served.
                Expect::Ok => {
                    let call = spawn_call(client, ty, "get");
                    let turn = raw.next_turn().await?;
                    raw.reply(turn.call_id, "\"next\"")?;
                    let got = call_result(call).await?;
                    wrong.extend(mismatch(Expect::Ok, &got).map(|m| format!("next call: {m}")));
                }
                expect => {
                    let end = raw.ended().await?.map_or(Ok(()), Err);
                    wrong.extend(mismatch(*expect, &end).map(|m| format!("stream end: {m}")));
                }
            }
            drop(raw);
            // The turn's changes went all or nothing: k is still "v1".
            let (state, _) = client.state(ty, "r1").await?;
            let k = state
                .get("k")
                .map(|v| String::from_utf8_lossy(v).into_owned());
            if k.as_deref() != Some("v1") {
                wrong.push(format!("k reads back {k:?}, not \"v1\" (state {state:?})"));
            }
            if state.contains_key("big") || state.contains_key("") {
                wrong.push(format!("a refused change was stored: {state:?}"));
            }
        }
    }
    Ok(wrong)
}
