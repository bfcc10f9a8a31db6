//! The runtime's [`Forwarder`] over `crates/transport`: a request for an
//! actor another daemon owns goes there as the same `ActorClient` RPC a
//! caller would send, with its deadline, hop count and trace context in
//! headers, and the owner's answer (or error) comes back as the runtime's.

use troupe_runtime::{
    ActorRequest, ActorResponse, BoxFuture, CallError, Forwarder, Peer, RequestContext,
};
use troupe_transport::{Forward, Peers, TransportError};

use crate::convert::errors::forward_error;
use crate::convert::requests::{request_to_pb, response_from_pb, PbRequest, PbResponse};
use crate::telemetry;

#[derive(Debug, Clone)]
pub struct TransportForwarder {
    peers: Peers,
}

impl TransportForwarder {
    pub fn new(peers: Peers) -> Self {
        Self { peers }
    }
}

/// The headers a forwarded request carries: the context, and for a call its
/// own trace (the call span's context when it is exported, else the
/// caller's).
fn headers(request: &mut ActorRequest, context: RequestContext) -> Forward {
    let (traceparent, tracestate) = match request {
        ActorRequest::Invoke(call) | ActorRequest::Tell(call) => {
            telemetry::turn_context(call.extra.as_mut().and_then(|e| e.trace.take()))
        }
        _ => (context.traceparent, context.tracestate),
    };
    Forward {
        hops: context.hops,
        timeout: context.timeout,
        traceparent,
        tracestate,
    }
}

impl TransportForwarder {
    async fn send(
        &self,
        address: &str,
        request: PbRequest,
        forward: &Forward,
    ) -> Result<PbResponse, TransportError> {
        let peers = &self.peers;
        macro_rules! rpc {
            ($body:expr, $method:ident) => {
                peers
                    .forward(address, $body, forward, |mut c, r| async move {
                        c.$method(r).await
                    })
                    .await
            };
        }
        Ok(match request {
            PbRequest::Invoke(r) => PbResponse::Invoke(rpc!(r, invoke)?),
            PbRequest::Tell(r) => PbResponse::Tell(rpc!(r, tell)?),
            PbRequest::GetState(r) => PbResponse::State(rpc!(r, get_state)?),
            PbRequest::SetReminder(r) => PbResponse::Reminder(Some(rpc!(r, set_reminder)?)),
            PbRequest::GetReminder(r) => PbResponse::Reminder(absent(rpc!(r, get_reminder))?),
            PbRequest::DeleteReminder(r) => PbResponse::Deleted(rpc!(r, delete_reminder)?),
            PbRequest::SetAlarm(r) => PbResponse::Reminder(Some(rpc!(r, set_alarm)?)),
            PbRequest::GetAlarm(r) => PbResponse::Reminder(absent(rpc!(r, get_alarm))?),
            PbRequest::DeleteAlarm(r) => PbResponse::Deleted(rpc!(r, delete_alarm)?),
            PbRequest::SetTimer(r) => PbResponse::Timer(rpc!(r, set_timer)?),
            PbRequest::DeleteTimer(r) => PbResponse::Deleted(rpc!(r, delete_timer)?),
        })
    }
}

/// A reminder or alarm the owner does not have: NOT_FOUND on the wire,
/// `None` to the runtime.
fn absent<T>(answer: Result<T, TransportError>) -> Result<Option<T>, TransportError> {
    match answer {
        Ok(found) => Ok(Some(found)),
        Err(TransportError::Remote { status, .. }) if status.code() == tonic::Code::NotFound => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

impl Forwarder for TransportForwarder {
    fn forward(
        &self,
        owner: &Peer,
        mut request: ActorRequest,
        context: RequestContext,
    ) -> BoxFuture<Result<ActorResponse, CallError>> {
        let this = self.clone();
        let address = owner.address.clone();
        Box::pin(async move {
            let actor = request.actor().to_string();
            let forward = headers(&mut request, context);
            this.send(&address, request_to_pb(request), &forward)
                .await
                .map(response_from_pb)
                .map_err(|e| forward_error(&actor, e))
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
        let mut state = ActorRequest::GetState {
            actor: ActorId::new("counter", "c1"),
            keys: Vec::new(),
        };
        let forward = headers(&mut state, context.clone());
        assert_eq!(forward.hops, 2);
        assert_eq!(forward.timeout, Some(Duration::from_secs(2)));
        assert_eq!(forward.traceparent, "00-aa-bb-01");
        // A call carries its own trace; untraced, it carries none.
        let call = Call::new(ActorId::new("counter", "c1"), "incr", Payload::default());
        let forward = headers(&mut ActorRequest::Invoke(call), context);
        assert_eq!((forward.hops, forward.traceparent.as_str()), (2, ""));
    }
}
