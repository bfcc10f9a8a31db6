//! `troupe.v1.ActorClient`: invoke, tell and state reads for any caller.
//!
//! In a cluster, Invoke and Tell are routed by the runtime (it forwards them
//! to the actor's owner); the other per-actor RPCs (state, reminders, alarm,
//! timers) are routed here and forwarded as they came, so the owner answers
//! them from its own activation and store.

use std::future::Future;

use tokio::time::Instant;
use tonic::metadata::MetadataMap;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};
use troupe_proto::v1 as pb;
use troupe_proto::v1::actor_client_client::ActorClientClient;
use troupe_runtime::{ActorId, Call, CallTrace, ReminderSpec, Route, Runtime, TurnKind};
use troupe_transport::{Forward, Peers, TRACEPARENT_HEADER, TRACESTATE_HEADER};

use crate::{convert, schedule, telemetry};

#[derive(Debug, Clone)]
pub struct ClientApi {
    runtime: Runtime,
    /// Connections to the other daemons; `None` on a single node.
    peers: Option<Peers>,
}

impl ClientApi {
    pub fn new(runtime: Runtime, peers: Option<Peers>) -> Self {
        Self { runtime, peers }
    }

    /// Where an RPC about `actor` is answered: here, or at its owner (then
    /// with the headers to forward it with). Waits out a table change that
    /// is moving the actor, up to the caller's deadline.
    async fn target(&self, actor: &ActorId, headers: &MetadataMap) -> Result<Target, Status> {
        let Some(peers) = &self.peers else {
            return Ok(Target::Here);
        };
        let hops = troupe_transport::forwarded_hops(headers);
        let limit = self.runtime.config().call_timeout;
        let timeout = convert::answer_within(headers).map_or(limit, |t| t.min(limit));
        let deadline = Instant::now() + timeout;
        match self
            .runtime
            .resolve(actor, deadline, hops)
            .await
            .map_err(convert::status_of)?
        {
            Route::Remote { node, address } => {
                let header = |name| {
                    headers
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned()
                };
                tracing::debug!(actor = %actor, owner = %node, "forwarding to the owner");
                Ok(Target::Owner {
                    peers: peers.clone(),
                    address,
                    forward: Forward {
                        hops: hops + 1,
                        timeout: Some(deadline.saturating_duration_since(Instant::now())),
                        traceparent: header(TRACEPARENT_HEADER),
                        tracestate: header(TRACESTATE_HEADER),
                    },
                })
            }
            _ => Ok(Target::Here),
        }
    }
}

/// Where a per-actor RPC is answered.
enum Target {
    Here,
    Owner {
        peers: Peers,
        address: String,
        forward: Forward,
    },
}

/// Runs `rpc` on the owner; its answer (or error status) is the answer.
async fn forward<Req, Resp, F, Fut>(
    peers: Peers,
    address: String,
    forward: Forward,
    body: Req,
    rpc: F,
) -> Result<Response<Resp>, Status>
where
    F: FnOnce(ActorClientClient<Channel>, Request<Req>) -> Fut,
    Fut: Future<Output = Result<Response<Resp>, Status>>,
{
    peers
        .forward(&address, body, &forward, rpc)
        .await
        .map(Response::new)
        .map_err(troupe_transport::TransportError::into_status)
}

/// Forwards the RPC when its actor lives elsewhere, else falls through to
/// the local code after it.
macro_rules! route_or_forward {
    ($self:ident, $actor:expr, $headers:expr, $body:expr, $method:ident) => {
        if let Target::Owner {
            peers,
            address,
            forward: fwd,
        } = $self.target($actor, $headers).await?
        {
            return forward(peers, address, fwd, $body, |mut c, r| async move {
                c.$method(r).await
            })
            .await;
        }
    };
}

/// Records a forwarded call's hop count, so the runtime stops forwarding it
/// past its limit.
fn hops(call: &mut Call, headers: &MetadataMap) {
    let hops = troupe_transport::forwarded_hops(headers);
    if hops > 0 {
        call.extra.get_or_insert_with(Default::default).hops = hops;
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

/// Sends the call's trace with it; untraced calls keep `extra` unallocated.
fn attach(call: &mut Call, trace: Option<CallTrace>) {
    if let Some(trace) = trace {
        call.extra.get_or_insert_with(Default::default).trace = Some(trace);
    }
}

#[tonic::async_trait]
impl pb::actor_client_server::ActorClient for ClientApi {
    async fn invoke(
        &self,
        request: Request<pb::InvokeRequest>,
    ) -> Result<Response<pb::InvokeResponse>, Status> {
        let timeout = convert::answer_within(request.metadata());
        let (headers, _, r) = request.into_parts();
        let mut call = call_from(r.actor, r.method, r.payload, r.metadata, r.chain, timeout)?;
        hops(&mut call, &headers);
        let mut traced = telemetry::incoming_call(&headers, "Invoke", &call.actor, &call.method);
        attach(&mut call, traced.take_trace());
        let result = self
            .runtime
            .invoke(call)
            .await
            .map_err(convert::status_of)
            .map(|payload| {
                Response::new(pb::InvokeResponse {
                    payload: Some(convert::payload_to_pb(payload)),
                })
            });
        traced.finish(&result);
        result
    }

    async fn tell(
        &self,
        request: Request<pb::TellRequest>,
    ) -> Result<Response<pb::TellResponse>, Status> {
        let (headers, _, r) = request.into_parts();
        let mut call = call_from(r.actor, r.method, r.payload, r.metadata, r.chain, None)?;
        hops(&mut call, &headers);
        let mut traced = telemetry::incoming_call(&headers, "Tell", &call.actor, &call.method);
        attach(&mut call, traced.take_trace());
        // A tell ends when the call is queued; its turn runs later, still
        // a child of this span.
        let result = self
            .runtime
            .tell(call)
            .map_err(convert::status_of)
            .map(|()| Response::new(pb::TellResponse {}));
        traced.finish(&result);
        result
    }

    async fn get_state(
        &self,
        request: Request<pb::GetStateRequest>,
    ) -> Result<Response<pb::GetStateResponse>, Status> {
        let (headers, _, r) = request.into_parts();
        let actor = convert::actor_id(r.actor.clone())?;
        route_or_forward!(self, &actor, &headers, r, get_state);
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

    async fn set_reminder(
        &self,
        request: Request<pb::SetReminderRequest>,
    ) -> Result<Response<pb::Reminder>, Status> {
        let (headers, _, r) = request.into_parts();
        let actor = convert::actor_id(r.actor.clone())?;
        route_or_forward!(self, &actor, &headers, r, set_reminder);
        let (period, from_iso) = schedule::period(&r.period)?;
        let repeat = (r.repeat > 0).then_some(r.repeat).or(from_iso);
        let until = if r.until.trim().is_empty() {
            None
        } else {
            Some(schedule::instant("until", &r.until)?)
        };
        let spec = ReminderSpec {
            actor,
            name: r.name,
            due_unix_ms: schedule::instant("due", &r.due)?,
            period,
            repeat,
            until_unix_ms: until,
            payload: convert::payload(r.payload),
            retry: schedule::retry(r.retry),
            missed: schedule::missed(r.missed),
        };
        let info = self
            .runtime
            .set_reminder(spec)
            .await
            .map_err(convert::status_of)?;
        Ok(Response::new(schedule::reminder_to_pb(info)))
    }

    async fn get_reminder(
        &self,
        request: Request<pb::ReminderRef>,
    ) -> Result<Response<pb::Reminder>, Status> {
        let (headers, _, r) = request.into_parts();
        let actor = convert::actor_id(r.actor.clone())?;
        route_or_forward!(self, &actor, &headers, r, get_reminder);
        match self
            .runtime
            .get_reminder(&actor, &r.name)
            .await
            .map_err(convert::status_of)?
        {
            Some(info) => Ok(Response::new(schedule::reminder_to_pb(info))),
            None => Err(Status::not_found(format!(
                "actor {actor} has no reminder {:?}",
                r.name
            ))),
        }
    }

    async fn delete_reminder(
        &self,
        request: Request<pb::ReminderRef>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        let (headers, _, r) = request.into_parts();
        let actor = convert::actor_id(r.actor.clone())?;
        route_or_forward!(self, &actor, &headers, r, delete_reminder);
        let deleted = self
            .runtime
            .delete_reminder(&actor, &r.name)
            .await
            .map_err(convert::status_of)?;
        Ok(Response::new(pb::DeleteResponse { deleted }))
    }

    async fn list_reminders(
        &self,
        request: Request<pb::ListRemindersRequest>,
    ) -> Result<Response<pb::ListRemindersResponse>, Status> {
        let r = request.into_inner();
        let size = convert::page_size(r.page_size);
        let after = convert::parse_page_token::<3>(&r.page_token)?
            .map(|[t, i, n]| (ActorId::new(t, i), n.to_owned()));
        let ty = (!r.r#type.is_empty()).then_some(r.r#type.as_str());
        let id = (!r.id.is_empty()).then_some(r.id.as_str());
        let mut reminders = self
            .runtime
            .list_reminders(
                ty,
                id,
                after.as_ref().map(|(a, n)| (a, n.as_str())),
                size + 1,
            )
            .await
            .map_err(convert::status_of)?;
        let next_page_token = if reminders.len() > size {
            reminders.truncate(size);
            reminders
                .last()
                .map(|r| convert::page_token(&[&r.actor.ty, &r.actor.id, &r.name]))
                .unwrap_or_default()
        } else {
            String::new()
        };
        Ok(Response::new(pb::ListRemindersResponse {
            reminders: reminders
                .into_iter()
                .map(schedule::reminder_to_pb)
                .collect(),
            next_page_token,
        }))
    }

    async fn set_alarm(
        &self,
        request: Request<pb::SetAlarmRequest>,
    ) -> Result<Response<pb::Reminder>, Status> {
        let (headers, _, r) = request.into_parts();
        let actor = convert::actor_id(r.actor.clone())?;
        route_or_forward!(self, &actor, &headers, r, set_alarm);
        let at = schedule::instant("at", &r.at)?;
        let info = self
            .runtime
            .set_alarm(
                actor,
                at,
                convert::payload(r.payload),
                schedule::retry(r.retry),
            )
            .await
            .map_err(convert::status_of)?;
        Ok(Response::new(schedule::reminder_to_pb(info)))
    }

    async fn get_alarm(
        &self,
        request: Request<pb::AlarmRef>,
    ) -> Result<Response<pb::Reminder>, Status> {
        let (headers, _, r) = request.into_parts();
        let actor = convert::actor_id(r.actor.clone())?;
        route_or_forward!(self, &actor, &headers, r, get_alarm);
        match self
            .runtime
            .get_alarm(&actor)
            .await
            .map_err(convert::status_of)?
        {
            Some(info) => Ok(Response::new(schedule::reminder_to_pb(info))),
            None => Err(Status::not_found(format!("actor {actor} has no alarm"))),
        }
    }

    async fn delete_alarm(
        &self,
        request: Request<pb::AlarmRef>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        let (headers, _, r) = request.into_parts();
        let actor = convert::actor_id(r.actor.clone())?;
        route_or_forward!(self, &actor, &headers, r, delete_alarm);
        let deleted = self
            .runtime
            .delete_alarm(&actor)
            .await
            .map_err(convert::status_of)?;
        Ok(Response::new(pb::DeleteResponse { deleted }))
    }

    async fn set_timer(
        &self,
        request: Request<pb::SetTimerRequest>,
    ) -> Result<Response<pb::SetTimerResponse>, Status> {
        let (headers, _, r) = request.into_parts();
        let actor = convert::actor_id(r.actor.clone())?;
        route_or_forward!(self, &actor, &headers, r, set_timer);
        let due = if r.due.trim().is_empty() {
            std::time::Duration::ZERO
        } else {
            schedule::duration("due", &r.due)?
        };
        let (period, _) = schedule::period(&r.period)?;
        self.runtime
            .set_timer(
                &actor,
                &r.name,
                due,
                period,
                convert::payload(r.payload),
                r.keep_alive,
            )
            .map_err(convert::status_of)?;
        Ok(Response::new(pb::SetTimerResponse {}))
    }

    async fn delete_timer(
        &self,
        request: Request<pb::TimerRef>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        let (headers, _, r) = request.into_parts();
        let actor = convert::actor_id(r.actor.clone())?;
        route_or_forward!(self, &actor, &headers, r, delete_timer);
        Ok(Response::new(pb::DeleteResponse {
            deleted: self.runtime.delete_timer(&actor, &r.name),
        }))
    }
}
