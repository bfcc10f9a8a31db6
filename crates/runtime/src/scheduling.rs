//! The runtime's side of reminders, alarms and timers: the API that sets
//! and reads them, and the reminders' and alarms' firings that run as turns
//! through the normal call path (timers' turns: `timer_turns`). The
//! machinery (due-time queue, writer, timer table) is in `schedule`, which
//! knows nothing of activations: it hands due firings over a channel and is
//! told how they went.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use troupe_storage::ReminderKey;

use crate::delayed_tell::TELL_PREFIX;
use crate::error::CallError;
use crate::expiry::EXPIRE_NAME;
use crate::forwarding::{ActorRequest, ActorResponse, RequestContext};
use crate::mailbox::Envelope;
use crate::metrics::Scheduled;
use crate::reply::{wait_reply, FiringReply, Reply};
use crate::retention::{RetainFiring, RETAIN_NAME};
use crate::runtime::Runtime;
use crate::schedule::timers::TimerSpec;
use crate::schedule::{AlarmSpec, Due, Fired, ReminderInfo, ReminderSpec, ALARM_NAME};
use crate::shared::Shared;
use crate::shutdown::Stage;
use crate::types::{ActorId, Call, CallExtra, CallTrace, TurnKind, TRACE_TARGET};
use crate::validate;

/// The method an alarm's turn carries.
const ALARM_METHOD: &str = "alarm";

impl Shared {
    /// Runs the reminders and alarms the scheduler hands over as turns,
    /// through the normal call path, until the drain begins. A firing still
    /// waiting for its turn when the runtime stops is given up unrecorded, so
    /// it fires again after the restart.
    pub(crate) async fn fire_due(self: Arc<Self>, mut due: mpsc::UnboundedReceiver<Due>) {
        let draining = self.shutdown.reached(Stage::Draining);
        tokio::pin!(draining);
        loop {
            let firing = tokio::select! {
                firing = due.recv() => firing,
                () = &mut draining => None,
            };
            let Some(firing) = firing else {
                return;
            };
            let shared = self.clone();
            self.shutdown.spawn(async move {
                let fired = tokio::select! {
                    fired = shared.fire(&firing) => fired,
                    () = shared.shutdown.reached(Stage::Stopping) => return,
                };
                shared.scheduler.finish(firing, fired).await;
            });
        }
    }

    async fn fire(self: &Arc<Self>, firing: &Due) -> Fired {
        let actor = &firing.actor;
        if !self.owns(actor) {
            // Another daemon owns the actor (or it is moving): that daemon's
            // scheduler fires it.
            return Fired::NotOwned;
        }
        if firing.superseded() {
            return Fired::Superseded;
        }
        if let Some(tell) = firing.tell() {
            return self.store_due_tell(firing, tell).await;
        }
        if firing.name == EXPIRE_NAME {
            return self.fire_expiry(firing).await;
        }
        if firing.name == RETAIN_NAME {
            return match self.fire_retention(firing).await {
                RetainFiring::Done(fired) => fired,
                RetainFiring::Erase { retention } => self.erase_expired(firing, retention).await,
            };
        }
        let (kind, method) = if firing.alarm {
            (TurnKind::Alarm, ALARM_METHOD.to_owned())
        } else {
            (TurnKind::Reminder, firing.name.clone())
        };
        // A firing starts its own trace; its turn is the child.
        let span = tracing::info_span!(
            target: TRACE_TARGET,
            parent: None,
            "troupe.reminder",
            troupe.actor.r#type = %actor.ty,
            troupe.actor.id = %actor.id,
            troupe.reminder.name = %method,
            troupe.turn.kind = kind.as_str(),
            otel.status_code = tracing::field::Empty,
            error = tracing::field::Empty,
        );
        let extra = (!span.is_disabled()).then(|| {
            Box::new(CallExtra {
                trace: Some(CallTrace {
                    span: span.clone(),
                    traceparent: String::new(),
                    tracestate: String::new(),
                }),
                ..CallExtra::default()
            })
        });
        let call = Call {
            kind,
            extra,
            ..Call::new(actor.clone(), method, firing.payload.clone())
        };
        let (tx, rx) = oneshot::channel();
        let reply = Reply::Firing(Box::new(FiringReply {
            to: tx,
            superseded: firing.superseded_token(),
            due_unix_ms: firing.due_unix_ms(),
        }));
        let result = match self.enqueue(call, reply) {
            Ok(()) => wait_reply(actor, self.config.call_timeout, rx).await,
            Err(e) => {
                self.count_failed(&actor.ty, kind, &e);
                Err(e)
            }
        };
        match result {
            Ok(_) => {
                if let Some(metrics) = &self.metrics {
                    metrics.fired(&actor.ty, Scheduled::firing(firing.alarm));
                }
                Fired::Ran
            }
            Err(e) => {
                let fired = Fired::after_error(firing, e);
                if let Fired::Failed(e) = &fired {
                    span.record("otel.status_code", "ERROR");
                    span.record("error", tracing::field::display(e));
                }
                fired
            }
        }
    }
}

fn reminder_key(actor: &ActorId, name: &str) -> ReminderKey {
    ReminderKey {
        actor_type: actor.ty.to_string(),
        actor_id: actor.id.to_string(),
        name: name.to_owned(),
    }
}

/// A name a caller may set a reminder under: '$' names are the daemon's.
fn check_reminder_name(name: &str) -> Result<(), CallError> {
    validate::name("reminder name", name)?;
    if name.starts_with('$') {
        return Err(CallError::InvalidArgument(format!(
            "reminder name {name:?} starts with '$', which is reserved; pick another name"
        )));
    }
    Ok(())
}

/// A name a caller may read, delete, pause or resume a reminder by: one it
/// could set, a delayed tell's (its key may fill a name's whole length), or
/// the retention's (pausing it keeps the actor, as a legal hold would), or
/// the expiry's (pausing it keeps an idle actor's expired keys stored).
fn check_reminder_ref(name: &str) -> Result<(), CallError> {
    if name == RETAIN_NAME || name == EXPIRE_NAME {
        return Ok(());
    }
    match name.strip_prefix(TELL_PREFIX) {
        Some(key) => validate::name("the delayed tell's idempotency key", key),
        None => check_reminder_name(name),
    }
}

impl Runtime {
    /// Stores (or replaces) a reminder; it fires even if the actor is inactive.
    pub async fn set_reminder(&self, spec: ReminderSpec) -> Result<ReminderInfo, CallError> {
        self.reminder(ActorRequest::SetReminder(spec))
            .await?
            .ok_or_else(|| CallError::Internal("a set reminder was not returned".into()))
    }

    pub async fn get_reminder(
        &self,
        actor: &ActorId,
        name: &str,
    ) -> Result<Option<ReminderInfo>, CallError> {
        self.reminder(ActorRequest::GetReminder {
            actor: actor.clone(),
            name: name.to_owned(),
        })
        .await
    }

    pub async fn delete_reminder(&self, actor: &ActorId, name: &str) -> Result<bool, CallError> {
        self.deleted(ActorRequest::DeleteReminder {
            actor: actor.clone(),
            name: name.to_owned(),
        })
        .await
    }

    /// Holds a reminder's firings, keeping its schedule, until it is
    /// resumed; `None` if there is no such reminder.
    pub async fn pause_reminder(
        &self,
        actor: &ActorId,
        name: &str,
    ) -> Result<Option<ReminderInfo>, CallError> {
        self.reminder(ActorRequest::PauseReminder {
            actor: actor.clone(),
            name: name.to_owned(),
        })
        .await
    }

    /// Lets a paused reminder fire again, from the time it was due: past
    /// that, its missed-firings rule applies. `None` if there is none.
    pub async fn resume_reminder(
        &self,
        actor: &ActorId,
        name: &str,
    ) -> Result<Option<ReminderInfo>, CallError> {
        self.reminder(ActorRequest::ResumeReminder {
            actor: actor.clone(),
            name: name.to_owned(),
        })
        .await
    }

    /// Sets the actor's alarm (replacing any).
    pub async fn set_alarm(&self, spec: AlarmSpec) -> Result<ReminderInfo, CallError> {
        self.reminder(ActorRequest::SetAlarm(spec))
            .await?
            .ok_or_else(|| CallError::Internal("a set alarm was not returned".into()))
    }

    pub async fn get_alarm(&self, actor: &ActorId) -> Result<Option<ReminderInfo>, CallError> {
        self.reminder(ActorRequest::GetAlarm {
            actor: actor.clone(),
        })
        .await
    }

    pub async fn delete_alarm(&self, actor: &ActorId) -> Result<bool, CallError> {
        self.deleted(ActorRequest::DeleteAlarm {
            actor: actor.clone(),
        })
        .await
    }

    /// Starts a timer on an active actor.
    pub async fn set_timer(&self, spec: TimerSpec) -> Result<(), CallError> {
        match self
            .request(ActorRequest::SetTimer(spec), RequestContext::default())
            .await?
        {
            ActorResponse::Accepted => Ok(()),
            other => Err(other.unexpected("an acceptance")),
        }
    }

    /// Stops a timer; whether it was running.
    pub async fn delete_timer(&self, actor: &ActorId, name: &str) -> Result<bool, CallError> {
        self.deleted(ActorRequest::DeleteTimer {
            actor: actor.clone(),
            name: name.to_owned(),
        })
        .await
    }

    async fn reminder(&self, request: ActorRequest) -> Result<Option<ReminderInfo>, CallError> {
        match self.request(request, RequestContext::default()).await? {
            ActorResponse::Reminder(info) => Ok(info.map(|info| *info)),
            other => Err(other.unexpected("a reminder")),
        }
    }

    async fn deleted(&self, request: ActorRequest) -> Result<bool, CallError> {
        match self.request(request, RequestContext::default()).await? {
            ActorResponse::Deleted(deleted) => Ok(deleted),
            other => Err(other.unexpected("a deletion")),
        }
    }

    /// Reminders (and alarms) of a type, or of one actor, in key order.
    pub async fn list_reminders(
        &self,
        actor_type: Option<&str>,
        actor_id: Option<&str>,
        after: Option<(&ActorId, &str)>,
        limit: usize,
    ) -> Result<Vec<ReminderInfo>, CallError> {
        if actor_id.is_some() && actor_type.is_none() {
            return Err(CallError::InvalidArgument(
                "listing the reminders of one actor needs its type too".into(),
            ));
        }
        if let Some(ty) = actor_type {
            validate::name("actor type", ty)?;
        }
        if let Some(id) = actor_id {
            validate::name("actor id", id)?;
        }
        if let Some((actor, name)) = after {
            validate::name("page token's actor type", &actor.ty)?;
            validate::name("page token's actor id", &actor.id)?;
            validate::name("page token's reminder name", name)?;
        }
        let after = after.map(|(a, n)| reminder_key(a, n));
        self.shared
            .scheduler
            .list(actor_type, actor_id, after.as_ref(), limit)
            .await
    }

    /// Registered reminders and alarms in the store.
    pub async fn reminder_count(&self) -> Result<u64, CallError> {
        self.shared.scheduler.count().await
    }

    /// Successful reminder and alarm firings since start.
    pub fn reminders_fired(&self) -> u64 {
        self.shared.scheduler.fired.load(Ordering::Relaxed)
    }
}

// The requests, answered where the actor lives (see `routing`).
impl Shared {
    pub(crate) async fn set_reminder_here(
        &self,
        spec: ReminderSpec,
    ) -> Result<ReminderInfo, CallError> {
        self.check_schedule(&spec.actor, spec.payload.len())?;
        check_reminder_name(&spec.name)?;
        spec.check()?;
        self.scheduler.set(spec).await
    }

    pub(crate) async fn get_reminder_here(
        &self,
        actor: &ActorId,
        name: &str,
    ) -> Result<Option<ReminderInfo>, CallError> {
        self.check_target(actor)?;
        check_reminder_ref(name)?;
        self.scheduler.get(&reminder_key(actor, name)).await
    }

    pub(crate) async fn delete_reminder_here(
        &self,
        actor: &ActorId,
        name: &str,
    ) -> Result<bool, CallError> {
        self.check_target(actor)?;
        check_reminder_ref(name)?;
        self.scheduler.delete(reminder_key(actor, name)).await
    }

    /// Pauses (`paused`) or resumes a reminder; `None` if there is none.
    pub(crate) async fn pause_reminder_here(
        &self,
        actor: &ActorId,
        name: &str,
        paused: bool,
    ) -> Result<Option<ReminderInfo>, CallError> {
        self.check_target(actor)?;
        check_reminder_ref(name)?;
        self.scheduler
            .set_paused(reminder_key(actor, name), paused)
            .await
    }

    pub(crate) async fn set_alarm_here(&self, spec: AlarmSpec) -> Result<ReminderInfo, CallError> {
        self.check_schedule(&spec.actor, spec.payload.len())?;
        spec.check()?;
        self.scheduler
            .set(ReminderSpec::once(
                spec.actor,
                ALARM_NAME.into(),
                spec.at_unix_ms,
                spec.payload,
                spec.retry,
            ))
            .await
    }

    pub(crate) async fn get_alarm_here(
        &self,
        actor: &ActorId,
    ) -> Result<Option<ReminderInfo>, CallError> {
        self.check_target(actor)?;
        self.scheduler.get(&reminder_key(actor, ALARM_NAME)).await
    }

    pub(crate) async fn delete_alarm_here(&self, actor: &ActorId) -> Result<bool, CallError> {
        self.check_target(actor)?;
        self.scheduler.delete(reminder_key(actor, ALARM_NAME)).await
    }

    /// Fails the turns `pick` chooses that wait in `actor`'s mailbox, each
    /// with `error`: firings of a deleted timer, or of an actor purged, that
    /// must not start once the delete or the purge returned (a reminder's
    /// firing is also told by `Reply::Firing`). How many there were.
    pub(crate) fn fail_waiting(
        &self,
        actor: &ActorId,
        pick: impl Fn(&Envelope) -> bool,
        error: impl Fn(&Envelope) -> CallError,
    ) -> usize {
        let Some(act) = self.directory.get(actor) else {
            return 0;
        };
        let taken = act.inner.lock().mailbox.take_where(pick);
        let count = taken.len();
        for env in taken {
            let error = error(&env);
            env.reply.send(Err(error));
        }
        count
    }

    pub(crate) fn check_schedule(
        &self,
        actor: &ActorId,
        payload_len: usize,
    ) -> Result<(), CallError> {
        self.check_target(actor)?;
        validate::payload(payload_len, self.config.max_payload_bytes)?;
        // Same rule as calls: an unknown type is a mistake, except while apps
        // are still reconnecting after a start.
        self.new_activation(actor).map(|_| ())
    }
}
