//! Retention (`TypeOptions::retention`): an actor nothing has reached for
//! its type's retention is erased as `troupe actors purge` erases it, so a
//! store of per-entity actors (carts, sessions, devices) does not keep every
//! one ever seen.
//!
//! Each such actor waits as one daemon reminder, [`RETAIN_NAME`], due when
//! it would go. Its data says how the actor was last seen: `active` (written
//! as an activation starts, due a retention later) or `idle` (written as it
//! ends, due a retention after the end). Its firing, on the owner:
//! - the actor is active: due again a retention from now, still `active`;
//! - `active`, but not active here: the activation ended without its end
//!   written (its daemon crashed or stopped first): due again a retention
//!   from now, as `idle`. So a crash never erases an actor sooner than a
//!   retention after its last turn; it may keep it up to twice that long;
//! - `idle`: the actor is erased, unless a call activated it meanwhile
//!   (the purge's hold then finds it active and lets it be).
//!
//! The lifecycle notes starts and ends without waiting (it runs on the
//! workers); one task writes them in the order noted, coalesced to the
//! latest per actor, so an end is never overtaken by the start before it.
//! A purge waits until the marks noted for its actor are written
//! ([`marks::Marks::settled`]), so none lands after it deleted the actor's
//! reminders.

pub(crate) mod marks;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tracing::debug;
use troupe_storage::ReminderKey;

use marks::{Mark, Noted, Noting, Seen};

use crate::input::millis;
use crate::schedule::{Due, Fired, ReminderSpec, RetryPolicy};
use crate::shared::Shared;
use crate::shutdown::Stage;
use crate::types::{ActorId, Payload};

/// The name of the reminder an actor of a type with a retention waits as.
pub const RETAIN_NAME: &str = "$retain";

/// Marks written together at most; the rest wait for the next round.
const MARK_BATCH: usize = 1_024;

/// How long the marks noted as the daemon stops (its actors' ends) may
/// take to reach the store; those that do not are found `active` later,
/// which only keeps their actors longer.
const LAST_MARKS_WAIT: Duration = Duration::from_secs(2);

/// How soon a mark that says no retention (unreadable) fires again while
/// no app says the type's.
const UNKNOWN_RETRY: Duration = Duration::from_secs(3_600);

/// What a `$retain` firing comes to.
pub(crate) enum RetainFiring {
    /// Its mark moved on (or went): the firing is over.
    Done(Fired),
    /// The actor is to be erased, past this retention.
    Erase { retention: Duration },
}

/// The `$retain` reminder of `actor`: `mark`, due at `due_unix_ms`.
fn mark_spec(actor: &ActorId, mark: Mark, due_unix_ms: u64) -> ReminderSpec {
    // Two short words and a number: it cannot fail to encode.
    let payload = Payload::json(serde_json::to_vec(&mark).unwrap_or_default());
    ReminderSpec::once(
        actor.clone(),
        RETAIN_NAME.to_owned(),
        due_unix_ms,
        payload,
        RetryPolicy::DAEMON,
    )
}

/// `mark_spec` for `seen` with `retention`, due a retention from `now_ms`.
fn retain_for(actor: &ActorId, seen: Seen, retention: Duration, now_ms: u64) -> ReminderSpec {
    let retention_ms = millis(retention);
    let mark = Mark { seen, retention_ms };
    mark_spec(actor, mark, now_ms.saturating_add(retention_ms))
}

impl Shared {
    /// The retention of `ty`'s actors, if its app gave one.
    fn retention_of(&self, ty: &str) -> Option<Duration> {
        self.hosts.options(ty).and_then(|o| o.retention)
    }

    /// An activation of `actor` started serving turns.
    pub(crate) fn retention_started(&self, actor: &ActorId) {
        if let Some(retention) = self.retention_of(&actor.ty) {
            self.retention.note(
                actor,
                Noting::Retain {
                    seen: Seen::Active,
                    retention,
                },
            );
        }
    }

    /// An activation of `actor` that served turns has ended.
    pub(crate) fn retention_ended(&self, actor: &ActorId) {
        if let Some(retention) = self.retention_of(&actor.ty) {
            self.retention.note(
                actor,
                Noting::Retain {
                    seen: Seen::Idle,
                    retention,
                },
            );
        }
    }

    /// Writes the marks the lifecycle notes, until the daemon stops; then
    /// those noted by then, for a moment.
    pub(crate) async fn write_retention_marks(
        self: Arc<Self>,
        mut noted: mpsc::UnboundedReceiver<Noted>,
    ) {
        let stopping = self.shutdown.reached(Stage::Stopping);
        tokio::pin!(stopping);
        loop {
            let first = tokio::select! {
                first = noted.recv() => first,
                () = &mut stopping => {
                    let last = self.write_marks(&mut noted, None);
                    let _ = tokio::time::timeout(LAST_MARKS_WAIT, last).await;
                    return;
                }
            };
            let Some(first) = first else {
                return;
            };
            self.write_marks(&mut noted, Some(first)).await;
        }
    }

    /// Writes `first` and the reminders queued behind it, the latest per
    /// actor and reminder.
    async fn write_marks(&self, noted: &mut mpsc::UnboundedReceiver<Noted>, first: Option<Noted>) {
        let mut latest: HashMap<(ActorId, bool), (Noting, usize)> = HashMap::new();
        let mut take = |n: Noted| {
            let entry = latest
                .entry((n.actor, n.noting.is_expire()))
                .or_insert((n.noting, 0));
            *entry = (n.noting, entry.1.saturating_add(1));
        };
        if let Some(first) = first {
            take(first);
        }
        for _ in 0..MARK_BATCH {
            match noted.try_recv() {
                Ok(n) => take(n),
                Err(_) => break,
            }
        }
        let now_ms = self.time.now_ms();
        let writes = latest.into_iter().map(|((actor, _), (noting, count))| {
            let spec = match noting {
                Noting::Retain { seen, retention } => retain_for(&actor, seen, retention, now_ms),
                Noting::Expire { due_unix_ms } => crate::expiry::expire_spec(&actor, due_unix_ms),
            };
            async move {
                if let Err(e) = self.scheduler.set(spec).await {
                    // Not the owner any more (its new owner writes its
                    // own), or stopping: either way, nothing to retry.
                    debug!(actor = %actor, error = %e, reminder = ?noting, "daemon reminder not written");
                }
                self.retention.done(&actor, count);
            }
        });
        futures::future::join_all(writes).await;
    }

    /// A `$retain` firing: the actor is to be erased if it was last seen
    /// idle and is not active now; otherwise its mark moves on (see the
    /// module doc). The purge that erases it is the lifecycle's
    /// (`lifecycle/purge.rs`'s `erase_expired`).
    pub(crate) async fn fire_retention(&self, firing: &Due) -> RetainFiring {
        let actor = &firing.actor;
        let hosted = self.hosts.options(&actor.ty);
        let stored = Mark::read(&firing.payload.data, Duration::ZERO);
        let retention = match hosted {
            // The type's app no longer asks for a retention: forget it.
            Some(options) if options.retention.is_none() => {
                let key = ReminderKey {
                    actor_type: actor.ty.to_string(),
                    actor_id: actor.id.to_string(),
                    name: RETAIN_NAME.to_owned(),
                };
                return RetainFiring::Done(match self.scheduler.delete(key).await {
                    Ok(_) => Fired::Superseded,
                    Err(e) => Fired::after_error(firing, e),
                });
            }
            Some(options) => options.retention.unwrap_or_default(),
            None if stored.retention_ms > 0 => Duration::from_millis(stored.retention_ms),
            // Neither an app nor the mark says how long: never erase on a
            // guess; ask again later.
            None => {
                let again = self.time.now_ms().saturating_add(millis(UNKNOWN_RETRY));
                return self
                    .move_mark(firing, mark_spec(actor, stored, again))
                    .await;
            }
        };
        let seen = if self.is_active(actor) {
            Some(Seen::Active)
        } else if stored.seen == Seen::Active {
            Some(Seen::Idle)
        } else {
            None
        };
        match seen {
            Some(seen) => {
                let spec = retain_for(actor, seen, retention, self.time.now_ms());
                self.move_mark(firing, spec).await
            }
            None => RetainFiring::Erase { retention },
        }
    }

    /// Writes the firing's next mark: the firing is over.
    async fn move_mark(&self, firing: &Due, spec: ReminderSpec) -> RetainFiring {
        RetainFiring::Done(match self.scheduler.set(spec).await {
            Ok(_) => Fired::Superseded,
            Err(e) => Fired::after_error(firing, e),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_reads_back_and_an_unreadable_one_reads_as_active() {
        let actor = ActorId::new("cart", "c1");
        let spec = retain_for(&actor, Seen::Idle, Duration::from_secs(3_600), 1_000);
        assert_eq!(spec.due_unix_ms, 3_601_000);
        assert_eq!(spec.name, RETAIN_NAME);
        let read = Mark::read(&spec.payload.data, Duration::ZERO);
        assert_eq!(
            read,
            Mark {
                seen: Seen::Idle,
                retention_ms: 3_600_000
            }
        );
        let garbled = Mark::read(b"not json", Duration::from_secs(60));
        assert_eq!(garbled.seen, Seen::Active);
        assert_eq!(garbled.retention_ms, 60_000);
    }
}
