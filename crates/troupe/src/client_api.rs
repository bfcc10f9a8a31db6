//! `troupe.v1.ActorClient`: invoke, tell and state reads for any caller.

use tonic::{Request, Response, Status};
use troupe_proto::v1 as pb;
use troupe_runtime::{Call, Runtime, TurnKind};

use crate::convert;

#[derive(Debug, Clone)]
pub struct ClientApi {
    runtime: Runtime,
}

impl ClientApi {
    pub fn new(runtime: Runtime) -> Self {
        Self { runtime }
    }
}

fn call_from(
    actor: Option<pb::ActorRef>,
    method: String,
    payload: Option<pb::Payload>,
    metadata: std::collections::HashMap<String, String>,
    chain: Option<pb::CallChain>,
    timeout: Option<std::time::Duration>,
) -> Result<Call, Status> {
    Ok(Call {
        actor: convert::actor_id(actor)?,
        kind: TurnKind::Call,
        method: method.into(),
        payload: convert::payload(payload),
        extra: convert::extra(metadata, chain),
        timeout,
    })
}

#[tonic::async_trait]
impl pb::actor_client_server::ActorClient for ClientApi {
    async fn invoke(
        &self,
        request: Request<pb::InvokeRequest>,
    ) -> Result<Response<pb::InvokeResponse>, Status> {
        let timeout = convert::grpc_timeout(request.metadata());
        let r = request.into_inner();
        let call = call_from(r.actor, r.method, r.payload, r.metadata, r.chain, timeout)?;
        let payload = self
            .runtime
            .invoke(call)
            .await
            .map_err(convert::status_of)?;
        Ok(Response::new(pb::InvokeResponse {
            payload: Some(convert::payload_to_pb(payload)),
        }))
    }

    async fn tell(
        &self,
        request: Request<pb::TellRequest>,
    ) -> Result<Response<pb::TellResponse>, Status> {
        let r = request.into_inner();
        let call = call_from(r.actor, r.method, r.payload, r.metadata, r.chain, None)?;
        self.runtime.tell(call).map_err(convert::status_of)?;
        Ok(Response::new(pb::TellResponse {}))
    }

    async fn get_state(
        &self,
        request: Request<pb::GetStateRequest>,
    ) -> Result<Response<pb::GetStateResponse>, Status> {
        let r = request.into_inner();
        let actor = convert::actor_id(r.actor)?;
        let (entries, active) = self
            .runtime
            .get_state(&actor, &r.keys)
            .await
            .map_err(convert::status_of)?;
        Ok(Response::new(pb::GetStateResponse {
            entries: entries.into_iter().collect(),
            active,
        }))
    }
}
