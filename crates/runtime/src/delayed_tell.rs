//! Delayed tells: a durable tell delivered once a delay has passed
//! (`TellRequest.delay_ms`, `troupe tell --delay`).
//!
//! One waits as a one-shot reminder of its actor, named [`TELL_PREFIX`] and
//! its idempotency key, so it is stored, listed, paused, cancelled and
//! fired as reminders are, by whichever daemon owns the actor when it is
//! due. Its firing does not run a reminder turn: it appends the call to the
//! actor's inbox under that key, and from there it is any durable tell
//! (delivered at least once, its effects once, a dead letter when it keeps
//! failing). A firing repeated after a crash finds its key recorded and
//! stores nothing twice.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tracing::warn;
use troupe_storage::ReminderKey;

use crate::error::CallError;
use crate::forwarding::{ActorRequest, ActorResponse, RequestContext};
use crate::input::{millis, range, UserDuration};
use crate::metrics::Scheduled;
use crate::reply::Reply;
use crate::runtime::Runtime;
use crate::schedule::{Due, Fired, ReminderInfo, ReminderSpec, RetryPolicy, TellMeta};
use crate::shared::Shared;
use crate::types::{Call, CallExtra};
use crate::validate;

/// What a delayed tell's reminder name starts with; its idempotency key
/// follows.
pub const TELL_PREFIX: &str = "$tell:";

/// The least time a fired tell's key is remembered: a firing repeated after
/// a crash comes once the daemon is back, which may take longer than the
/// minute an SDK asks for the keys it makes.
const MIN_KEY_RETENTION: Duration = Duration::from_secs(3_600);

/// The reminder a delayed tell with idempotency key `key` waits as.
pub fn tell_reminder_name(key: &str) -> String {
    format!("{TELL_PREFIX}{key}")
}

/// A random idempotency key for a delayed tell its caller gave none.
fn fresh_key() -> Result<String, CallError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| {
        CallError::Internal(format!(
            "the system's random source failed ({e}); give the tell an idempotency key"
        ))
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A delayed tell, stored: the reminder it waits as and when it is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayedTell {
    pub reminder: String,
    /// By the owner's clock.
    pub due_unix_ms: u64,
}

impl Runtime {
    /// Stores `call` to be delivered `delay` from now as a durable tell;
    /// answers the reminder it waits as. A call carrying a key already
    /// waiting is acknowledged without being scheduled again, with the
    /// waiting one's due time.
    pub async fn tell_later(
        &self,
        mut call: Call,
        delay: Duration,
    ) -> Result<DelayedTell, CallError> {
        UserDuration::new("delay", delay, &range::POSITIVE)?;
        // Its chain is checked as any call's, then dropped: the tell runs
        // later, in a chain of its own.
        self.admit(&call)?;
        let extra = call.extra.get_or_insert_with(Box::default);
        extra.chain = None;
        let key = match extra.idempotency_key.as_deref() {
            Some(key) => key.to_owned(),
            None => {
                let key = fresh_key()?;
                extra.idempotency_key = Some(key.as_str().into());
                key
            }
        };
        let context = RequestContext::of_call(&call);
        match self
            .shared
            .request(ActorRequest::TellLater { call, delay }, context)
            .await?
        {
            ActorResponse::TellScheduled { due_unix_ms } => Ok(DelayedTell {
                reminder: tell_reminder_name(&key),
                due_unix_ms,
            }),
            other => Err(other.unexpected("the delayed tell's reminder")),
        }
    }
}

impl Shared {
    /// Schedules a delayed tell of an actor this daemon owns; its reminder,
    /// or the one already waiting with its key.
    pub(crate) async fn tell_later_here(
        self: &Arc<Self>,
        call: Call,
        delay: Duration,
    ) -> Result<ReminderInfo, CallError> {
        // What a tell is checked for as it enters the mailbox, now: a due
        // tell refused then would have been acknowledged for nothing.
        self.check_schedule(&call.actor, call.payload.len())?;
        validate::name("method name", &call.method)?;
        if let Some(extra) = &call.extra {
            validate::extra(extra, self.config.max_payload_bytes)?;
        }
        let extra = call.extra.map(|e| *e).unwrap_or_default();
        let Some(key) = extra.idempotency_key else {
            return Err(CallError::Internal(
                "a delayed tell reached its owner without an idempotency key".into(),
            ));
        };
        let name = tell_reminder_name(&key);
        let reminder = ReminderKey {
            actor_type: call.actor.ty.to_string(),
            actor_id: call.actor.id.to_string(),
            name: name.clone(),
        };
        if let Some(waiting) = self.scheduler.get(&reminder).await? {
            // A retry of a tell that waits already: that one stands.
            return Ok(waiting);
        }
        let spec = ReminderSpec::once(
            call.actor,
            name,
            self.time.now_ms().saturating_add(millis(delay)),
            call.payload,
            RetryPolicy::DAEMON,
        );
        spec.check()?;
        let tell = TellMeta {
            method: call.method.to_string(),
            metadata: extra.metadata,
            key: key.to_string(),
            key_retention_ms: extra.key_retention.map(millis),
        };
        self.scheduler.set_with(spec, Some(tell)).await
    }

    /// A delayed tell's firing: its call appended to the actor's inbox.
    pub(crate) async fn store_due_tell(self: &Arc<Self>, firing: &Due, tell: &TellMeta) -> Fired {
        let call = Call {
            extra: Some(Box::new(CallExtra {
                metadata: tell.metadata.clone(),
                idempotency_key: Some(tell.key.as_str().into()),
                // The caller's retention (none: the whole), at least the
                // least that outlasts a restart.
                key_retention: tell
                    .key_retention_ms
                    .map(|ms| Duration::from_millis(ms).max(MIN_KEY_RETENTION)),
                ..CallExtra::default()
            })),
            ..Call::new(
                firing.actor.clone(),
                tell.method.as_str(),
                firing.payload.clone(),
            )
        };
        // On a test clock the firing ends once the tell's turn has run, so
        // an advance returns with its effects visible, as a reminder's.
        let (turn, ran) = match self.test_clock {
            Some(_) => {
                let (tx, rx) = oneshot::channel();
                (Reply::To(tx), Some(rx))
            }
            None => (Reply::None, None),
        };
        match self.store_tell(call, turn).await {
            Ok(()) => {
                if let Some(metrics) = &self.metrics {
                    let late = self.time.now_ms().saturating_sub(firing.due_unix_ms());
                    let stats = metrics.for_type(&firing.actor.ty);
                    stats.firing_started(Scheduled::Tell, Duration::from_millis(late));
                    stats.fired(Scheduled::Tell);
                }
                if let Some(ran) = ran {
                    // However it went: a failed turn is the inbox's to retry.
                    let _ = tokio::time::timeout(self.config.call_timeout, ran).await;
                }
                Fired::Ran
            }
            Err(e) => {
                let fired = Fired::after_error(firing, e);
                if let Fired::Failed(e) = &fired {
                    warn!(actor = %firing.actor, reminder = %firing.name, error = %e,
                        "a delayed tell could not be stored in its actor's inbox; retrying");
                }
                fired
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_keys_differ_and_name_their_reminder() {
        let (a, b) = (fresh_key(), fresh_key());
        assert!(matches!((&a, &b), (Ok(a), Ok(b)) if a != b && a.len() == 32));
        assert_eq!(tell_reminder_name("k1"), "$tell:k1");
    }
}
