//! Errors as gRPC statuses and back, in one place: the daemon answers its
//! callers with [`status_of`], and reads another daemon's answer to a
//! forwarded request with [`call_error`], so an error keeps its code, its
//! message and (where the caller acts on it) its typed cause across daemons.

use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::{Code, Status};
use troupe_runtime::{ActorFailure, CallError, FailureKind, Unavailable};
use troupe_transport::TransportError;

use super::error_details::{details_of_trailer, details_trailer, ERROR_DETAILS_TRAILER};

/// Trailer that marks an UNKNOWN status as an exception raised by actor
/// code; its value is the exception's type. SDKs read it.
pub const ERROR_TYPE_TRAILER: &str = "troupe-error-type";

/// Trailer beside [`ERROR_TYPE_TRAILER`] saying whether the method ran
/// ([`FailureKind::name`]); absent when the app's SDK did not say.
pub const FAILURE_KIND_TRAILER: &str = "troupe-failure-kind";

/// Trailer on UNAVAILABLE naming a cause the caller acts on: whether to
/// retry this daemon later or another one now.
pub const UNAVAILABLE_TRAILER: &str = "troupe-unavailable";

/// Trailer on the FAILED_PRECONDITION that refuses an app of another app
/// API version: the daemon's version, so an SDK can say which versions
/// differ without parsing the message.
pub const API_VERSION_TRAILER: &str = "troupe-api-version";

/// gRPC's retry pushback (gRFC A6): on a RESOURCE_EXHAUSTED that ran
/// nothing, the least milliseconds to wait before resending the call. The
/// SDKs retry such a refusal and no other; gRPC clients with a retry policy
/// honour it too. A RESOURCE_EXHAUSTED without it (a size limit) is final.
pub const RETRY_PUSHBACK_TRAILER: &str = "grpc-retry-pushback-ms";

/// The typed causes that travel in [`UNAVAILABLE_TRAILER`].
const SHUTTING_DOWN: &str = "shutting-down";
const LEASE_LAPSED: &str = "lease-lapsed";

/// Longest status message sent. Messages travel in an HTTP/2 header
/// (`grpc-message`, percent-encoded, so up to three times as long): past the
/// caller's header limit (16 KiB by default) the answer would arrive as a
/// protocol error instead of what went wrong. The daemon's own messages are
/// short; this bounds an actor's exception text and anything quoting input.
const MAX_MESSAGE_BYTES: usize = 3 * 1024;

pub fn status_of(error: CallError) -> Status {
    bounded(unbounded_status_of(error))
}

fn bounded(status: Status) -> Status {
    let message = status.message();
    if message.len() <= MAX_MESSAGE_BYTES {
        return status;
    }
    let mut cut = MAX_MESSAGE_BYTES;
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    let shortened = format!(
        "{}… (message of {} bytes cut)",
        &message[..cut],
        message.len()
    );
    Status::with_metadata(status.code(), shortened, status.metadata().clone())
}

fn unbounded_status_of(error: CallError) -> Status {
    let retry_after = error.retry_after();
    let mut status = status_without_pushback(error);
    if let Some(pause) = retry_after {
        status.metadata_mut().insert(
            RETRY_PUSHBACK_TRAILER,
            MetadataValue::from(u64::try_from(pause.as_millis()).unwrap_or(u64::MAX)),
        );
    }
    status
}

fn status_without_pushback(error: CallError) -> Status {
    match error {
        e @ CallError::UnknownType { .. } => Status::not_found(e.to_string()),
        CallError::InvalidArgument(m) => Status::invalid_argument(m),
        CallError::Overloaded(m) | CallError::TooLarge(m) => Status::resource_exhausted(m),
        CallError::RemoteOverloaded { message, .. } => Status::resource_exhausted(message),
        e @ CallError::TooLargeForApp(_) => Status::resource_exhausted(e.to_string()),
        e @ CallError::MemoryPressure(_) => Status::resource_exhausted(e.to_string()),
        CallError::Unavailable(cause) => {
            let mut status = Status::unavailable(cause.to_string());
            let reason = match cause {
                Unavailable::ShuttingDown => Some(SHUTTING_DOWN),
                Unavailable::LeaseLapsed => Some(LEASE_LAPSED),
                _ => None,
            };
            if let Some(reason) = reason {
                status
                    .metadata_mut()
                    .insert(UNAVAILABLE_TRAILER, MetadataValue::from_static(reason));
            }
            status
        }
        CallError::DeadlineExceeded(m) => Status::deadline_exceeded(m),
        e @ CallError::TurnTimedOut { .. } => Status::deadline_exceeded(e.to_string()),
        CallError::FailedPrecondition(m) => Status::failed_precondition(m),
        e @ CallError::ChainRefused(_) => Status::failed_precondition(e.to_string()),
        CallError::Conflict(m) => Status::aborted(m),
        CallError::NotFound(m) => Status::not_found(m),
        CallError::Internal(m) => Status::internal(m),
        CallError::Actor(failure) => {
            let mut status = Status::unknown(failure.message);
            let ty = MetadataValue::try_from(failure.ty.as_str())
                .unwrap_or_else(|_| MetadataValue::from_static("ActorError"));
            status.metadata_mut().insert(ERROR_TYPE_TRAILER, ty);
            if let Some(details) = details_trailer(&failure.details) {
                status.metadata_mut().insert(ERROR_DETAILS_TRAILER, details);
            }
            if let Some(kind) = failure.kind.name() {
                status
                    .metadata_mut()
                    .insert(FAILURE_KIND_TRAILER, MetadataValue::from_static(kind));
            }
            status
        }
    }
}

/// Another daemon's answer as the runtime reports it: its code and message
/// kept (an actor's exception stays one, a typed cause stays typed).
pub fn call_error(status: Status) -> CallError {
    let trailer = |name| {
        status
            .metadata()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let message = status.message().to_owned();
    match status.code() {
        Code::Unknown => match trailer(ERROR_TYPE_TRAILER) {
            Some(ty) => CallError::Actor(ActorFailure {
                ty,
                message,
                details: trailer(ERROR_DETAILS_TRAILER)
                    .map(|d| details_of_trailer(&d))
                    .unwrap_or_default(),
                kind: trailer(FAILURE_KIND_TRAILER)
                    .map_or(FailureKind::Unspecified, |k| FailureKind::from_name(&k)),
            }),
            None => CallError::Internal(format!("another daemon answered UNKNOWN: {message}")),
        },
        Code::Unavailable => match trailer(UNAVAILABLE_TRAILER).as_deref() {
            Some(SHUTTING_DOWN) => Unavailable::ShuttingDown.into(),
            Some(LEASE_LAPSED) => Unavailable::LeaseLapsed.into(),
            _ => Unavailable::Remote { message }.into(),
        },
        Code::NotFound => CallError::NotFound(message),
        Code::InvalidArgument => CallError::InvalidArgument(message),
        Code::ResourceExhausted => {
            match trailer(RETRY_PUSHBACK_TRAILER).and_then(|ms| ms.parse::<u64>().ok()) {
                Some(ms) => CallError::RemoteOverloaded {
                    message,
                    retry_after: Duration::from_millis(ms),
                },
                // No pushback: a size limit, or a daemon from before pushback;
                // either way not safe to resend as it is.
                None => CallError::TooLarge(message),
            }
        }
        Code::DeadlineExceeded | Code::Cancelled => CallError::DeadlineExceeded(message),
        Code::FailedPrecondition => CallError::FailedPrecondition(message),
        Code::Internal => CallError::Internal(message),
        code => CallError::Internal(format!("another daemon answered {code:?}: {message}")),
    }
}

/// Why a request forwarded to the owner of `actor` got no answer, or the
/// owner's own answer.
pub fn forward_error(actor: &str, error: TransportError) -> CallError {
    match error {
        TransportError::Remote { status, .. } => call_error(status),
        e @ TransportError::Timeout { .. } => {
            CallError::DeadlineExceeded(format!("forwarding the request for {actor}: {e}"))
        }
        e @ TransportError::Overloaded { .. } => {
            CallError::Overloaded(format!("forwarding the request for {actor}: {e}"))
        }
        e => Unavailable::OwnerUnreachable {
            actor: actor.to_owned(),
            reason: e.to_string(),
        }
        .into(),
    }
}

/// The canonical gRPC name, as grpcurl and the docs spell it.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use troupe_runtime::{
        ActorId, AppWork, HostGone, MemoryPressure, MessageBound, TooLargeForApp,
    };

    use super::*;

    /// What a caller can see of a status.
    fn seen(status: &Status) -> (Code, String, Vec<(String, String)>) {
        let mut trailers: Vec<(String, String)> = status
            .metadata()
            .iter()
            .filter_map(|kv| match kv {
                tonic::metadata::KeyAndValueRef::Ascii(k, v) => {
                    Some((k.to_string(), v.to_str().unwrap_or_default().to_owned()))
                }
                tonic::metadata::KeyAndValueRef::Binary(..) => None,
            })
            .collect();
        trailers.sort();
        (status.code(), status.message().to_owned(), trailers)
    }

    fn memory_pressure() -> CallError {
        CallError::MemoryPressure(MemoryPressure {
            resident_bytes: 91 << 20,
            limit_bytes: 100 << 20,
            percent: 90,
            resume_percent: 85,
        })
    }

    fn every_error() -> Vec<CallError> {
        let actor = ActorId::new("counter", "c1");
        vec![
            CallError::UnknownType {
                actor_type: "nope".into(),
                registered: vec!["counter".into()],
            },
            CallError::InvalidArgument("actor id is empty".into()),
            CallError::Overloaded("mailbox full".into()),
            CallError::TooLarge("reply too large".into()),
            memory_pressure(),
            TooLargeForApp {
                actor: actor.clone(),
                work: AppWork::Turn {
                    name: "echo".into(),
                },
                bytes: 2 << 20,
                limit: 1 << 20,
                bound: MessageBound::App,
                app: "billing".into(),
            }
            .into(),
            TooLargeForApp {
                actor: actor.clone(),
                work: AppWork::Activation,
                bytes: 9 << 20,
                limit: 8 << 20,
                bound: MessageBound::Daemon,
                app: "billing".into(),
            }
            .into(),
            Unavailable::ShuttingDown.into(),
            Unavailable::LeaseLapsed.into(),
            Unavailable::Moving {
                actor: actor.clone(),
            }
            .into(),
            Unavailable::NotOwner {
                actor: actor.clone(),
                node: "b".into(),
                address: "127.0.0.1:9".into(),
            }
            .into(),
            Unavailable::TooManyHops {
                actor: actor.clone(),
                hops: 2,
            }
            .into(),
            Unavailable::NoHost {
                actor_type: "counter".into(),
                waited: Duration::from_secs(10),
            }
            .into(),
            Unavailable::HostGone(HostGone::DuringTurn).into(),
            Unavailable::store(
                "cannot read the state of counter/c1",
                troupe_storage::StoreError::Io("disk on fire".into()),
            )
            .into(),
            Unavailable::Fenced {
                actor: actor.clone(),
            }
            .into(),
            Unavailable::Dropped { actor }.into(),
            Unavailable::OwnerUnreachable {
                actor: "counter/c1".into(),
                reason: "connection refused".into(),
            }
            .into(),
            Unavailable::Remote {
                message: "as it came".into(),
            }
            .into(),
            CallError::DeadlineExceeded("took too long".into()),
            CallError::Actor(ActorFailure {
                ty: "ValueError".into(),
                message: "boom".into(),
                details:
                    "Traceback (most recent call last):\n  File \"app.py\"\nValueError: boom 100%"
                        .into(),
                kind: FailureKind::Raised,
            }),
            CallError::FailedPrecondition("deadlock: a → b → a".into()),
            CallError::NotFound("no alarm".into()),
            CallError::Internal("bug".into()),
        ]
    }

    #[test]
    fn every_error_survives_a_forward_unchanged() {
        for error in every_error() {
            let direct = status_of(error.clone());
            let forwarded = status_of(call_error(direct.clone()));
            assert_eq!(seen(&forwarded), seen(&direct), "{error:?}");
        }
    }

    #[test]
    fn causes_callers_act_on_stay_typed() {
        for cause in [Unavailable::ShuttingDown, Unavailable::LeaseLapsed] {
            let back = call_error(status_of(cause.clone().into()));
            assert_eq!(
                std::mem::discriminant(match &back {
                    CallError::Unavailable(u) => u,
                    other => panic!("{other:?}"),
                }),
                std::mem::discriminant(&cause)
            );
        }
        for kind in [
            FailureKind::Unspecified,
            FailureKind::Raised,
            FailureKind::NoSuchMethod,
            FailureKind::BadArguments,
        ] {
            let raised = call_error(status_of(CallError::Actor(ActorFailure {
                ty: "KeyError".into(),
                message: "'x'".into(),
                details: String::new(),
                kind,
            })));
            assert!(
                matches!(&raised, CallError::Actor(f) if f.ty == "KeyError" && f.message == "'x'" && f.kind == kind),
                "{raised:?}"
            );
        }
    }

    #[test]
    fn a_forward_that_broke_names_the_owner_and_keeps_its_answer() {
        let unreachable = forward_error(
            "counter/c1",
            TransportError::Unreachable {
                address: "b:1".into(),
                reason: "Connection refused".into(),
            },
        );
        let CallError::Unavailable(Unavailable::OwnerUnreachable { actor, reason }) = &unreachable
        else {
            panic!("unexpected {unreachable:?}");
        };
        assert_eq!(actor, "counter/c1");
        assert!(reason.contains("b:1"), "{reason}");
        let timed_out = forward_error(
            "counter/c1",
            TransportError::Timeout {
                address: "b:1".into(),
                timeout: Duration::from_secs(1),
            },
        );
        assert!(matches!(timed_out, CallError::DeadlineExceeded(_)));
        let answered = forward_error(
            "counter/c1",
            TransportError::Remote {
                address: "b:1".into(),
                status: Status::resource_exhausted("full"),
            },
        );
        assert!(matches!(answered, CallError::TooLarge(m) if m == "full"));
    }

    fn pushback(status: &Status) -> Option<&str> {
        status
            .metadata()
            .get(RETRY_PUSHBACK_TRAILER)
            .and_then(|v| v.to_str().ok())
    }

    #[test]
    fn only_refusals_that_ran_nothing_carry_a_pushback() {
        let full = status_of(CallError::Overloaded("mailbox full".into()));
        assert_eq!(full.code(), Code::ResourceExhausted);
        assert_eq!(pushback(&full), Some("100"));
        let memory = status_of(memory_pressure());
        assert_eq!(pushback(&memory), Some("500"));
        for error in every_error() {
            let retryable = matches!(
                error,
                CallError::Overloaded(_) | CallError::MemoryPressure(_)
            );
            assert_eq!(
                pushback(&status_of(error.clone())).is_some(),
                retryable,
                "{error:?}"
            );
        }
    }

    #[test]
    fn a_refusal_forwarded_over_a_link_keeps_its_pushback() {
        use troupe_proto::v1::link_reply::Result as Answer;
        use troupe_transport::link::{status_of_reply, status_reply};
        let owner = status_of(memory_pressure());
        let Some(Answer::Error(sent)) = status_reply(&owner).result else {
            panic!("a failed request is answered with its status");
        };
        let relayed = status_of(forward_error(
            "counter/c1",
            TransportError::Remote {
                address: "b:1".into(),
                status: status_of_reply(sent),
            },
        ));
        assert_eq!(seen(&relayed), seen(&owner));
        assert_eq!(pushback(&relayed), Some("500"));
    }

    #[test]
    fn another_daemons_pushback_is_kept_and_its_size_refusal_stays_final() {
        let mut refused = Status::resource_exhausted("memory");
        refused
            .metadata_mut()
            .insert(RETRY_PUSHBACK_TRAILER, MetadataValue::from(750u64));
        let back = call_error(refused);
        assert!(matches!(
            &back,
            CallError::RemoteOverloaded { message, retry_after }
                if message == "memory" && *retry_after == Duration::from_millis(750)
        ));
        assert_eq!(pushback(&status_of(back)), Some("750"));
        let too_large = call_error(Status::resource_exhausted("8 MiB > 4 MiB"));
        assert!(matches!(too_large, CallError::TooLarge(_)));
        assert_eq!(too_large.retry_after(), None);
    }

    #[test]
    fn a_long_message_is_cut_to_fit_a_header() {
        let status = status_of(CallError::Actor(ActorFailure {
            ty: "ValueError".into(),
            message: "é".repeat(50_000),
            ..ActorFailure::default()
        }));
        assert_eq!(status.code(), Code::Unknown);
        assert!(status.message().len() <= MAX_MESSAGE_BYTES + 64);
        assert!(status.message().ends_with("(message of 100000 bytes cut)"));
        assert!(status.metadata().get(ERROR_TYPE_TRAILER).is_some());
    }
}
