//! Between the wire types of `troupe.v1` and the runtime's own.

use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::Status;
use troupe_proto::v1 as pb;
use troupe_runtime::{
    ActorFailure, ActorId, CallChain, CallError, CallExtra, ContentType, Payload, StateChange,
    StateMode, TypeOptions, TypeSpec,
};

/// Trailer that marks an UNKNOWN status as an exception raised by actor code.
pub const ERROR_TYPE_TRAILER: &str = "troupe-error-type";

pub fn status_of(error: CallError) -> Status {
    match error {
        e @ CallError::UnknownType { .. } => Status::not_found(e.to_string()),
        CallError::InvalidArgument(m) => Status::invalid_argument(m),
        CallError::Overloaded(m) => Status::resource_exhausted(m),
        e @ CallError::Unavailable(_) => Status::unavailable(e.to_string()),
        CallError::DeadlineExceeded(m) => Status::deadline_exceeded(m),
        CallError::FailedPrecondition(m) => Status::failed_precondition(m),
        CallError::NotFound(m) => Status::not_found(m),
        CallError::Internal(m) => Status::internal(m),
        CallError::Actor(failure) => {
            let mut status = Status::unknown(failure.message);
            let ty = MetadataValue::try_from(failure.ty.as_str())
                .unwrap_or_else(|_| MetadataValue::from_static("ActorError"));
            status.metadata_mut().insert(ERROR_TYPE_TRAILER, ty);
            status
        }
    }
}

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

pub fn extra(
    metadata: std::collections::HashMap<String, String>,
    chain: Option<pb::CallChain>,
) -> Option<Box<CallExtra>> {
    if metadata.is_empty() && chain.is_none() {
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
        }),
        ..CallExtra::default()
    }))
}

/// What a Turn carries from its call's extra: metadata, the chain calls
/// from the turn must pass on (this actor appended), the caller's deadline.
pub fn turn_extra(
    extra: Option<Box<CallExtra>>,
    actor: &ActorId,
) -> (
    std::collections::HashMap<String, String>,
    pb::CallChain,
    u64,
) {
    let (metadata, chain, deadline) = match extra {
        None => (Vec::new(), None, None),
        Some(e) => (e.metadata, e.chain, e.deadline_unix_ms),
    };
    let chain = CallChain::for_calls_from(chain.as_ref(), actor);
    (
        metadata.into_iter().collect(),
        pb::CallChain {
            id: chain.id,
            actors: chain.actors.iter().map(actor_ref).collect(),
        },
        deadline.unwrap_or(0),
    )
}

pub fn state_changes(changes: Vec<pb::StateChange>) -> Result<Vec<StateChange>, Status> {
    changes
        .into_iter()
        .map(|c| match c.op {
            Some(pb::state_change::Op::Set(v)) => Ok(StateChange::set(c.key, v)),
            Some(pb::state_change::Op::Delete(_)) => Ok(StateChange::delete(c.key)),
            None => Err(Status::invalid_argument(format!(
                "state change for key {:?} has neither `set` nor `delete`",
                c.key
            ))),
        })
        .collect()
}

pub fn failure(f: pb::ActorFailure) -> ActorFailure {
    ActorFailure {
        ty: if f.r#type.is_empty() {
            "ActorError".into()
        } else {
            f.r#type
        },
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
    }
}

pub fn type_options_to_pb(o: &TypeOptions) -> pb::ActorTypeSpec {
    pb::ActorTypeSpec {
        name: o.name.to_string(),
        idle_timeout_ms: o.idle_timeout.as_millis() as u64,
        max_mailbox: u32::try_from(o.max_mailbox).unwrap_or(u32::MAX),
        reentrant: o.reentrant,
        state_mode: match o.state_mode {
            StateMode::WriteBehind => pb::StateMode::WriteBehind,
            StateMode::Durable => pb::StateMode::Durable,
        } as i32,
        readonly_methods: o.readonly_methods.clone(),
        turn_timeout_ms: 0,
    }
}

/// How long the daemon has to answer a call whose caller set a deadline:
/// a little less than the `grpc-timeout` header says. tonic's server cuts
/// the request off at exactly that time and answers CANCELLED ("Timeout
/// expired"); answering first gives the caller DEADLINE_EXCEEDED with a
/// message naming the actor, which is what ran out.
pub fn answer_within(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    let timeout = grpc_timeout(metadata)?;
    // Enough to be ahead of tonic's timer (started when the request arrived,
    // before the call reached us); small, because every hop of a call chain
    // takes it off again.
    let margin = (timeout / 100).clamp(Duration::from_millis(1), Duration::from_millis(10));
    Some(timeout.saturating_sub(margin))
}

/// The caller's deadline from the `grpc-timeout` header ("100m", "5S", ...).
pub fn grpc_timeout(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    let value = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

// === paging ===

const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 1000;

/// A request's page size: 0 takes the default, larger asks are capped.
pub fn page_size(asked: u32) -> usize {
    match asked as usize {
        0 => DEFAULT_PAGE,
        n => n.min(MAX_PAGE),
    }
}

/// A page token from the parts of the last item's key. Names cannot hold
/// control characters, so a newline separates the parts unambiguously.
pub fn page_token(parts: &[&str]) -> String {
    parts.join("\n")
}

/// The `N` parts of a page token this daemon returned; `None` for no token.
pub fn parse_page_token<const N: usize>(token: &str) -> Result<Option<[&str; N]>, Status> {
    if token.is_empty() {
        return Ok(None);
    }
    let parts: Vec<&str> = token.splitn(N, '\n').collect();
    <[&str; N]>::try_from(parts).map(Some).map_err(|_| {
        Status::invalid_argument("page_token is not one this daemon returned; start without one")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_tokens_round_trip_and_refuse_strangers() -> Result<(), Status> {
        let token = page_token(&["counter", "c/1", "tick"]);
        assert_eq!(
            parse_page_token::<3>(&token)?,
            Some(["counter", "c/1", "tick"])
        );
        assert_eq!(parse_page_token::<2>("")?, None);
        assert!(parse_page_token::<3>("counter\nc1").is_err());
        assert_eq!(
            (page_size(0), page_size(5), page_size(50_000)),
            (100, 5, 1000)
        );
        Ok(())
    }
}
