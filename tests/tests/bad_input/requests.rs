//! The RPC enum, how a case sends it, and the valid requests the cases
//! make bad one field at a time.

use bytes::Bytes;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::Status;
use troupe_tests::*;

use crate::FAR;

type ClientStub = pb::actor_client_client::ActorClientClient<Channel>;
pub type AdminStub = pb::admin_client::AdminClient<Channel>;

/// One request to any RPC of `ActorClient` or `Admin`, or raw bytes to one.
#[derive(Debug, Clone)]
pub enum Req {
    Invoke(pb::InvokeRequest),
    Tell(pb::TellRequest),
    GetState(pb::GetStateRequest),
    SetReminder(pb::SetReminderRequest),
    GetReminder(pb::ReminderRef),
    DeleteReminder(pb::ReminderRef),
    PauseReminder(pb::ReminderRef),
    ResumeReminder(pb::ReminderRef),
    ListReminders(pb::ListRemindersRequest),
    SetAlarm(pb::SetAlarmRequest),
    GetAlarm(pb::AlarmRef),
    DeleteAlarm(pb::AlarmRef),
    SetTimer(pb::SetTimerRequest),
    DeleteTimer(pb::TimerRef),
    Status,
    ListActors(pb::ListActorsRequest),
    DescribeActor(pb::DescribeActorRequest),
    ListStoredActors(pb::ListStoredActorsRequest),
    DeactivateActor(pb::DeactivateActorRequest),
    EditActorState(pb::EditActorStateRequest),
    /// Bytes that do not decode as the RPC's request, sent to `path`.
    Raw(&'static str, Bytes),
}

impl Req {
    pub fn rpc(&self) -> &'static str {
        match self {
            Req::Invoke(_) => "Invoke",
            Req::Tell(_) => "Tell",
            Req::GetState(_) => "GetState",
            Req::SetReminder(_) => "SetReminder",
            Req::GetReminder(_) => "GetReminder",
            Req::DeleteReminder(_) => "DeleteReminder",
            Req::PauseReminder(_) => "PauseReminder",
            Req::ResumeReminder(_) => "ResumeReminder",
            Req::ListReminders(_) => "ListReminders",
            Req::SetAlarm(_) => "SetAlarm",
            Req::GetAlarm(_) => "GetAlarm",
            Req::DeleteAlarm(_) => "DeleteAlarm",
            Req::SetTimer(_) => "SetTimer",
            Req::DeleteTimer(_) => "DeleteTimer",
            Req::Status => "Status",
            Req::ListActors(_) => "ListActors",
            Req::DescribeActor(_) => "DescribeActor",
            Req::ListStoredActors(_) => "ListStoredActors",
            Req::DeactivateActor(_) => "DeactivateActor",
            Req::EditActorState(_) => "EditActorState",
            Req::Raw(path, _) => path.rsplit('/').next().unwrap_or(path),
        }
    }

    /// The request's actor, for the RPCs that name one.
    fn actor_mut(&mut self) -> Option<&mut Option<pb::ActorRef>> {
        Some(match self {
            Req::Invoke(r) => &mut r.actor,
            Req::Tell(r) => &mut r.actor,
            Req::GetState(r) => &mut r.actor,
            Req::SetReminder(r) => &mut r.actor,
            Req::GetReminder(r)
            | Req::DeleteReminder(r)
            | Req::PauseReminder(r)
            | Req::ResumeReminder(r) => &mut r.actor,
            Req::SetAlarm(r) => &mut r.actor,
            Req::GetAlarm(r) | Req::DeleteAlarm(r) => &mut r.actor,
            Req::SetTimer(r) => &mut r.actor,
            Req::DeleteTimer(r) => &mut r.actor,
            Req::DescribeActor(r) => &mut r.actor,
            Req::DeactivateActor(r) => &mut r.actor,
            Req::EditActorState(r) => &mut r.actor,
            Req::Status
            | Req::ListReminders(_)
            | Req::ListActors(_)
            | Req::ListStoredActors(_)
            | Req::Raw(..) => return None,
        })
    }

    pub fn with_actor(mut self, actor: Option<pb::ActorRef>) -> Req {
        if let Some(slot) = self.actor_mut() {
            *slot = actor;
        }
        self
    }

    /// Sends it, with `grpc_timeout` as that header if set; the answer shown
    /// short, or the status.
    pub async fn send(self, apis: &mut Apis, grpc_timeout: Option<&str>) -> Result<String, Status> {
        fn request<T>(message: T, grpc_timeout: Option<&str>) -> Result<tonic::Request<T>, Status> {
            let mut request = tonic::Request::new(message);
            if let Some(value) = grpc_timeout {
                let value = MetadataValue::try_from(value)
                    .map_err(|e| Status::internal(format!("test: header {value:?}: {e}")))?;
                request.metadata_mut().insert("grpc-timeout", value);
            }
            Ok(request)
        }
        fn short(answer: impl std::fmt::Debug) -> String {
            let text = format!("{answer:?}");
            text.chars().take(200).collect()
        }
        let t = grpc_timeout;
        let (c, a) = (&mut apis.client, &mut apis.admin);
        Ok(match self {
            Req::Invoke(m) => short(c.invoke(request(m, t)?).await?),
            Req::Tell(m) => short(c.tell(request(m, t)?).await?),
            Req::GetState(m) => short(c.get_state(request(m, t)?).await?),
            Req::SetReminder(m) => short(c.set_reminder(request(m, t)?).await?),
            Req::GetReminder(m) => short(c.get_reminder(request(m, t)?).await?),
            Req::DeleteReminder(m) => short(c.delete_reminder(request(m, t)?).await?),
            Req::PauseReminder(m) => short(c.pause_reminder(request(m, t)?).await?),
            Req::ResumeReminder(m) => short(c.resume_reminder(request(m, t)?).await?),
            Req::ListReminders(m) => short(c.list_reminders(request(m, t)?).await?),
            Req::SetAlarm(m) => short(c.set_alarm(request(m, t)?).await?),
            Req::GetAlarm(m) => short(c.get_alarm(request(m, t)?).await?),
            Req::DeleteAlarm(m) => short(c.delete_alarm(request(m, t)?).await?),
            Req::SetTimer(m) => short(c.set_timer(request(m, t)?).await?),
            Req::DeleteTimer(m) => short(c.delete_timer(request(m, t)?).await?),
            Req::Status => short(a.status(request(pb::StatusRequest {}, t)?).await?),
            Req::ListActors(m) => short(a.list_actors(request(m, t)?).await?),
            Req::DescribeActor(m) => short(a.describe_actor(request(m, t)?).await?),
            Req::ListStoredActors(m) => short(a.list_stored_actors(request(m, t)?).await?),
            Req::DeactivateActor(m) => short(a.deactivate_actor(request(m, t)?).await?),
            Req::EditActorState(m) => short(a.edit_actor_state(request(m, t)?).await?),
            Req::Raw(path, bytes) => {
                let raw = &mut apis.raw;
                raw.ready()
                    .await
                    .map_err(|e| Status::unavailable(e.to_string()))?;
                let answer = raw
                    .unary(
                        request(bytes, t)?,
                        PathAndQuery::from_static(path),
                        RawCodec,
                    )
                    .await?;
                short(answer.into_inner())
            }
        })
    }
}

#[derive(Debug)]
pub struct Apis {
    pub client: ClientStub,
    pub admin: AdminStub,
    pub raw: tonic::client::Grpc<Channel>,
}

impl Apis {
    pub async fn connect(daemon: &Daemon) -> anyhow::Result<Apis> {
        Ok(Apis {
            client: daemon.client().await?.0,
            admin: daemon.admin().await?,
            raw: tonic::client::Grpc::new(daemon.channel().await?),
        })
    }
}

// ---- valid requests ----

pub fn keep() -> Option<pb::ActorRef> {
    Some(actor("counter", "keep"))
}

/// An active actor with no state the cases may change.
pub fn scratch() -> Option<pb::ActorRef> {
    Some(actor("counter", "scratch"))
}

pub fn payload(len: usize) -> Option<pb::Payload> {
    let mut data = b"{}".to_vec();
    data.resize(len.max(2), b' ');
    Some(json_payload(data))
}

pub fn invoke() -> pb::InvokeRequest {
    pb::InvokeRequest {
        actor: keep(),
        method: "get".into(),
        payload: payload(2),
        ..Default::default()
    }
}

/// The valid Invoke request, changed by `edit`.
pub fn invoke_with(edit: impl FnOnce(&mut pb::InvokeRequest)) -> pb::InvokeRequest {
    let mut request = invoke();
    edit(&mut request);
    request
}

pub fn tell_of(r: pb::InvokeRequest) -> pb::TellRequest {
    pb::TellRequest {
        actor: r.actor,
        method: r.method,
        payload: r.payload,
        metadata: r.metadata,
        chain: r.chain,
        delivery: 0,
        idempotency_key: r.idempotency_key,
        new_key: r.new_key,
        key_retention_ms: r.key_retention_ms,
        delay_ms: 0,
        deliver_at: String::new(),
    }
}

/// `tell_of(r)` delivered an hour later (a delayed tell).
pub fn delayed_tell_of(r: pb::InvokeRequest) -> pb::TellRequest {
    pb::TellRequest {
        delay_ms: 3_600_000,
        ..tell_of(r)
    }
}

pub fn get_state() -> pb::GetStateRequest {
    pb::GetStateRequest {
        actor: keep(),
        keys: vec!["count".into()],
    }
}

pub fn set_reminder() -> pb::SetReminderRequest {
    pb::SetReminderRequest {
        actor: keep(),
        name: "keep".into(),
        due: FAR.into(),
        period: "1h".into(),
        payload: payload(2),
        ..Default::default()
    }
}

pub fn reminder_ref(name: &str) -> pb::ReminderRef {
    pb::ReminderRef {
        actor: keep(),
        name: name.into(),
    }
}

pub fn set_alarm() -> pb::SetAlarmRequest {
    pb::SetAlarmRequest {
        actor: keep(),
        at: FAR.into(),
        payload: payload(2),
        retry: None,
    }
}

pub fn set_timer() -> pb::SetTimerRequest {
    pb::SetTimerRequest {
        actor: keep(),
        name: "tick".into(),
        due: FAR.into(),
        payload: payload(2),
        ..Default::default()
    }
}

pub fn timer_ref(name: &str) -> pb::TimerRef {
    pb::TimerRef {
        actor: keep(),
        name: name.into(),
    }
}

/// One valid request for every RPC that names an actor, in an order in
/// which each works on a fresh actor (set before get, delete, deactivate).
pub fn per_actor() -> Vec<Req> {
    vec![
        Req::Invoke(invoke()),
        Req::Tell(tell_of(invoke())),
        Req::GetState(get_state()),
        Req::SetReminder(set_reminder()),
        Req::GetReminder(reminder_ref("keep")),
        Req::PauseReminder(reminder_ref("keep")),
        Req::ResumeReminder(reminder_ref("keep")),
        Req::DeleteReminder(reminder_ref("keep")),
        Req::SetAlarm(set_alarm()),
        Req::GetAlarm(pb::AlarmRef { actor: keep() }),
        Req::DeleteAlarm(pb::AlarmRef { actor: keep() }),
        Req::SetTimer(set_timer()),
        Req::DeleteTimer(timer_ref("tick")),
        Req::DescribeActor(pb::DescribeActorRequest { actor: keep() }),
        Req::EditActorState(edit_state(vec![delete_key("probe")])),
        Req::DeactivateActor(pb::DeactivateActorRequest { actor: keep() }),
    ]
}

/// An edit of `keep`'s state; deleting a key it lacks changes nothing
/// (the matrix checks that what is stored stays).
pub fn edit_state(changes: Vec<pb::StateChange>) -> pb::EditActorStateRequest {
    pb::EditActorStateRequest {
        actor: keep(),
        changes,
        expect: Vec::new(),
    }
}

pub fn delete_key(key: &str) -> pb::StateChange {
    pb::StateChange {
        ttl_ms: None,
        key: key.into(),
        op: Some(pb::state_change::Op::Delete(true)),
    }
}
