//! `troupe.v1.ActorClient`: invoke, tell, state reads, reminders, alarms and
//! timers for any caller.
//!
//! Each RPC becomes one [`ActorRequest`] for the runtime, which answers it
//! here or forwards it to the actor's owner (one path for all of them, in
//! the runtime's `routing`); this module only reads requests, writes
//! answers and opens the call span of Invoke and Tell. Watch, a stream of
//! such requests, is in `watch`; WatchType, which polls every daemon that
//! hosts the type, in `watch_type`.

use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};
use troupe_proto::v1 as pb;
use troupe_runtime::{ActorId, ActorRequest, Call, CallTrace, RequestContext, Runtime};
use troupe_transport::{TRACEPARENT_HEADER, TRACESTATE_HEADER};

use crate::call_deadline;
use crate::convert::errors::status_of;
use crate::convert::requests::{
    request_from_pb, response_to_pb, tell_delay, PbRequest, PbResponse,
};
use crate::convert::{self, paging};
use crate::telemetry;

/// Marks a request as forwarded by another daemon over an authenticated
/// link (`link_api` puts it in the request's extensions, which no caller
/// can set): its call chain was checked by the daemon the call entered.
#[derive(Debug, Clone, Copy)]
pub struct FromPeer;

mod watch;
mod watch_type;

#[derive(Debug, Clone)]
pub struct ClientApi {
    runtime: Runtime,
    watches: std::sync::Arc<tokio::sync::Semaphore>,
}

impl ClientApi {
    pub fn new(runtime: Runtime) -> Self {
        Self {
            runtime,
            watches: watch::watch_permits(),
        }
    }

    /// Answers a request that is not a call: here or at the actor's owner.
    async fn answer(
        &self,
        headers: &MetadataMap,
        extensions: &tonic::Extensions,
        request: PbRequest,
    ) -> Result<PbResponse, Status> {
        let context = RequestContext {
            timeout: call_deadline::answer_within(headers, extensions),
            hops: troupe_transport::forwarded_hops(headers),
            traceparent: header(headers, TRACEPARENT_HEADER),
            tracestate: header(headers, TRACESTATE_HEADER),
        };
        let now = self.runtime.schedule_now_ms();
        let request = request_from_pb(request, context.timeout, now)?;
        let answer = self
            .runtime
            .request(request, context)
            .await
            .map_err(status_of)?;
        Ok(response_to_pb(answer))
    }

    /// A tell to deliver later (`delay` from now): stored at once (as a
    /// reminder of the actor), so it is never best effort.
    async fn tell_later(
        &self,
        headers: MetadataMap,
        extensions: tonic::Extensions,
        r: pb::TellRequest,
        delay: std::time::Duration,
    ) -> Result<Response<pb::TellResponse>, Status> {
        if r.delivery() == pb::Delivery::BestEffort {
            return Err(Status::invalid_argument(
                "a delayed tell (delay_ms or deliver_at) is stored until it is due, so it \
                 cannot be best effort; send it with delivery DELIVERY_DURABLE or unset",
            ));
        }
        // Its time is read (into `delay`, against the daemon's clock); the
        // call is what is left.
        let r = pb::TellRequest {
            delay_ms: 0,
            deliver_at: String::new(),
            ..r
        };
        let call = call(PbRequest::Tell(r), &headers, &extensions)?;
        let traced = telemetry::incoming_call(&headers, "Tell", &call.actor, &call.method);
        let result = self
            .runtime
            .tell_later(call, delay)
            .await
            .map_err(status_of)
            .map(|stored| {
                Response::new(pb::TellResponse {
                    reminder: stored.reminder,
                    due_unix_ms: stored.due_unix_ms,
                })
            });
        traced.finish(&result);
        result
    }
}

fn header(headers: &MetadataMap, name: &str) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// The answer of another kind than the RPC's: a bug, not the caller's.
fn mismatch(answer: PbResponse) -> Status {
    Status::internal(format!("the runtime answered with {answer:?}"))
}

/// Reads a call; records its hop count, so the runtime stops forwarding it
/// past its limit, and whether a peer forwarded it, so its chain is not
/// checked again (the daemon it entered did; the token is that daemon's).
fn call(
    request: PbRequest,
    headers: &MetadataMap,
    extensions: &tonic::Extensions,
) -> Result<Call, Status> {
    let timeout = call_deadline::answer_within(headers, extensions);
    // A call carries no times to read, so no scheduling "now" is needed.
    let mut call = match request_from_pb(request, timeout, 0)? {
        ActorRequest::Invoke(call)
        | ActorRequest::Tell(call)
        | ActorRequest::TellDurable(call)
        | ActorRequest::TellLater { call, .. } => call,
        other => return Err(Status::internal(format!("not a call: {other:?}"))),
    };
    let hops = troupe_transport::forwarded_hops(headers);
    if hops > 0 {
        call.extra.get_or_insert_with(Default::default).hops = hops;
    }
    if let Some(extra) = call.extra.as_mut() {
        // The hop header is a caller's to set; only the link sets this.
        extra.chain_from_peer = extensions.get::<FromPeer>().is_some();
    }
    Ok(call)
}

/// Sends the call's trace with it; untraced calls keep `extra` unallocated.
/// A reminder the owner found, or NOT_FOUND naming what was asked for.
fn reminder_found(
    found: Option<Box<pb::Reminder>>,
    actor: Option<pb::ActorRef>,
    name: &str,
) -> Result<Response<pb::Reminder>, Status> {
    match found {
        Some(reminder) => Ok(Response::new(*reminder)),
        None => Err(Status::not_found(format!(
            "actor {} has no reminder {name:?}; `troupe reminders list` shows the ones it has",
            convert::actor_id(actor)?
        ))),
    }
}

fn attach(call: &mut Call, trace: Option<CallTrace>) {
    if let Some(trace) = trace {
        call.extra.get_or_insert_with(Default::default).trace = Some(trace);
    }
}

/// Answers one RPC that is not a call, expecting its own kind of answer.
macro_rules! answer {
    ($self:ident, $request:ident, $variant:ident, $answer:ident) => {{
        let (headers, extensions, r) = $request.into_parts();
        match $self
            .answer(&headers, &extensions, PbRequest::$variant(r))
            .await?
        {
            PbResponse::$answer(answer) => Ok(Response::new(answer)),
            other => Err(mismatch(other)),
        }
    }};
}

/// The answer to a request about one named reminder: the reminder, or
/// NOT_FOUND naming what was asked for.
macro_rules! named_reminder {
    ($self:ident, $request:ident, $variant:ident) => {{
        let (actor, name) = (
            $request.get_ref().actor.clone(),
            $request.get_ref().name.clone(),
        );
        let found = answer!($self, $request, $variant, Reminder)?.into_inner();
        reminder_found(found, actor, &name)
    }};
}

#[tonic::async_trait]
impl pb::actor_client_server::ActorClient for ClientApi {
    async fn invoke(
        &self,
        request: Request<pb::InvokeRequest>,
    ) -> Result<Response<pb::InvokeResponse>, Status> {
        let (headers, extensions, r) = request.into_parts();
        let mut call = call(PbRequest::Invoke(r), &headers, &extensions)?;
        let mut traced = telemetry::incoming_call(&headers, "Invoke", &call.actor, &call.method);
        attach(&mut call, traced.take_trace());
        let crash_point = crate::failpoint::armed().then(|| call.method.clone());
        let result = self
            .runtime
            .invoke(call)
            .await
            .map_err(status_of)
            .map(|payload| {
                if let Some(method) = &crash_point {
                    crate::failpoint::abort_before_reply(method);
                }
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
        let (headers, extensions, r) = request.into_parts();
        if let Some(delay) = tell_delay(&r, self.runtime.schedule_now_ms())? {
            return self.tell_later(headers, extensions, r, delay).await;
        }
        // Unset: the type's default, where this daemon hosts the type; one
        // that does not forwards the tell to its owner, which applies it,
        // and answers once the owner has (stored it, if durable).
        let (durable, owner_decides) = match r.delivery() {
            pb::Delivery::Durable => (true, false),
            pb::Delivery::BestEffort => (false, false),
            pb::Delivery::Unspecified => match r
                .actor
                .as_ref()
                .and_then(|a| self.runtime.durable_tells_by_default(&a.r#type))
            {
                Some(durable) => (durable, false),
                None => (false, true),
            },
        };
        let mut call = call(PbRequest::Tell(r), &headers, &extensions)?;
        let mut traced = telemetry::incoming_call(&headers, "Tell", &call.actor, &call.method);
        attach(&mut call, traced.take_trace());
        // A tell ends when the call is queued (durable: stored in the
        // actor's inbox); its turn runs later, still a child of this span.
        let result = if durable {
            self.runtime.tell_durable(call).await
        } else if owner_decides {
            self.runtime.tell_with_owner_default(call).await
        } else {
            self.runtime.tell(call)
        }
        .map_err(status_of)
        .map(|()| Response::new(pb::TellResponse::default()));
        traced.finish(&result);
        result
    }

    async fn get_state(
        &self,
        request: Request<pb::GetStateRequest>,
    ) -> Result<Response<pb::GetStateResponse>, Status> {
        answer!(self, request, GetState, State)
    }

    type WatchStream = watch::WatchStream;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        self.open_watch(request).await
    }

    type WatchTypeStream = watch_type::WatchTypeStream;

    async fn watch_type(
        &self,
        request: Request<pb::WatchTypeRequest>,
    ) -> Result<Response<Self::WatchTypeStream>, Status> {
        self.open_type_watch(request).await
    }

    async fn set_reminder(
        &self,
        request: Request<pb::SetReminderRequest>,
    ) -> Result<Response<pb::Reminder>, Status> {
        match answer!(self, request, SetReminder, Reminder)?.into_inner() {
            Some(reminder) => Ok(Response::new(*reminder)),
            None => Err(Status::internal("a set reminder was not returned")),
        }
    }

    async fn get_reminder(
        &self,
        request: Request<pb::ReminderRef>,
    ) -> Result<Response<pb::Reminder>, Status> {
        named_reminder!(self, request, GetReminder)
    }

    async fn pause_reminder(
        &self,
        request: Request<pb::ReminderRef>,
    ) -> Result<Response<pb::Reminder>, Status> {
        named_reminder!(self, request, PauseReminder)
    }

    async fn resume_reminder(
        &self,
        request: Request<pb::ReminderRef>,
    ) -> Result<Response<pb::Reminder>, Status> {
        named_reminder!(self, request, ResumeReminder)
    }

    async fn delete_reminder(
        &self,
        request: Request<pb::ReminderRef>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        answer!(self, request, DeleteReminder, Deleted)
    }

    async fn list_reminders(
        &self,
        request: Request<pb::ListRemindersRequest>,
    ) -> Result<Response<pb::ListRemindersResponse>, Status> {
        let r = request.into_inner();
        let size = paging::page_size(r.page_size);
        let after = paging::parse_page_token::<3>(&r.page_token)?
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
            .map_err(status_of)?;
        let next_page_token = if reminders.len() > size {
            reminders.truncate(size);
            reminders
                .last()
                .map(|r| paging::page_token(&[&r.actor.ty, &r.actor.id, &r.name]))
                .unwrap_or_default()
        } else {
            String::new()
        };
        Ok(Response::new(pb::ListRemindersResponse {
            reminders: reminders
                .into_iter()
                .map(convert::reminders::reminder_to_pb)
                .collect(),
            next_page_token,
        }))
    }

    async fn set_alarm(
        &self,
        request: Request<pb::SetAlarmRequest>,
    ) -> Result<Response<pb::Reminder>, Status> {
        match answer!(self, request, SetAlarm, Reminder)?.into_inner() {
            Some(alarm) => Ok(Response::new(*alarm)),
            None => Err(Status::internal("a set alarm was not returned")),
        }
    }

    async fn get_alarm(
        &self,
        request: Request<pb::AlarmRef>,
    ) -> Result<Response<pb::Reminder>, Status> {
        let actor = request.get_ref().actor.clone();
        match answer!(self, request, GetAlarm, Reminder)?.into_inner() {
            Some(alarm) => Ok(Response::new(*alarm)),
            None => Err(Status::not_found(format!(
                "actor {} has no alarm",
                convert::actor_id(actor)?
            ))),
        }
    }

    async fn delete_alarm(
        &self,
        request: Request<pb::AlarmRef>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        answer!(self, request, DeleteAlarm, Deleted)
    }

    async fn set_timer(
        &self,
        request: Request<pb::SetTimerRequest>,
    ) -> Result<Response<pb::SetTimerResponse>, Status> {
        answer!(self, request, SetTimer, Tell).map(|_| Response::new(pb::SetTimerResponse {}))
    }

    async fn delete_timer(
        &self,
        request: Request<pb::TimerRef>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        answer!(self, request, DeleteTimer, Deleted)
    }
}
