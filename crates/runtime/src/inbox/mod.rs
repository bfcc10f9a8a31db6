//! Durable tells: the actor's inbox in the store, and delivering from it.
//!
//! A durable tell is appended to its actor's inbox through the flusher, in
//! the same batch as other writes (group commit), and acknowledged once that
//! batch is stored. Its turn's end records the entry's removal under the
//! activation's lock, beside the turn's state changes, so both reach the
//! store in one batch: the state effects of a tell happen once. A failed
//! turn is retried with backoff, then the entry becomes a dead letter.
//!
//! Sequence numbers order an actor's entries. They are given only once the
//! activation has read the stored inbox (with its state, after its claim),
//! above every stored one, so entries of an earlier owner or life always
//! come first; until then a tell waits in the mailbox unsequenced, its
//! acknowledgement not yet held.
//!
//! - `ops`: the inbox changes an activation has not written yet.
//! - `record`: the entry's encoding.
//! - `api`: `Runtime::tell_durable`, dead letters, inbox counts.
//! - `scan`: activating owned actors with pending entries.
//! - `stats`, `retries`, `track`, `status`, `metrics`: what operators see
//!   of it (counts per type, retries waiting, `troupe status`, `/metrics`).

mod api;
pub(crate) mod metrics;
pub(crate) mod ops;
mod record;
pub(crate) mod retries;
mod scan;
pub(crate) mod stats;
pub(crate) mod status;
pub(crate) mod tag;
mod track;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, warn};
use troupe_storage::{DeadLetter, DeadLetterKey, InboxEntry, InboxOp};

use crate::activation::{Activation, Envelope, Inner, Status};
use crate::error::CallError;
use crate::reply::Reply;
use crate::shared::Shared;
use crate::types::{CallExtra, FailureKind, Payload, TurnKind};

use crate::idempotency::Lookup;
pub use api::DeadLetterInfo;
use ops::push_op;
pub(crate) use record::Header;
pub(crate) use tag::{InboxDelivery, InboxTag};

/// Attempts before a tell becomes a dead letter, and the backoff between
/// them (doubling from the first, capped).
pub(crate) const MAX_ATTEMPTS: u32 = 3;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(10);

impl Shared {
    /// The next inbox sequence number: above `floor` and every one given
    /// before, near the wall clock in microseconds so that numbers keep
    /// rising across restarts (below 2^63, as stores keep them signed).
    fn next_inbox_seq(&self, floor: u64) -> u64 {
        let now_us = crate::clock::unix_now_ms().saturating_mul(1000);
        let mut next = 0;
        let _ = self
            .inbox_clock
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |prev| {
                next = prev.saturating_add(1).max(floor).max(now_us);
                Some(next)
            });
        next
    }

    /// Gives a durable tell its sequence number and records its append, once
    /// the activation knows its stored inbox; holds the caller's
    /// acknowledgement until the batch with the append is stored. Called
    /// with the activation locked. False: a retry of a keyed tell stored
    /// before, acknowledged (once that is stored) and to be dropped.
    pub(crate) fn sequence_tell(
        &self,
        act: &Arc<Activation>,
        inner: &mut Inner,
        env: &mut Envelope,
    ) -> bool {
        let keyed = env.extra.as_deref().and_then(CallExtra::key);
        let terms = env
            .extra
            .as_deref()
            .map(CallExtra::key_terms)
            .unwrap_or_default();
        let Some(tag) = env.inbox.as_mut() else {
            return true;
        };
        // During a purge or state edit a tell is stored only after it, as the
        // activation that follows reads the inbox afresh.
        if tag.delivery.seq != 0 || !inner.state_loaded() || self.holds.contains(&act.id) {
            return true;
        }
        if let Some((key, new_key)) = keyed {
            // A spilled actor's store was asked before (`tell_durable_here`).
            // A stored key's fingerprint is as good as the key: a tell's
            // record has no answer to read.
            if matches!(
                self.recorded_answer(act, key, new_key),
                Lookup::Recorded(_) | Lookup::Stored
            ) {
                if let Some(ack) = tag.ack.take() {
                    self.flusher.hold_reply(act, ack, Ok(Payload::default()));
                }
                return false;
            }
            // The key goes in the batch that stores the append.
            let record = self.records.record(
                &act.id,
                key,
                crate::clock::unix_now_ms(),
                terms,
                Ok(Payload::default()),
            );
            self.store_record(act, inner, record);
        }
        tag.delivery.seq = self.next_inbox_seq(0);
        tag.delivery.held = Some(self.tell_stored(act, inner));
        let bytes = push_op(
            inner,
            InboxOp::Append(InboxEntry {
                seq: tag.delivery.seq,
                data: tag.delivery.data.clone(),
            }),
        );
        self.flusher.mark_dirty(act, inner, bytes);
        if let Some(ack) = tag.ack.take() {
            self.flusher.hold_reply(act, ack, Ok(Payload::default()));
        }
        true
    }

    /// The activation read its stored inbox (`entries`, lowest seq first):
    /// they go to the front of the mailbox, before anything that arrived
    /// meanwhile, and the tells waiting unsequenced get numbers after them.
    pub(crate) fn inbox_loaded(
        &self,
        act: &Arc<Activation>,
        inner: &mut Inner,
        entries: Vec<InboxEntry>,
    ) {
        if let Some(last) = entries.last() {
            let _ = self
                .inbox_clock
                .fetch_max(last.seq.saturating_add(1), Ordering::Relaxed);
        }
        let mut stored = Vec::with_capacity(entries.len());
        for entry in entries {
            match self.stored_envelope(&act.id, entry) {
                Some(env) => stored.push(env),
                None => break,
            }
        }
        for env in stored.into_iter().rev() {
            inner.mailbox.push_front(env);
        }
        let mut waiting: Vec<Envelope> = Vec::new();
        for env in inner.mailbox.take_all() {
            waiting.push(env);
        }
        for mut env in waiting {
            if self.sequence_tell(act, inner, &mut env) {
                inner.mailbox.push_back(env);
            }
        }
    }

    /// An envelope for a stored entry; `None` when the daemon-wide bound is
    /// reached (the entry stays stored for the next activation).
    fn stored_envelope(&self, actor: &crate::ActorId, entry: InboxEntry) -> Option<Envelope> {
        let (header, payload) = record::decode(&entry.data).unwrap_or_else(|| {
            warn!(actor = %actor, seq = entry.seq, "undecodable inbox entry; delivering it as method '$corrupt' so it ends as a dead letter");
            (
                Header {
                    method: "$corrupt".into(),
                    bytes: true,
                    metadata: Vec::new(),
                },
                Payload::default(),
            )
        });
        let slot = match self.pending.acquire() {
            Ok(slot) => slot,
            Err(e) => {
                warn!(actor = %actor, error = %e, "inbox entries left stored: too many calls pending");
                return None;
            }
        };
        let extra = (!header.metadata.is_empty()).then(|| {
            Box::new(CallExtra {
                metadata: header.metadata,
                ..CallExtra::default()
            })
        });
        Some(Envelope {
            kind: TurnKind::Call,
            name: header.method.into(),
            payload,
            extra,
            reply: Reply::None,
            slot,
            touch: true,
            reentering: false,
            inbox: Some(Box::new(InboxTag {
                delivery: InboxDelivery {
                    seq: entry.seq,
                    attempts: 0,
                    data: entry.data,
                    backoff_until: None,
                    held: Some(self.tell_loaded(actor)),
                },
                ack: None,
            })),
        })
    }

    /// A durable tell's turn ended (the activation locked): on success its
    /// removal joins the turn's state changes; on failure it is retried
    /// (returned, to deliver after the backoff) or becomes a dead letter.
    pub(crate) fn inbox_turn_ended(
        &self,
        act: &Arc<Activation>,
        inner: &mut Inner,
        delivery: &InboxDelivery,
        result: &Result<Payload, CallError>,
    ) -> Option<(InboxDelivery, Duration)> {
        let error = match result {
            Ok(_) => {
                push_op(inner, InboxOp::Remove { seq: delivery.seq });
                self.flusher.mark_dirty(act, inner, 0);
                self.tell_handled(act, delivery);
                return None;
            }
            Err(e) => e,
        };
        let attempts = delivery.attempts.saturating_add(1);
        // A method the type lacks, or arguments that do not fit it, fail
        // alike on every attempt, and each retry holds the caller's tells
        // behind it: such a tell is a dead letter at once, to re-drive
        // once the app has the method.
        let callers_mistake = matches!(
            error,
            CallError::Actor(f) if matches!(f.kind, FailureKind::NoSuchMethod | FailureKind::BadArguments)
        );
        if attempts < MAX_ATTEMPTS && !callers_mistake {
            let factor = 2u32.saturating_pow(attempts.saturating_sub(1));
            let backoff = FIRST_BACKOFF.saturating_mul(factor).min(MAX_BACKOFF);
            debug!(actor = %act.id, seq = delivery.seq, attempts, error = %error, "durable tell failed; retrying");
            self.tell_retrying(act, delivery, attempts, backoff, error);
            return Some((
                InboxDelivery {
                    attempts,
                    ..delivery.clone()
                },
                backoff,
            ));
        }
        if callers_mistake {
            warn!(actor = %act.id, seq = delivery.seq, error = %error, "durable tell names no method the actor can run with its arguments; moved to the dead letters without retries");
        } else {
            warn!(actor = %act.id, seq = delivery.seq, attempts, error = %error, "durable tell failed every attempt; moved to the dead letters");
        }
        self.tell_dead_lettered(act, delivery);
        let letter = DeadLetter {
            key: DeadLetterKey {
                actor_type: act.id.ty.to_string(),
                actor_id: act.id.id.to_string(),
                seq: delivery.seq,
            },
            data: delivery.data.clone(),
            error: dead_letter_error(error),
            attempts,
            failed_unix_ms: crate::clock::unix_now_ms(),
        };
        let bytes = letter.data.len() + letter.error.len();
        push_op(inner, InboxOp::DeadLetter(letter));
        self.flusher.mark_dirty(act, inner, bytes);
        None
    }

    /// Puts a failed tell back at the front of the mailbox, held for
    /// `backoff` (the activation locked, its turn just ended): the durable
    /// tells behind it wait with it, so a retry never lets a later tell
    /// overtake it; other calls go ahead. Only into the same activation:
    /// once it ends, the stored entry is delivered by the actor's next
    /// activation instead (never both). Returns when to wake the actor.
    pub(crate) fn hold_retry(
        &self,
        act: &Activation,
        inner: &mut Inner,
        delivery: InboxDelivery,
        backoff: Duration,
    ) -> Option<Duration> {
        if matches!(inner.status, Status::Gone | Status::Deactivating) {
            self.retry_given_up(&act.id, delivery.seq);
            return None;
        }
        let Some(mut env) = self.stored_envelope(
            &act.id,
            InboxEntry {
                seq: delivery.seq,
                data: delivery.data.clone(),
            },
        ) else {
            self.retry_given_up(&act.id, delivery.seq);
            return None;
        };
        if let Some(tag) = env.inbox.as_mut() {
            tag.delivery.attempts = delivery.attempts;
            tag.delivery.backoff_until = Some(tokio::time::Instant::now() + backoff);
        }
        inner.mailbox.push_front(env);
        Some(backoff)
    }

    /// Schedules `act` after `backoff`, when its held retry is due.
    pub(crate) fn wake_after(self: &Arc<Self>, act: Arc<Activation>, backoff: Duration) {
        let shared = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(backoff).await;
            let mut inner = act.inner.lock();
            // A running turn's end schedules the actor itself.
            let wake = !inner.scheduled && matches!(inner.status, Status::Idle | Status::Unloaded);
            inner.scheduled |= wake;
            drop(inner);
            if wake {
                shared.schedule(act);
            }
        });
    }
}

/// Most bytes of an actor's stack trace a dead letter keeps (its end, where a
/// Python traceback names the raising line; the SDKs send about 3 KiB).
const MAX_DEAD_LETTER_TRACE: usize = 4 * 1024;

/// What a dead letter keeps of its last failure: the error, and under it the
/// stack trace an actor's exception came with, so that `troupe dead-letters
/// get` shows where the actor raised (the list shows the first line).
fn dead_letter_error(error: &CallError) -> String {
    let trace = match error {
        CallError::Actor(failure) => failure.details.trim_end(),
        _ => "",
    };
    if trace.is_empty() {
        return error.to_string();
    }
    let mut start = trace.len().saturating_sub(MAX_DEAD_LETTER_TRACE);
    while !trace.is_char_boundary(start) {
        start += 1;
    }
    format!("{error}\n{}", &trace[start..])
}
