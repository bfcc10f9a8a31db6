//! Between the wire types of `troupe.v1` and the runtime's own, in both
//! directions: what the daemon's services read and answer, and what its
//! forwarder sends to and reads from another daemon.
//!
//! - this module: actors, payloads, chains, state changes, type options.
//! - [`requests`]: every per-actor request and its answer.
//! - [`events`]: watch polls and the events they bring back.
//! - [`errors`]: errors as gRPC statuses and back; [`error_details`]: an
//!   actor exception's stack trace in their trailers.
//! - [`time`]: durations and instants as the API spells them.
//! - [`paging`]: page sizes and tokens.

pub mod error_details;
pub mod errors;
pub mod events;
pub mod paging;
pub mod reminders;
pub mod requests;
pub mod time;

use std::time::Duration;

use tonic::Status;
use troupe_proto::v1 as pb;
use troupe_runtime::{
    ActorFailure, ActorId, CallChain, CallExtra, ChainToken, ContentType, FailureKind, Payload,
    StateChange, StateMode, TypeOptions, TypeSpec,
};

pub fn actor_id(actor: Option<pb::ActorRef>) -> Result<ActorId, Status> {
    let actor = actor.ok_or_else(|| {
        Status::invalid_argument("request has no actor; set actor.type and actor.id")
    })?;
    Ok(ActorId::new(actor.r#type, actor.id))
}

pub fn actor_ref(id: &ActorId) -> pb::ActorRef {
    pb::ActorRef {
        r#type: id.ty.to_string(),
        id: id.id.to_string(),
    }
}

pub fn payload(p: Option<pb::Payload>) -> Payload {
    match p {
        None => Payload::default(),
        Some(p) => Payload {
            data: p.data,
            content_type: match pb::ContentType::try_from(p.content_type) {
                Ok(pb::ContentType::Bytes) => ContentType::Bytes,
                _ => ContentType::Json,
            },
        },
    }
}

pub fn payload_to_pb(p: Payload) -> pb::Payload {
    pb::Payload {
        data: p.data,
        content_type: match p.content_type {
            ContentType::Json => pb::ContentType::Json,
            ContentType::Bytes => pb::ContentType::Bytes,
        } as i32,
    }
}

/// A call's extra from its request's fields; `key_retention_ms` 0: the
/// whole retention.
pub fn extra(
    metadata: std::collections::HashMap<String, String>,
    chain: Option<pb::CallChain>,
    idempotency_key: String,
    new_key: bool,
    key_retention_ms: u64,
) -> Option<Box<CallExtra>> {
    if metadata.is_empty() && chain.is_none() && idempotency_key.is_empty() {
        return None;
    }
    let mut metadata: Vec<_> = metadata.into_iter().collect();
    metadata.sort();
    Some(Box::new(CallExtra {
        metadata,
        chain: chain.map(|c| CallChain {
            id: c.id,
            actors: c
                .actors
                .into_iter()
                .map(|a| ActorId::new(a.r#type, a.id))
                .collect(),
            token: ChainToken::new(c.token),
        }),
        // Say something only of a key.
        new_key: new_key && !idempotency_key.is_empty(),
        key_retention: millis(key_retention_ms).filter(|_| !idempotency_key.is_empty()),
        idempotency_key: (!idempotency_key.is_empty()).then(|| idempotency_key.into()),
        ..CallExtra::default()
    }))
}

/// What a Turn carries from its call's extra: metadata, the chain the
/// call came with (the turn's chain is issued from it), the caller's
/// deadline.
pub fn turn_extra(
    extra: Option<Box<CallExtra>>,
) -> (
    std::collections::HashMap<String, String>,
    Option<CallChain>,
    u64,
) {
    match extra {
        None => (Default::default(), None, 0),
        Some(e) => (
            e.metadata.into_iter().collect(),
            e.chain,
            e.deadline_unix_ms.unwrap_or(0),
        ),
    }
}

pub fn chain_to_pb(chain: &CallChain) -> pb::CallChain {
    pb::CallChain {
        id: chain.id.clone(),
        actors: chain.actors.iter().map(actor_ref).collect(),
        token: chain.token.as_bytes().clone(),
    }
}

pub fn state_changes(changes: Vec<pb::StateChange>) -> Result<Vec<StateChange>, Status> {
    changes
        .into_iter()
        .map(|c| match c.op {
            Some(pb::state_change::Op::Set(v)) => Ok(StateChange {
                ttl_ms: c.ttl_ms,
                ..StateChange::set(c.key, v)
            }),
            Some(pb::state_change::Op::Delete(_)) => Ok(StateChange::delete(c.key)),
            None => Err(Status::invalid_argument(format!(
                "state change for key {} has neither `set` nor `delete`",
                troupe_runtime::validate::abridged(&c.key, 80)
            ))),
        })
        .collect()
}

pub fn failure(f: pb::ActorFailure) -> ActorFailure {
    let kind = match f.kind() {
        pb::FailureKind::Unspecified => FailureKind::Unspecified,
        pb::FailureKind::Raised => FailureKind::Raised,
        pb::FailureKind::NoSuchMethod => FailureKind::NoSuchMethod,
        pb::FailureKind::BadArguments => FailureKind::BadArguments,
    };
    ActorFailure {
        ty: if f.r#type.is_empty() {
            "ActorError".into()
        } else {
            f.r#type
        },
        kind,
        message: f.message,
        details: f.details,
    }
}

fn millis(ms: u64) -> Option<Duration> {
    (ms > 0).then(|| Duration::from_millis(ms))
}

pub fn type_spec(t: pb::ActorTypeSpec) -> TypeSpec {
    TypeSpec {
        name: t.name,
        idle_timeout: millis(t.idle_timeout_ms),
        max_mailbox: (t.max_mailbox > 0).then_some(t.max_mailbox as usize),
        reentrant: t.reentrant,
        state_mode: match pb::StateMode::try_from(t.state_mode) {
            Ok(pb::StateMode::WriteBehind) => Some(StateMode::WriteBehind),
            Ok(pb::StateMode::Durable) => Some(StateMode::Durable),
            _ => None,
        },
        readonly_methods: t.readonly_methods,
        turn_timeout: millis(t.turn_timeout_ms),
        max_pending_calls: (t.max_pending_calls > 0).then_some(t.max_pending_calls as usize),
        durable_tells: t.durable_tells,
        retention: millis(t.retention_ms),
    }
}

pub fn type_options_to_pb(o: &TypeOptions) -> pb::ActorTypeSpec {
    pb::ActorTypeSpec {
        name: o.name.to_string(),
        idle_timeout_ms: troupe_runtime::input::millis(o.idle_timeout),
        max_mailbox: u32::try_from(o.max_mailbox).unwrap_or(u32::MAX),
        reentrant: o.reentrant,
        state_mode: match o.state_mode {
            StateMode::WriteBehind => pb::StateMode::WriteBehind,
            StateMode::Durable => pb::StateMode::Durable,
        } as i32,
        readonly_methods: o.readonly_methods.clone(),
        turn_timeout_ms: troupe_runtime::input::millis(o.turn_timeout),
        max_pending_calls: u32::try_from(o.max_pending_calls).unwrap_or(u32::MAX),
        durable_tells: o.durable_tells,
        retention_ms: o.retention.map_or(0, troupe_runtime::input::millis),
    }
}
