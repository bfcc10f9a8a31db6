//! The `ActorClient` and `Admin` RPCs as the daemon handles them: each
//! operation's body is decoded with prost into the RPC's request message,
//! exactly as tonic would, and handed with the headers so far to the
//! daemon's own service implementation (`client_api`, `admin_api`) over a
//! real runtime. A `Headers` operation sets the headers callers control
//! (`grpc-timeout`, `traceparent`, `tracestate`, `troupe-forwarded`,
//! `authorization`) for the requests after it; the daemon's token check
//! (`auth::Guard`) reads them then, its verdict ignored so that requests
//! without the token still reach the handlers.
//!
//! Besides "no panic, no hang", one property is checked: a page token the
//! daemon returned is accepted when sent back.

use prost::Message;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Extensions, Request, Status};
use troupe_proto::v1 as pb;
use troupe_proto::v1::actor_client_server::ActorClient;
use troupe_proto::v1::admin_server::Admin;

use tonic::service::Interceptor;

use crate::admin_api::AdminApi;
use crate::auth::{Credential, Guard, TokenSource, Tokens};
use crate::client_api::ClientApi;
use crate::daemon::{self, block_on, bounded};
use crate::input::{Ops, OpsWriter};

/// What one operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rpc {
    Invoke,
    Tell,
    GetState,
    SetReminder,
    GetReminder,
    DeleteReminder,
    ListReminders,
    SetAlarm,
    GetAlarm,
    DeleteAlarm,
    SetTimer,
    DeleteTimer,
    Status,
    ListActors,
    DescribeActor,
    ListStoredActors,
    DeactivateActor,
    PurgeActor,
    Headers,
}

/// The `client_api` target's operations: every `ActorClient` RPC.
pub const CLIENT: &[Rpc] = &[
    Rpc::Invoke,
    Rpc::Tell,
    Rpc::GetState,
    Rpc::SetReminder,
    Rpc::GetReminder,
    Rpc::DeleteReminder,
    Rpc::ListReminders,
    Rpc::SetAlarm,
    Rpc::GetAlarm,
    Rpc::DeleteAlarm,
    Rpc::SetTimer,
    Rpc::DeleteTimer,
    Rpc::Headers,
];

/// The `admin_api` target's: every `Admin` RPC, and the client RPCs that
/// give them something to list (actors, stored state, reminders, timers).
pub const ADMIN: &[Rpc] = &[
    Rpc::Status,
    Rpc::ListActors,
    Rpc::DescribeActor,
    Rpc::ListStoredActors,
    Rpc::DeactivateActor,
    Rpc::PurgeActor,
    Rpc::Invoke,
    Rpc::SetReminder,
    Rpc::SetTimer,
    Rpc::Headers,
];

/// At most this many requests per input, so one input stays cheap.
const MAX_OPS: usize = 64;

/// Runs one input against a fresh daemon.
pub fn run(table: &[Rpc], data: &[u8]) {
    block_on(async {
        let runtime = daemon::start(true);
        let services = Services {
            client: ClientApi::new(runtime.clone()),
            admin: AdminApi::new(runtime.clone(), "127.0.0.1:7420".into(), None, None),
        };
        let mut headers = MetadataMap::new();
        let mut guard = guard();
        for (op, body) in Ops::new(data).take(MAX_OPS) {
            let rpc = table[usize::from(op) % table.len()];
            if rpc == Rpc::Headers {
                headers = read_headers(body);
                let _ = guard.call(request(&headers, ()));
                continue;
            }
            bounded(rpc, services.call(rpc, &headers, body)).await;
        }
        daemon::stop(runtime).await;
    });
}

/// The interceptor of a daemon that requires the API token `fuzz-token`.
fn guard() -> Guard {
    let tokens = Tokens::load(TokenSource {
        credential: Credential::Api,
        inline: vec!["fuzz-token".into()],
        file: None,
        refuse_short: false,
    });
    match tokens {
        Ok(tokens) => Guard::new(Some(tokens)),
        Err(e) => panic!("inline tokens were refused: {e}"),
    }
}

struct Services {
    client: ClientApi,
    admin: AdminApi,
}

fn request<T>(headers: &MetadataMap, message: T) -> Request<T> {
    Request::from_parts(headers.clone(), Extensions::default(), message)
}

/// Panics unless the daemon took back the page token it gave out.
fn check_token_taken<T: std::fmt::Debug>(what: Rpc, token: &str, answer: &Result<T, Status>) {
    if let Err(status) = answer {
        if status.code() == Code::InvalidArgument && status.message().contains("page_token") {
            panic!("{what:?} refused its own page token {token:?}: {status:?}");
        }
    }
}

impl Services {
    async fn call(&self, rpc: Rpc, headers: &MetadataMap, body: &[u8]) {
        // A body that does not decode never reaches a handler: tonic
        // answers it. That path is prost's, fuzzed with every other one.
        macro_rules! handle {
            ($service:ident . $method:ident ( $message:ty )) => {{
                let Ok(message) = <$message>::decode(body) else {
                    return;
                };
                let _ = self.$service.$method(request(headers, message)).await;
            }};
        }
        // A listing, then the next page with the token it returned.
        macro_rules! list {
            ($service:ident . $method:ident ( $message:ty )) => {{
                let Ok(mut message) = <$message>::decode(body) else {
                    return;
                };
                let answer = self
                    .$service
                    .$method(request(headers, message.clone()))
                    .await;
                let token = answer.ok().map(|page| page.into_inner().next_page_token);
                if let Some(token) = token.filter(|t| !t.is_empty()) {
                    message.page_token = token.clone();
                    let next = self.$service.$method(request(headers, message)).await;
                    check_token_taken(rpc, &token, &next);
                }
            }};
        }
        match rpc {
            Rpc::Invoke => handle!(client.invoke(pb::InvokeRequest)),
            Rpc::Tell => handle!(client.tell(pb::TellRequest)),
            Rpc::GetState => handle!(client.get_state(pb::GetStateRequest)),
            Rpc::SetReminder => handle!(client.set_reminder(pb::SetReminderRequest)),
            Rpc::GetReminder => handle!(client.get_reminder(pb::ReminderRef)),
            Rpc::DeleteReminder => handle!(client.delete_reminder(pb::ReminderRef)),
            Rpc::SetAlarm => handle!(client.set_alarm(pb::SetAlarmRequest)),
            Rpc::GetAlarm => handle!(client.get_alarm(pb::AlarmRef)),
            Rpc::DeleteAlarm => handle!(client.delete_alarm(pb::AlarmRef)),
            Rpc::SetTimer => handle!(client.set_timer(pb::SetTimerRequest)),
            Rpc::DeleteTimer => handle!(client.delete_timer(pb::TimerRef)),
            Rpc::Status => handle!(admin.status(pb::StatusRequest)),
            Rpc::DescribeActor => handle!(admin.describe_actor(pb::DescribeActorRequest)),
            Rpc::DeactivateActor => handle!(admin.deactivate_actor(pb::DeactivateActorRequest)),
            Rpc::PurgeActor => handle!(admin.purge_actor(pb::PurgeActorRequest)),
            Rpc::ListReminders => list!(client.list_reminders(pb::ListRemindersRequest)),
            Rpc::ListActors => list!(admin.list_actors(pb::ListActorsRequest)),
            Rpc::ListStoredActors => list!(admin.list_stored_actors(pb::ListStoredActorsRequest)),
            Rpc::Headers => {}
        }
    }
}

/// The headers a caller sets, one per line of `body` in this order:
/// `grpc-timeout`, `traceparent`, `tracestate`, `troupe-forwarded`,
/// `authorization`. Lines
/// that are not header values (tonic would never deliver them) are skipped.
fn read_headers(body: &[u8]) -> MetadataMap {
    let mut headers = MetadataMap::new();
    let text = String::from_utf8_lossy(body);
    let names = [
        "grpc-timeout",
        troupe_transport::TRACEPARENT_HEADER,
        troupe_transport::TRACESTATE_HEADER,
        troupe_transport::FORWARDED_HEADER,
        crate::auth::AUTHORIZATION,
    ];
    for (name, line) in names.into_iter().zip(text.split('\n')) {
        if line.is_empty() {
            continue;
        }
        if let Ok(value) = MetadataValue::try_from(line) {
            headers.insert(name, value);
        }
    }
    headers
}

fn actor(ty: &str, id: &str) -> Option<pb::ActorRef> {
    Some(pb::ActorRef {
        r#type: ty.into(),
        id: id.into(),
    })
}

fn json(text: &str) -> Option<pb::Payload> {
    Some(pb::Payload {
        data: text.as_bytes().to_vec().into(),
        content_type: pb::ContentType::Json as i32,
    })
}

fn op(table: &[Rpc], rpc: Rpc) -> u8 {
    let index = table.iter().position(|r| *r == rpc).unwrap_or_default();
    u8::try_from(index).unwrap_or_default()
}

fn invoke(ty: &str, id: &str, method: &str, payload: &str) -> Vec<u8> {
    pb::InvokeRequest {
        actor: actor(ty, id),
        method: method.into(),
        payload: json(payload),
        ..Default::default()
    }
    .encode_to_vec()
}

fn set_reminder(id: &str, name: &str, due: &str, period: &str) -> Vec<u8> {
    pb::SetReminderRequest {
        actor: actor("counter", id),
        name: name.into(),
        due: due.into(),
        period: period.into(),
        payload: json("{}"),
        retry: Some(pb::RetryPolicy {
            max_attempts: 3,
            initial_backoff_ms: 10,
            max_backoff_ms: 100,
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

fn set_timer(id: &str, due: &str, period: &str) -> Vec<u8> {
    pb::SetTimerRequest {
        actor: actor("counter", id),
        name: "t".into(),
        due: due.into(),
        period: period.into(),
        payload: json("1"),
        keep_alive: true,
    }
    .encode_to_vec()
}

const HEADERS: &str =
    "100m\n00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\nvendor=x\n1\nBearer fuzz-token";

/// Seeds for `client_api`: every RPC with a valid request.
pub fn client_seeds() -> Vec<Vec<u8>> {
    let t = CLIENT;
    let o = |rpc| op(t, rpc);
    let reminder_ref = pb::ReminderRef {
        actor: actor("counter", "c1"),
        name: "tick".into(),
    }
    .encode_to_vec();
    let alarm_ref = pb::AlarmRef {
        actor: actor("ledger", "l1"),
    }
    .encode_to_vec();
    let chained = pb::InvokeRequest {
        actor: actor("nest", "n1"),
        method: "echo".into(),
        payload: json("[1,2]"),
        metadata: [("k".to_owned(), "v".to_owned())].into_iter().collect(),
        chain: Some(pb::CallChain {
            id: "chain-1".into(),
            actors: vec![pb::ActorRef {
                r#type: "counter".into(),
                id: "c1".into(),
            }],
            // Forged: the daemon issued no token for it.
            ..Default::default()
        }),
        idempotency_key: "key-1".into(),
        new_key: true,
        key_retention_ms: 70_000,
    }
    .encode_to_vec();
    vec![
        OpsWriter::new()
            .op(o(Rpc::Invoke), &invoke("counter", "c1", "set", "{\"n\":1}"))
            .op(
                o(Rpc::GetState),
                &pb::GetStateRequest {
                    actor: actor("counter", "c1"),
                    keys: vec!["v".into()],
                }
                .encode_to_vec(),
            )
            .op(o(Rpc::Invoke), &invoke("ledger", "l1", "get", "null"))
            .op(
                o(Rpc::Tell),
                &pb::TellRequest {
                    actor: actor("counter", "c2"),
                    method: "put".into(),
                    payload: json("\"k\""),
                    ..Default::default()
                }
                .encode_to_vec(),
            )
            .finish(),
        OpsWriter::new()
            .op(
                o(Rpc::SetReminder),
                &set_reminder("c1", "tick", "10ms", "R3/PT1S"),
            )
            .op(
                o(Rpc::SetReminder),
                &set_reminder("c2", "tock", "2030-01-01T00:00:00Z", "1h30m"),
            )
            .op(o(Rpc::GetReminder), &reminder_ref)
            .op(
                o(Rpc::ListReminders),
                &pb::ListRemindersRequest {
                    r#type: "counter".into(),
                    page_size: 1,
                    ..Default::default()
                }
                .encode_to_vec(),
            )
            .op(o(Rpc::DeleteReminder), &reminder_ref)
            .finish(),
        OpsWriter::new()
            .op(
                o(Rpc::SetAlarm),
                &pb::SetAlarmRequest {
                    actor: actor("ledger", "l1"),
                    at: "2026-12-01T10:00:00+01:00".into(),
                    payload: json("{}"),
                    retry: None,
                }
                .encode_to_vec(),
            )
            .op(o(Rpc::GetAlarm), &alarm_ref)
            .op(o(Rpc::DeleteAlarm), &alarm_ref)
            .finish(),
        OpsWriter::new()
            // Timers live in an activation: the call makes one first.
            .op(o(Rpc::Invoke), &invoke("counter", "c1", "get", "null"))
            .op(o(Rpc::SetTimer), &set_timer("c1", "1ms", "5ms"))
            .op(o(Rpc::Invoke), &invoke("counter", "c1", "get", "null"))
            .op(
                o(Rpc::DeleteTimer),
                &pb::TimerRef {
                    actor: actor("counter", "c1"),
                    name: "t".into(),
                }
                .encode_to_vec(),
            )
            .finish(),
        OpsWriter::new()
            .op(o(Rpc::Headers), HEADERS.as_bytes())
            .op(o(Rpc::Invoke), &chained)
            .op(o(Rpc::Invoke), &invoke("counter", "c3", "boom", "\"no\""))
            .finish(),
    ]
}

/// Seeds for `admin_api`: actors to list, then every Admin RPC.
pub fn admin_seeds() -> Vec<Vec<u8>> {
    let t = ADMIN;
    let o = |rpc| op(t, rpc);
    vec![
        OpsWriter::new()
            .op(o(Rpc::Invoke), &invoke("counter", "a", "set", "1"))
            .op(o(Rpc::Invoke), &invoke("counter", "b", "set", "2"))
            .op(o(Rpc::Invoke), &invoke("ledger", "x", "set", "3"))
            .op(o(Rpc::Invoke), &invoke("ledger", "y", "set", "4"))
            .op(
                o(Rpc::ListActors),
                &pb::ListActorsRequest {
                    page_size: 1,
                    ..Default::default()
                }
                .encode_to_vec(),
            )
            .op(
                o(Rpc::ListActors),
                &pb::ListActorsRequest {
                    r#type: "counter".into(),
                    ..Default::default()
                }
                .encode_to_vec(),
            )
            .op(
                o(Rpc::ListStoredActors),
                &pb::ListStoredActorsRequest {
                    r#type: "ledger".into(),
                    page_size: 1,
                    ..Default::default()
                }
                .encode_to_vec(),
            )
            .op(o(Rpc::Status), &[])
            .finish(),
        OpsWriter::new()
            .op(o(Rpc::Invoke), &invoke("counter", "a", "set", "1"))
            .op(o(Rpc::SetReminder), &set_reminder("a", "r", "1h", ""))
            .op(o(Rpc::SetTimer), &set_timer("a", "1s", ""))
            .op(
                o(Rpc::DescribeActor),
                &pb::DescribeActorRequest {
                    actor: actor("counter", "a"),
                }
                .encode_to_vec(),
            )
            .op(
                o(Rpc::DeactivateActor),
                &pb::DeactivateActorRequest {
                    actor: actor("counter", "a"),
                }
                .encode_to_vec(),
            )
            .op(
                o(Rpc::DescribeActor),
                &pb::DescribeActorRequest {
                    actor: actor("counter", "a"),
                }
                .encode_to_vec(),
            )
            .finish(),
    ]
}
