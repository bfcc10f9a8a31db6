//! A firing's way through the scheduler: popped when due and handed to the
//! runtime as a [`Due`] (the scheduler never runs turns itself), then its
//! outcome recorded: the next due time, a retry with backoff, or the end of
//! the reminder. The stored record moves on only when the outcome is
//! recorded, so a firing that never reports back fires again once loaded.

use std::cmp::Reverse;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};
use troupe_storage::{ReminderKey, ReminderOp, ReminderRecord};

use super::calendar::Calendar;
use super::next_due::{advance, missed};
use super::record::{decode, encode, Meta, RetryPolicy, TellMeta, ALARM_NAME};

use super::load_window::Latest;
use super::{empty_key, OnItsWay, Queue, Scheduler};
use crate::error::{CallError, Unavailable};
use crate::input::millis;
use crate::types::{ActorId, Payload};

/// A reminder or alarm due now, for the runtime to run as a turn and report
/// on with [`Scheduler::finish`].
#[derive(Debug)]
pub(crate) struct Due {
    pub(crate) actor: ActorId,
    pub(crate) alarm: bool,
    pub(crate) name: String,
    pub(crate) payload: Payload,
    record: ReminderRecord,
    meta: Meta,
    /// The record's calendar schedule, parsed; `None` without one (or with
    /// one that no longer parses).
    calendar: Option<Arc<Calendar>>,
    /// How the queue knows this firing.
    on_its_way: OnItsWay,
    /// When it was popped; slots missed before then are skipped.
    now: u64,
    /// One of the places that bound the firings in flight.
    _permit: OwnedSemaphorePermit,
}

impl Due {
    /// Whether a `set` or `delete` of the firing's reminder came since it
    /// was popped: then the newer call decides, and the firing need not run.
    pub(crate) fn superseded(&self) -> bool {
        self.on_its_way.superseded.is_cancelled()
    }

    /// When the firing was due (a retry's: when the retry was).
    pub(crate) fn due_unix_ms(&self) -> u64 {
        self.record.due_unix_ms
    }

    /// What the firing's turn checks as it would start (`Reply::Firing`).
    pub(crate) fn superseded_token(&self) -> CancellationToken {
        self.on_its_way.superseded.clone()
    }

    /// A delayed tell's call, which the firing stores in the actor's inbox
    /// instead of running a reminder turn.
    pub(crate) fn tell(&self) -> Option<&TellMeta> {
        self.meta.tell.as_ref()
    }
}

/// How a firing went.
#[derive(Debug)]
pub(crate) enum Fired {
    /// Its turn ran and succeeded.
    Ran,
    /// Its turn failed: an attempt, retried with backoff up to the policy.
    Failed(CallError),
    /// Another daemon owns the actor and fires it: forgotten here.
    NotOwned,
    /// Not attempted (the daemon is stopping): the stored record stays as
    /// it is and fires again after the restart.
    NotAttempted,
    /// The reminder was set again or deleted while this firing was on its
    /// way (a purge deletes it too): not run, or its outcome is moot.
    Superseded,
}

impl Fired {
    /// How a firing whose attempt ended in `error` went: a reminder's turn
    /// or a delayed tell's append alike.
    pub(crate) fn after_error(firing: &Due, error: CallError) -> Fired {
        match error {
            // The drain refused it: no attempt was made.
            CallError::Unavailable(Unavailable::ShuttingDown) => Fired::NotAttempted,
            // Deleted (by a purge, say) while it waited: not a failure.
            _ if firing.superseded() => Fired::Superseded,
            error => Fired::Failed(error),
        }
    }
}

impl Scheduler {
    /// Hands everything due at `now` to `due`, each under a permit so at most
    /// `MAX_FIRING` are in flight. Returns `false` once nobody takes them.
    pub(super) async fn pop_due(
        self: &Arc<Self>,
        now: u64,
        due: &mpsc::UnboundedSender<Due>,
    ) -> bool {
        loop {
            let record = {
                let mut q = self.queue.lock();
                let Some(Reverse((at, _))) = q.heap.peek() else {
                    return true;
                };
                if *at > now {
                    return true;
                }
                let Some(Reverse((at, key))) = q.heap.pop() else {
                    return true;
                };
                match q.live.get(&key) {
                    // The firing owns it until it writes the next version.
                    Some(r) if r.due_unix_ms == at => {
                        q.firings_popped += 1;
                        let on_its_way = OnItsWay {
                            id: q.firings_popped,
                            superseded: CancellationToken::new(),
                        };
                        q.firing.insert(key.clone(), on_its_way.clone());
                        q.live.remove(&key).map(|record| (record, on_its_way))
                    }
                    _ => continue, // stale entry: moved or deleted
                }
            };
            let Some((record, on_its_way)) = record else {
                continue;
            };
            let Ok(permit) = self.firing.clone().acquire_owned().await else {
                return false;
            };
            let Some((meta, payload)) = decode(&record.data) else {
                warn!(reminder = ?record.key, "undecodable reminder dropped");
                let this = self.clone();
                tokio::spawn(async move {
                    this.queue.lock().end_firing(&record.key, &on_its_way);
                    let _ = this.delete_unloaded(record.key).await;
                });
                continue;
            };
            let calendar = self.calendar_of(&record.key, &meta);
            let missed = missed(&meta, record.due_unix_ms, now, calendar.as_deref());
            let firing = Due {
                actor: ActorId::new(record.key.actor_type.as_str(), record.key.actor_id.as_str()),
                alarm: record.key.name == ALARM_NAME,
                name: record.key.name.clone(),
                payload,
                record,
                meta,
                calendar,
                on_its_way,
                now,
                _permit: permit,
            };
            if missed && firing.meta.skip_missed {
                debug!(reminder = ?firing.record.key, "missed firing skipped");
                let this = self.clone();
                tokio::spawn(async move { this.record_outcome(firing, None).await });
                continue;
            }
            if due.send(firing).is_err() {
                return false;
            }
        }
    }

    /// The calendar schedule `meta` keeps, parsed. One that no longer
    /// parses (its zone left the host's tz database) is logged, and the
    /// firing at hand is the reminder's last.
    fn calendar_of(&self, key: &ReminderKey, meta: &Meta) -> Option<Arc<Calendar>> {
        let schedule = meta.cron_schedule()?;
        match self.calendars.get(&schedule) {
            Ok(calendar) => Some(calendar),
            Err(e) => {
                warn!(reminder = ?key, error = %e, "a stored calendar schedule no longer reads; this firing is the reminder's last");
                None
            }
        }
    }

    /// Records how a [`Due`] firing went.
    pub(crate) async fn finish(&self, firing: Due, fired: Fired) {
        let result = match fired {
            Fired::Ran => Ok(()),
            Fired::Failed(e) => Err(e),
            Fired::NotOwned | Fired::NotAttempted | Fired::Superseded => {
                // The store keeps the record as it is: the owner's scheduler
                // fires it (or this one, after a restart); or the newer
                // `set`/`delete` decides what the store holds.
                self.queue
                    .lock()
                    .end_firing(&firing.record.key, &firing.on_its_way);
                self.note_progress();
                return;
            }
        };
        self.record_outcome(firing, Some(result)).await;
    }

    /// Moves the stored record on after a firing: `None` for one skipped.
    async fn record_outcome(&self, firing: Due, result: Option<Result<(), CallError>>) {
        let Due {
            record,
            mut meta,
            calendar,
            payload,
            now,
            on_its_way,
            ..
        } = firing;
        let calendar = calendar.as_deref();
        let next_due = match result {
            Some(Err(e)) => {
                meta.attempts += 1;
                if meta.attempts < meta.max_attempts.max(1) {
                    let policy = RetryPolicy {
                        max_attempts: meta.max_attempts,
                        initial_backoff: Duration::from_millis(meta.initial_backoff_ms),
                        max_backoff: Duration::from_millis(meta.max_backoff_ms),
                    };
                    let backoff = policy.backoff(meta.attempts);
                    debug!(reminder = ?record.key, attempt = meta.attempts, error = %e, "firing failed; retrying");
                    Some(self.time.now_ms().saturating_add(millis(backoff)))
                } else {
                    warn!(reminder = ?record.key, attempts = meta.attempts, error = %e, "firing failed after all retries; dropped");
                    meta.attempts = 0;
                    advance(&mut meta, record.due_unix_ms, now, calendar)
                }
            }
            Some(Ok(())) => {
                meta.attempts = 0;
                meta.fired += 1;
                self.fired.fetch_add(1, Ordering::Relaxed);
                if record.key.name == ALARM_NAME {
                    self.alarms_fired.fetch_add(1, Ordering::Relaxed);
                }
                advance(&mut meta, record.due_unix_ms, now, calendar)
            }
            None => advance(&mut meta, record.due_unix_ms, now, calendar),
        };
        let next = next_due.map(|due| ReminderRecord {
            key: record.key.clone(),
            due_unix_ms: due,
            data: encode(&meta, &payload),
        });
        // Decide and enqueue under the lock a concurrent `set`/`delete` takes
        // to mark the firing: either it marked us first (we drop our write),
        // or our write is queued before its, and its write lands last.
        let (queued, wake) = {
            let mut q = self.queue.lock();
            let touched = q.end_firing(&record.key, &on_its_way);
            if touched {
                (None, false)
            } else {
                let queued = match &next {
                    Some(next) => {
                        let latest = q.latest_of_put(next);
                        self.enqueue(&mut q, ReminderOp::Put(next.clone()), latest)
                    }
                    None => {
                        q.paused.mark(&record.key, false);
                        let op = ReminderOp::Delete(record.key.clone());
                        self.enqueue(&mut q, op, || Latest::Settled)
                    }
                };
                let wake = next.as_ref().is_some_and(|n| Self::track_locked(&mut q, n));
                (Some(queued), wake)
            }
        };
        if wake {
            self.wake.notify_one();
        }
        let outcome = match queued {
            None => Ok(()), // replaced or deleted meanwhile: the newer call stands
            Some(Err(e)) => Err(e),
            Some(Ok(done)) => Self::finished(done).await.map(|_| ()),
        };
        if let Err(e) = outcome {
            if let Some(next) = &next {
                self.untrack(next);
            }
            // The stored version still says due: it fires again once loaded.
            warn!(reminder = ?record.key, error = %e, "could not record a firing; it will fire again");
            let mut q = self.queue.lock();
            q.cursor = q
                .cursor
                .clone()
                .min((record.due_unix_ms.saturating_sub(1), empty_key()));
            q.more = true;
        }
        self.note_progress();
    }
}

impl Queue {
    /// Forgets `firing` of `key` when it is the latest; whether its
    /// bookkeeping is to be dropped: superseded, or a newer firing of the
    /// reminder began (popped again after a `set`), whose own decides.
    fn end_firing(&mut self, key: &ReminderKey, firing: &OnItsWay) -> bool {
        match self.firing.get(key) {
            Some(latest) if latest.id == firing.id => {
                self.firing.remove(key);
                firing.superseded.is_cancelled()
            }
            _ => true,
        }
    }
}
