//! The runtime's [`Forwarder`] over links (`troupe_transport::link`): a
//! request for an actor another daemon owns goes there as the link message
//! of the same `ActorClient` request a caller would send, with its
//! deadline, hop count and trace context, on the channel its payload size
//! picks and the connection its actor and call chain pick; the owner's
//! answer (or error) comes back as the runtime's.

use std::time::Duration;
use troupe_proto::v1 as pb;
use troupe_proto::v1::link_reply::Result as Answer;
use troupe_proto::v1::link_request::Call;
use troupe_runtime::input::millis;

use troupe_runtime::{
    ActorRequest, ActorResponse, BoxFuture, CallError, Forwarder, Peer, Polled, RequestContext,
    TypeFrom, WatchedType, POLL_SLACK,
};
use troupe_transport::link::{affinity, status_of_reply, Links};
use troupe_transport::{MessageClass, TransportError};

use crate::convert::errors::forward_error;
use crate::convert::events;
use crate::convert::requests::{request_to_pb, response_from_pb, PbRequest, PbResponse};
use crate::telemetry;

#[derive(Debug, Clone)]
pub struct TransportForwarder {
    links: Links,
}

impl TransportForwarder {
    pub fn new(links: Links) -> Self {
        Self { links }
    }
}

/// The link request for `request`: its context, and for a call its own
/// trace (the call span's context when it is exported, else the caller's).
fn link_request(mut request: ActorRequest, context: RequestContext) -> pb::LinkRequest {
    let (traceparent, tracestate) = match request.call_mut() {
        Some(call) => telemetry::turn_context(call.extra.as_mut().and_then(|e| e.trace.take())),
        None => (context.traceparent, context.tracestate),
    };
    let call = match request_to_pb(request) {
        PbRequest::Invoke(r) => Call::Invoke(r),
        PbRequest::Tell(r) => Call::Tell(r),
        PbRequest::GetState(r) => Call::GetState(r),
        PbRequest::SetReminder(r) => Call::SetReminder(r),
        PbRequest::GetReminder(r) => Call::GetReminder(r),
        PbRequest::DeleteReminder(r) => Call::DeleteReminder(r),
        PbRequest::PauseReminder(r) => Call::PauseReminder(r),
        PbRequest::ResumeReminder(r) => Call::ResumeReminder(r),
        PbRequest::SetAlarm(r) => Call::SetAlarm(r),
        PbRequest::GetAlarm(r) => Call::GetAlarm(r),
        PbRequest::DeleteAlarm(r) => Call::DeleteAlarm(r),
        PbRequest::SetTimer(r) => Call::SetTimer(r),
        PbRequest::DeleteTimer(r) => Call::DeleteTimer(r),
        PbRequest::PollEvents(r) => Call::PollEvents(r),
    };
    pb::LinkRequest {
        hops: context.hops,
        timeout_ms: context.timeout.map_or(0, |t| millis(t).max(1)),
        traceparent,
        tracestate,
        call: Some(call),
    }
}

/// The payload a request carries, which picks its channel.
fn payload_bytes(request: &ActorRequest) -> usize {
    request.call().map_or(0, |call| call.payload.len())
}

/// The call chain a request belongs to (empty: none).
fn chain_of(request: &ActorRequest) -> &str {
    request
        .call()
        .and_then(|call| call.extra.as_ref())
        .and_then(|e| e.chain.as_ref())
        .map_or("", |c| c.id.as_str())
}

/// The owner's answer as the RPC's: an error reply is the status the RPC
/// would have failed with.
fn answer(
    address: &str,
    reply: pb::LinkReply,
    absent_ok: bool,
) -> Result<PbResponse, TransportError> {
    let remote = |status| TransportError::Remote {
        address: address.to_owned(),
        status,
    };
    Ok(match reply.result {
        Some(Answer::Invoke(r)) => PbResponse::Invoke(r),
        Some(Answer::Tell(r)) => PbResponse::Tell(r),
        Some(Answer::State(r)) => PbResponse::State(r),
        Some(Answer::Reminder(r)) => PbResponse::Reminder(Some(Box::new(r))),
        Some(Answer::Deleted(r)) => PbResponse::Deleted(r),
        Some(Answer::Timer(r)) => PbResponse::Timer(r),
        Some(Answer::Events(r)) => PbResponse::Events(r),
        // A reminder or alarm the owner does not have.
        Some(Answer::Error(e)) if absent_ok && e.code == tonic::Code::NotFound as i32 => {
            PbResponse::Reminder(None)
        }
        Some(Answer::Error(e)) => return Err(remote(status_of_reply(e))),
        None => {
            return Err(remote(tonic::Status::internal(
                "the owner answered a forwarded request with nothing",
            )))
        }
    })
}

impl Forwarder for TransportForwarder {
    fn forward(
        &self,
        owner: &Peer,
        request: ActorRequest,
        context: RequestContext,
    ) -> BoxFuture<Result<ActorResponse, CallError>> {
        let links = self.links.clone();
        let address = owner.address.clone();
        let actor = request.actor().clone();
        let class: MessageClass = links.class_of(payload_bytes(&request));
        let affinity = affinity(&actor.ty, &actor.id, chain_of(&request));
        let absent_ok = matches!(
            request,
            ActorRequest::GetReminder { .. }
                | ActorRequest::GetAlarm { .. }
                | ActorRequest::PauseReminder { .. }
                | ActorRequest::ResumeReminder { .. }
        );
        let request = link_request(request, context);
        Box::pin(async move {
            let reply = links
                .request(&address, class, affinity, request)
                .await
                .and_then(|reply| answer(&address, reply, absent_ok));
            // The actor's name is written out only for an error's text.
            reply
                .map(response_from_pb)
                .map_err(|e| forward_error(&actor.to_string(), e))
        })
    }

    fn poll_type_events(
        &self,
        host: &Peer,
        watched: &WatchedType,
        from: &TypeFrom,
        wait: Duration,
    ) -> BoxFuture<Result<Polled, CallError>> {
        let links = self.links.clone();
        let address = host.address.clone();
        let what = format!("the events of type {} on daemon {}", watched.ty, host.node);
        let affinity = affinity(&watched.ty, "", "");
        let new_host = *from == TypeFrom::NewHost;
        let request = pb::LinkRequest {
            hops: 1,
            // Room for the wait and the way there and back.
            timeout_ms: millis(wait.saturating_add(POLL_SLACK)),
            call: Some(Call::PollTypeEvents(events::type_poll_to_pb(
                watched, from, wait,
            ))),
            ..pb::LinkRequest::default()
        };
        Box::pin(async move {
            let reply = links
                .request(&address, links.class_of(0), affinity, request)
                .await
                .and_then(|reply| answer(&address, reply, false));
            match reply {
                Ok(PbResponse::Events(polled)) => {
                    // A daemon older than the question answered from now on.
                    let unchecked = new_host && !polled.new_host_checked;
                    let mut polled = events::polled_from_pb(polled);
                    polled.missed |= unchecked;
                    Ok(polled)
                }
                Ok(other) => Err(CallError::Internal(format!(
                    "a poll of {what} was answered with {other:?}"
                ))),
                Err(e) => Err(forward_error(&what, e)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use troupe_runtime::{ActorId, Call, Payload};

    use super::*;

    #[test]
    fn a_forwarded_request_carries_its_deadline_hops_and_trace() {
        let context = RequestContext {
            timeout: Some(Duration::from_secs(2)),
            hops: 2,
            traceparent: "00-aa-bb-01".into(),
            tracestate: "k=v".into(),
        };
        let state = ActorRequest::GetState {
            actor: ActorId::new("counter", "c1"),
            keys: Vec::new(),
        };
        let sent = link_request(state, context.clone());
        assert_eq!((sent.hops, sent.timeout_ms), (2, 2000));
        assert_eq!(sent.traceparent, "00-aa-bb-01");
        assert!(matches!(
            sent.call,
            Some(pb::link_request::Call::GetState(_))
        ));
        // A call carries its own trace; untraced, it carries none.
        let call = Call::new(ActorId::new("counter", "c1"), "incr", Payload::default());
        let sent = link_request(ActorRequest::Invoke(call), context);
        assert_eq!((sent.hops, sent.traceparent.as_str()), (2, ""));
    }
}
