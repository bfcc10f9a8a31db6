//! What operators read about durable tells beyond one inbox: the daemon's
//! figures (`troupe status`), an actor's retries (`troupe actors get`) and
//! the per-type figures of `/metrics`.

use std::sync::Arc;
use std::time::Duration;

use troupe_storage::DeadLetterKey;

use super::metrics::TypeDelivery;
use super::retries::{Key, Record};
use super::stats::DeliveryCounts;
use super::MAX_ATTEMPTS;
use crate::activation::Status;
use crate::error::{CallError, Unavailable};
use crate::runtime::Runtime;
use crate::shared::Shared;
use crate::types::ActorId;

/// Dead letters `troupe status` counts at most: the count reads them from
/// the store (payloads included), a page at a time.
pub const DEAD_LETTERS_COUNTED: usize = 1_000;
const COUNT_PAGE: usize = 50;
/// How long the count may take: a status must answer while the store is
/// down, which is when it is read most.
const COUNT_WITHIN: Duration = Duration::from_secs(2);

/// A durable tell of one actor whose last attempt failed and that is tried
/// again on this daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxRetry {
    /// Its inbox sequence number (as its dead letter would have).
    pub seq: u64,
    /// Attempts failed so far.
    pub attempts: u32,
    /// Attempts before it becomes a dead letter.
    pub max_attempts: u32,
    pub next_attempt_unix_ms: u64,
    /// Still waiting out its backoff; `false`: the attempt is due, queued or
    /// running.
    pub waiting: bool,
    /// Why the last attempt failed (cut at 1 KiB).
    pub last_error: String,
}

/// The dead letters in the store, counted up to [`DEAD_LETTERS_COUNTED`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadLetterCount {
    pub counted: u64,
    /// There are more than `counted`: the count stopped at its bound.
    pub at_least: bool,
}

/// Durable tells on this daemon, for `troupe status`.
#[derive(Debug, Clone)]
pub struct DeliveryStatus {
    /// Summed over types: held now, and what happened since start.
    pub counts: DeliveryCounts,
    /// Tells waiting for (or in) another attempt after a failed one.
    pub retrying: u64,
    /// The store is shared by the cluster: every daemon counts them all.
    /// An error when the store failed or took too long.
    pub dead_letters: Result<DeadLetterCount, CallError>,
}

impl Runtime {
    /// This daemon's durable-tell figures and the dead letters in the store.
    /// Never fails: a store that cannot be read shows in `dead_letters`.
    pub async fn delivery_status(&self) -> DeliveryStatus {
        let shared = &self.shared;
        let dead_letters =
            match tokio::time::timeout(COUNT_WITHIN, shared.count_dead_letters()).await {
                Ok(count) => count,
                Err(_) => Err(CallError::DeadlineExceeded(format!(
                    "the store did not answer within {COUNT_WITHIN:?} while the dead letters were \
                 counted; check the store, or list them with `troupe dead-letters list`"
                ))),
            };
        DeliveryStatus {
            counts: shared.inbox_stats.total(),
            retrying: shared.live_retries(None).len() as u64,
            dead_letters,
        }
    }
}

impl Shared {
    async fn count_dead_letters(&self) -> Result<DeadLetterCount, CallError> {
        let store = self.flusher.store();
        let mut after: Option<DeadLetterKey> = None;
        let mut counted = 0;
        loop {
            let page = store
                .list_dead_letters(None, after.as_ref(), COUNT_PAGE)
                .await
                .map_err(|source| Unavailable::Store {
                    what: "cannot count the dead letters".into(),
                    source,
                    remedy: "check the store; the next status counts them again",
                })?;
            counted += page.len();
            if counted > DEAD_LETTERS_COUNTED {
                return Ok(DeadLetterCount {
                    counted: DEAD_LETTERS_COUNTED as u64,
                    at_least: true,
                });
            }
            if page.len() < COUNT_PAGE {
                return Ok(DeadLetterCount {
                    counted: counted as u64,
                    at_least: false,
                });
            }
            after = page.last().map(|l| l.key.clone());
        }
    }

    /// The retry records (of `actor` when set) whose activation is still
    /// the actor's live one; forgets the others.
    pub(crate) fn live_retries(&self, actor: Option<&ActorId>) -> Vec<(Key, Record)> {
        let (live, stale): (Vec<_>, Vec<_>) = self
            .inbox_retries
            .snapshot(actor)
            .into_iter()
            .partition(|(key, record)| self.still_retrying(&key.0, record));
        self.inbox_retries.forget(&stale);
        live
    }

    /// Whether `record`'s activation is the live one of `actor`: one that
    /// was dropped, fenced or unloaded lost its queued retries with it.
    fn still_retrying(&self, actor: &ActorId, record: &Record) -> bool {
        let Some(act) = record.act.upgrade() else {
            return false;
        };
        if !self
            .directory
            .get(actor)
            .is_some_and(|current| Arc::ptr_eq(&current, &act))
        {
            return false;
        }
        let inner = act.inner.lock();
        match inner.status {
            Status::Gone => false,
            Status::Unloaded => !inner.mailbox.is_empty(),
            _ => true,
        }
    }

    /// `actor`'s durable tells waiting for another attempt, by seq.
    pub(crate) fn inbox_retries_of(&self, actor: &ActorId) -> Vec<InboxRetry> {
        let now = crate::clock::unix_now_ms();
        self.live_retries(Some(actor))
            .into_iter()
            .map(|((_, seq), record)| InboxRetry {
                seq,
                attempts: record.attempts,
                max_attempts: MAX_ATTEMPTS,
                next_attempt_unix_ms: record.due_unix_ms,
                waiting: record.due_unix_ms > now,
                last_error: record.error,
            })
            .collect()
    }

    /// Per type: counts, and tells waiting to retry; for `/metrics`.
    pub(crate) fn delivery_per_type(&self) -> Vec<TypeDelivery> {
        let mut out: Vec<TypeDelivery> = self
            .inbox_stats
            .per_type()
            .into_iter()
            .map(|(actor_type, counts)| TypeDelivery {
                actor_type,
                counts,
                retrying: 0,
            })
            .collect();
        for ((actor, _), _) in self.live_retries(None) {
            // Sorted by type: found by binary search.
            if let Ok(i) = out.binary_search_by(|t| t.actor_type.as_str().cmp(&actor.ty)) {
                out[i].retrying += 1;
            }
        }
        out
    }
}
