//! Requests other daemons forward over links (`troupe_transport::link`):
//! each is answered exactly as the same `ActorClient` RPC from a caller
//! would be (the link's deadline, hop count and trace context become that
//! RPC's headers), so a forwarded request has no path of its own. One
//! difference: the RPC is marked as a peer's ([`FromPeer`]), so a call
//! chain it carries, checked by the daemon the call entered, is honoured
//! without this daemon's token.

use std::sync::Arc;

use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Request, Response, Status};
use troupe_proto::v1 as pb;
use troupe_proto::v1::actor_client_server::ActorClient;
use troupe_proto::v1::link_reply::Result as Answer;
use troupe_proto::v1::link_request::Call;
use troupe_transport::link::{status_reply, Inbound};
use troupe_transport::{BoxFuture, FORWARDED_HEADER, TRACEPARENT_HEADER, TRACESTATE_HEADER};

use crate::client_api::{ClientApi, FromPeer};

#[derive(Debug, Clone)]
pub struct LinkApi {
    client: Arc<ClientApi>,
}

impl LinkApi {
    pub fn new(client: ClientApi) -> Self {
        Self {
            client: Arc::new(client),
        }
    }
}

/// The headers the RPC would have carried.
fn headers(request: &pb::LinkRequest) -> MetadataMap {
    let mut metadata = MetadataMap::new();
    metadata.insert(FORWARDED_HEADER, MetadataValue::from(request.hops));
    for (name, value) in [
        (TRACEPARENT_HEADER, &request.traceparent),
        (TRACESTATE_HEADER, &request.tracestate),
    ] {
        // Came from a caller's valid header in the first place; dropping a
        // bad one only loses the trace link.
        if let (false, Ok(value)) = (value.is_empty(), value.parse()) {
            metadata.insert(name, value);
        }
    }
    if request.timeout_ms > 0 {
        // grpc-timeout allows 8 digits.
        let ms = request.timeout_ms.min(99_999_999);
        if let Ok(value) = format!("{ms}m").parse() {
            metadata.insert("grpc-timeout", value);
        }
    }
    metadata
}

/// The RPC, marked as a peer's: a chain it carries was checked by the
/// daemon the call entered (the link is authenticated with the API token).
fn rpc<T>(metadata: MetadataMap, body: T) -> Request<T> {
    let mut extensions = tonic::Extensions::new();
    extensions.insert(FromPeer);
    Request::from_parts(metadata, extensions, body)
}

fn reply<T>(answer: Result<Response<T>, Status>, into: impl FnOnce(T) -> Answer) -> pb::LinkReply {
    match answer {
        Ok(response) => pb::LinkReply {
            result: Some(into(response.into_inner())),
        },
        Err(status) => status_reply(&status),
    }
}

impl Inbound for LinkApi {
    fn handle(&self, mut request: pb::LinkRequest) -> BoxFuture<pb::LinkReply> {
        let client = self.client.clone();
        let metadata = headers(&request);
        let Some(call) = request.call.take() else {
            let missing = Status::invalid_argument("a link request without a call");
            return Box::pin(async move { status_reply(&missing) });
        };
        Box::pin(async move {
            match call {
                Call::Invoke(r) => reply(client.invoke(rpc(metadata, r)).await, Answer::Invoke),
                Call::Tell(r) => reply(client.tell(rpc(metadata, r)).await, Answer::Tell),
                Call::GetState(r) => reply(client.get_state(rpc(metadata, r)).await, Answer::State),
                Call::SetReminder(r) => reply(
                    client.set_reminder(rpc(metadata, r)).await,
                    Answer::Reminder,
                ),
                Call::GetReminder(r) => reply(
                    client.get_reminder(rpc(metadata, r)).await,
                    Answer::Reminder,
                ),
                Call::DeleteReminder(r) => reply(
                    client.delete_reminder(rpc(metadata, r)).await,
                    Answer::Deleted,
                ),
                Call::PauseReminder(r) => reply(
                    client.pause_reminder(rpc(metadata, r)).await,
                    Answer::Reminder,
                ),
                Call::ResumeReminder(r) => reply(
                    client.resume_reminder(rpc(metadata, r)).await,
                    Answer::Reminder,
                ),
                Call::SetAlarm(r) => {
                    reply(client.set_alarm(rpc(metadata, r)).await, Answer::Reminder)
                }
                Call::GetAlarm(r) => {
                    reply(client.get_alarm(rpc(metadata, r)).await, Answer::Reminder)
                }
                Call::DeleteAlarm(r) => {
                    reply(client.delete_alarm(rpc(metadata, r)).await, Answer::Deleted)
                }
                Call::SetTimer(r) => reply(client.set_timer(rpc(metadata, r)).await, Answer::Timer),
                Call::DeleteTimer(r) => {
                    reply(client.delete_timer(rpc(metadata, r)).await, Answer::Deleted)
                }
                Call::PollEvents(r) => reply(
                    client
                        .poll_events(rpc(metadata, r))
                        .await
                        .map(Response::new),
                    Answer::Events,
                ),
                Call::PollTypeEvents(r) => reply(
                    client
                        .poll_type_events(rpc(metadata, r))
                        .await
                        .map(Response::new),
                    Answer::Events,
                ),
            }
        })
    }
}
