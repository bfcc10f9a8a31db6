//! Every per-actor request and its answer between the runtime's
//! [`ActorRequest`] / [`ActorResponse`] and the `ActorClient` messages, both
//! ways: the client API reads requests and writes answers, the forwarder
//! writes requests to the owner and reads its answers. A request forwarded
//! once is read back as the same request (tested below).

use std::collections::HashMap;
use std::time::Duration;

use tonic::Status;
use troupe_proto::v1 as pb;
use troupe_runtime::{
    ActorRequest, ActorResponse, AlarmSpec, Call, CallExtra, ReminderSpec, TimerSpec, TurnKind,
};

use troupe_runtime::input::{millis, range, UserDuration};

use super::events;
use super::reminders::{
    cron_schedule, cron_to_pb, missed, missed_to_pb, reminder_from_pb, reminder_to_pb, retry,
    retry_to_pb,
};
use super::time::{duration, format_duration, format_instant, instant, period};
use super::{actor_id, actor_ref, chain_to_pb, extra, payload, payload_to_pb};

/// An `ActorClient` request message, one variant per per-actor RPC.
#[derive(Debug, Clone, PartialEq)]
pub enum PbRequest {
    Invoke(pb::InvokeRequest),
    Tell(pb::TellRequest),
    GetState(pb::GetStateRequest),
    SetReminder(pb::SetReminderRequest),
    GetReminder(pb::ReminderRef),
    DeleteReminder(pb::ReminderRef),
    PauseReminder(pb::ReminderRef),
    ResumeReminder(pb::ReminderRef),
    SetAlarm(pb::SetAlarmRequest),
    GetAlarm(pb::AlarmRef),
    DeleteAlarm(pb::AlarmRef),
    SetTimer(pb::SetTimerRequest),
    DeleteTimer(pb::TimerRef),
    PollEvents(pb::PollEvents),
}

/// An `ActorClient` answer message.
#[derive(Debug, Clone, PartialEq)]
pub enum PbResponse {
    Invoke(pb::InvokeResponse),
    Tell(pb::TellResponse),
    State(pb::GetStateResponse),
    /// `None`: the reminder or alarm does not exist (NOT_FOUND on the wire).
    Reminder(Option<Box<pb::Reminder>>),
    Deleted(pb::DeleteResponse),
    Timer(pb::SetTimerResponse),
    Events(pb::PolledEvents),
}

/// Reads a request; `timeout` is the caller's deadline (calls carry it),
/// `now` the scheduling time that due times "from now" count from.
pub fn request_from_pb(
    request: PbRequest,
    timeout: Option<Duration>,
    now: u64,
) -> Result<ActorRequest, Status> {
    Ok(match request {
        PbRequest::Invoke(r) => ActorRequest::Invoke(call(
            r.actor,
            r.method,
            r.payload,
            extra(
                r.metadata,
                r.chain,
                r.idempotency_key,
                r.new_key,
                r.key_retention_ms,
            ),
            timeout,
        )?),
        PbRequest::Tell(r) => {
            let durable = r.delivery() == pb::Delivery::Durable;
            let delay = tell_delay(&r, now)?;
            let call = call(
                r.actor,
                r.method,
                r.payload,
                extra(
                    r.metadata,
                    r.chain,
                    r.idempotency_key,
                    r.new_key,
                    r.key_retention_ms,
                ),
                None,
            )?;
            if let Some(delay) = delay {
                ActorRequest::TellLater { call, delay }
            } else if durable {
                ActorRequest::TellDurable(call)
            } else {
                ActorRequest::Tell(call)
            }
        }
        PbRequest::GetState(r) => ActorRequest::GetState {
            actor: actor_id(r.actor)?,
            keys: r.keys,
        },
        PbRequest::SetReminder(r) => {
            let (every, from_iso) = period(&r.period)?;
            let until = if r.until.trim().is_empty() {
                None
            } else {
                Some(instant("until", &r.until, now)?.unix_ms())
            };
            let cron = cron_schedule(r.cron, r.time_zone)?;
            let jitter = if r.jitter.trim().is_empty() {
                None
            } else {
                Some(duration("jitter", &r.jitter, &range::POSITIVE)?.get())
            };
            ActorRequest::SetReminder(ReminderSpec {
                actor: actor_id(r.actor)?,
                name: r.name,
                due_unix_ms: instant("due", &r.due, now)?.unix_ms(),
                period: every.map(UserDuration::get),
                cron,
                jitter,
                repeat: (r.repeat > 0).then_some(r.repeat).or(from_iso),
                until_unix_ms: until,
                payload: payload(r.payload),
                retry: retry(r.retry),
                missed: missed(r.missed),
            })
        }
        PbRequest::GetReminder(r) => ActorRequest::GetReminder {
            actor: actor_id(r.actor)?,
            name: r.name,
        },
        PbRequest::DeleteReminder(r) => ActorRequest::DeleteReminder {
            actor: actor_id(r.actor)?,
            name: r.name,
        },
        PbRequest::PauseReminder(r) => ActorRequest::PauseReminder {
            actor: actor_id(r.actor)?,
            name: r.name,
        },
        PbRequest::ResumeReminder(r) => ActorRequest::ResumeReminder {
            actor: actor_id(r.actor)?,
            name: r.name,
        },
        PbRequest::SetAlarm(r) => ActorRequest::SetAlarm(AlarmSpec {
            actor: actor_id(r.actor)?,
            at_unix_ms: instant("at", &r.at, now)?.unix_ms(),
            payload: payload(r.payload),
            retry: retry(r.retry),
        }),
        PbRequest::GetAlarm(r) => ActorRequest::GetAlarm {
            actor: actor_id(r.actor)?,
        },
        PbRequest::DeleteAlarm(r) => ActorRequest::DeleteAlarm {
            actor: actor_id(r.actor)?,
        },
        PbRequest::SetTimer(r) => ActorRequest::SetTimer(TimerSpec {
            actor: actor_id(r.actor)?,
            name: r.name,
            due: if r.due.trim().is_empty() {
                Duration::ZERO
            } else {
                duration("due", &r.due, &range::ANY)?.get()
            },
            period: match period(&r.period)? {
                (every, None) => every.map(UserDuration::get),
                (_, Some(_)) => {
                    return Err(Status::invalid_argument(format!(
                        "timer period {} has a repetition count; a timer fires until it is \
                         deleted or its actor deactivates: give the period alone (e.g. \
                         \"PT1S\"), or use a reminder for a fixed number of firings",
                        troupe_runtime::validate::abridged(&r.period, 80)
                    )))
                }
            },
            payload: payload(r.payload),
            keep_alive: r.keep_alive,
        }),
        PbRequest::DeleteTimer(r) => ActorRequest::DeleteTimer {
            actor: actor_id(r.actor)?,
            name: r.name,
        },
        PbRequest::PollEvents(r) => events::poll_from_pb(r)?,
    })
}

/// How long a tell waits before it is delivered: `None` at once. A
/// `deliver_at` is read against `now`, the daemon's scheduling clock, and
/// one already past still waits (the least delay), so the caller gets the
/// stored tell's reminder as with any other time.
pub fn tell_delay(r: &pb::TellRequest, now: u64) -> Result<Option<Duration>, Status> {
    let at = r.deliver_at.trim();
    match (r.delay_ms, at.is_empty()) {
        (0, true) => Ok(None),
        (ms, true) => Ok(Some(Duration::from_millis(ms))),
        (0, false) => {
            let due = instant("deliver_at", at, now)?.unix_ms();
            let delay = Duration::from_millis(due.saturating_sub(now).max(1));
            UserDuration::new("deliver_at's time from now", delay, &range::POSITIVE)
                .map_err(super::errors::status_of)?;
            Ok(Some(delay))
        }
        (_, false) => Err(Status::invalid_argument(
            "a tell gives both delay_ms and deliver_at: give one, the delay from now or the \
             time to deliver it at",
        )),
    }
}

fn tell_to_pb(c: Call, delivery: pb::Delivery, delay: Option<Duration>) -> PbRequest {
    let p = call_parts(c);
    PbRequest::Tell(pb::TellRequest {
        actor: p.actor,
        method: p.method,
        payload: p.payload,
        metadata: p.metadata,
        chain: p.chain,
        delivery: delivery.into(),
        idempotency_key: p.idempotency_key,
        new_key: p.new_key,
        key_retention_ms: p.key_retention_ms,
        // The entry daemon read any time into this delay already.
        delay_ms: delay.map_or(0, millis),
        deliver_at: String::new(),
    })
}

/// Writes a request for another daemon. Deadlines, hop counts and trace
/// context travel in headers, not here.
pub fn request_to_pb(request: ActorRequest) -> PbRequest {
    match request {
        ActorRequest::Invoke(c) => {
            let p = call_parts(c);
            PbRequest::Invoke(pb::InvokeRequest {
                actor: p.actor,
                method: p.method,
                payload: p.payload,
                metadata: p.metadata,
                chain: p.chain,
                idempotency_key: p.idempotency_key,
                new_key: p.new_key,
                key_retention_ms: p.key_retention_ms,
            })
        }
        ActorRequest::Tell(c) => tell_to_pb(c, pb::Delivery::Unspecified, None),
        ActorRequest::TellDurable(c) => tell_to_pb(c, pb::Delivery::Durable, None),
        ActorRequest::TellLater { call, delay } => {
            tell_to_pb(call, pb::Delivery::Durable, Some(delay))
        }
        ActorRequest::GetState { actor, keys } => PbRequest::GetState(pb::GetStateRequest {
            actor: Some(actor_ref(&actor)),
            keys,
        }),
        ActorRequest::SetReminder(s) => {
            let (cron, time_zone) = cron_to_pb(s.cron);
            PbRequest::SetReminder(pb::SetReminderRequest {
                actor: Some(actor_ref(&s.actor)),
                name: s.name,
                due: format_instant(s.due_unix_ms),
                period: s.period.map(format_duration).unwrap_or_default(),
                repeat: s.repeat.unwrap_or(0),
                cron,
                time_zone,
                jitter: s.jitter.map(format_duration).unwrap_or_default(),
                until: s.until_unix_ms.map(format_instant).unwrap_or_default(),
                payload: Some(payload_to_pb(s.payload)),
                retry: Some(retry_to_pb(s.retry)),
                missed: missed_to_pb(s.missed),
            })
        }
        ActorRequest::GetReminder { actor, name } => PbRequest::GetReminder(pb::ReminderRef {
            actor: Some(actor_ref(&actor)),
            name,
        }),
        ActorRequest::DeleteReminder { actor, name } => {
            PbRequest::DeleteReminder(pb::ReminderRef {
                actor: Some(actor_ref(&actor)),
                name,
            })
        }
        ActorRequest::PauseReminder { actor, name } => PbRequest::PauseReminder(pb::ReminderRef {
            actor: Some(actor_ref(&actor)),
            name,
        }),
        ActorRequest::ResumeReminder { actor, name } => {
            PbRequest::ResumeReminder(pb::ReminderRef {
                actor: Some(actor_ref(&actor)),
                name,
            })
        }
        ActorRequest::SetAlarm(s) => PbRequest::SetAlarm(pb::SetAlarmRequest {
            actor: Some(actor_ref(&s.actor)),
            at: format_instant(s.at_unix_ms),
            payload: Some(payload_to_pb(s.payload)),
            retry: Some(retry_to_pb(s.retry)),
        }),
        ActorRequest::GetAlarm { actor } => PbRequest::GetAlarm(pb::AlarmRef {
            actor: Some(actor_ref(&actor)),
        }),
        ActorRequest::DeleteAlarm { actor } => PbRequest::DeleteAlarm(pb::AlarmRef {
            actor: Some(actor_ref(&actor)),
        }),
        ActorRequest::SetTimer(s) => PbRequest::SetTimer(pb::SetTimerRequest {
            actor: Some(actor_ref(&s.actor)),
            name: s.name,
            due: format_duration(s.due),
            period: s.period.map(format_duration).unwrap_or_default(),
            payload: Some(payload_to_pb(s.payload)),
            keep_alive: s.keep_alive,
        }),
        ActorRequest::DeleteTimer { actor, name } => PbRequest::DeleteTimer(pb::TimerRef {
            actor: Some(actor_ref(&actor)),
            name,
        }),
        ActorRequest::PollEvents { actor, after, wait } => {
            PbRequest::PollEvents(events::poll_to_pb(&actor, after, wait))
        }
    }
}

/// Writes an answer.
pub fn response_to_pb(response: ActorResponse) -> PbResponse {
    match response {
        ActorResponse::Payload(p) => PbResponse::Invoke(pb::InvokeResponse {
            payload: Some(payload_to_pb(p)),
        }),
        ActorResponse::Accepted => PbResponse::Tell(pb::TellResponse::default()),
        // The reminder's name is the entry daemon's to say (it made the key).
        ActorResponse::TellScheduled { due_unix_ms } => PbResponse::Tell(pb::TellResponse {
            reminder: String::new(),
            due_unix_ms,
        }),
        ActorResponse::State {
            entries,
            active,
            expires,
        } => PbResponse::State(pb::GetStateResponse {
            entries: entries.into_iter().collect(),
            active,
            expires_unix_ms: expires.into_vec().into_iter().collect(),
        }),
        ActorResponse::Reminder(info) => {
            PbResponse::Reminder(info.map(|info| Box::new(reminder_to_pb(*info))))
        }
        ActorResponse::Deleted(deleted) => PbResponse::Deleted(pb::DeleteResponse { deleted }),
        ActorResponse::Events(polled) => PbResponse::Events(events::polled_to_pb(*polled)),
    }
}

/// Reads another daemon's answer.
pub fn response_from_pb(response: PbResponse) -> ActorResponse {
    match response {
        PbResponse::Invoke(r) => ActorResponse::Payload(payload(r.payload)),
        PbResponse::Tell(r) if r.due_unix_ms > 0 => ActorResponse::TellScheduled {
            due_unix_ms: r.due_unix_ms,
        },
        PbResponse::Tell(_) | PbResponse::Timer(_) => ActorResponse::Accepted,
        PbResponse::State(r) => {
            let mut entries: Vec<_> = r.entries.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            let mut expires: Vec<_> = r.expires_unix_ms.into_iter().collect();
            expires.sort_by(|a, b| a.0.cmp(&b.0));
            ActorResponse::State {
                entries,
                active: r.active,
                expires: expires.into_boxed_slice(),
            }
        }
        PbResponse::Reminder(r) => {
            ActorResponse::Reminder(r.map(|r| Box::new(reminder_from_pb(*r))))
        }
        PbResponse::Deleted(r) => ActorResponse::Deleted(r.deleted),
        PbResponse::Events(r) => ActorResponse::Events(Box::new(events::polled_from_pb(r))),
    }
}

fn call(
    actor: Option<pb::ActorRef>,
    method: String,
    body: Option<pb::Payload>,
    extra: Option<Box<CallExtra>>,
    timeout: Option<Duration>,
) -> Result<Call, Status> {
    Ok(Call {
        actor: actor_id(actor)?,
        kind: TurnKind::Call,
        method: method.into(),
        payload: payload(body),
        extra,
        timeout,
    })
}

/// A call's fields as an `InvokeRequest` or a `TellRequest` carries them.
struct CallParts {
    actor: Option<pb::ActorRef>,
    method: String,
    payload: Option<pb::Payload>,
    metadata: HashMap<String, String>,
    chain: Option<pb::CallChain>,
    idempotency_key: String,
    new_key: bool,
    key_retention_ms: u64,
}

fn call_parts(call: Call) -> CallParts {
    let extra = call.extra.map(|e| *e).unwrap_or_default();
    CallParts {
        actor: Some(actor_ref(&call.actor)),
        method: call.method.to_string(),
        payload: Some(payload_to_pb(call.payload)),
        metadata: extra.metadata.into_iter().collect(),
        chain: extra.chain.as_ref().map(chain_to_pb),
        idempotency_key: extra.idempotency_key.map(String::from).unwrap_or_default(),
        new_key: extra.new_key,
        key_retention_ms: extra.key_retention.map_or(0, millis),
    }
}
#[cfg(test)]
mod tests;
