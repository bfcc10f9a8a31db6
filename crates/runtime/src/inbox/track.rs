//! The calls the delivery path makes to keep its figures: counting each
//! durable tell per type (`stats`) and recording retries (`retries`).
//! Kept apart from the delivery logic so that it stays one line per event
//! there.

use std::sync::Arc;
use std::time::Duration;

use super::stats::Held;
use super::InboxDelivery;
use crate::activation::{Activation, Inner};
use crate::error::CallError;
use crate::shared::Shared;
use crate::types::ActorId;

impl Shared {
    /// A durable tell was sequenced (its append recorded): counted as
    /// stored, and held in its type's inbox depth by the returned guard.
    /// Called with the activation locked; its binding has the counters, so
    /// no lookup is made once the actor is active.
    pub(crate) fn tell_stored(&self, act: &Activation, inner: &Inner) -> Held {
        match &inner.binding {
            Some(binding) => binding.inbox.stored(),
            None => self.inbox_stats.for_type(&act.id.ty).stored(),
        }
    }

    /// A guard holding a tell read from the store (not stored anew).
    pub(crate) fn tell_loaded(&self, actor: &ActorId) -> Held {
        Held::new(self.inbox_stats.for_type(&actor.ty))
    }

    /// A durable tell's turn succeeded.
    pub(crate) fn tell_handled(&self, act: &Activation, delivery: &InboxDelivery) {
        if let Some(held) = &delivery.held {
            held.counters().delivered();
        }
        if delivery.attempts > 0 {
            self.inbox_retries.done(&act.id, delivery.seq);
        }
    }

    /// A durable tell's attempt failed (`attempts` so far) and is tried
    /// again after `backoff`.
    pub(crate) fn tell_retrying(
        &self,
        act: &Arc<Activation>,
        delivery: &InboxDelivery,
        attempts: u32,
        backoff: Duration,
        error: &CallError,
    ) {
        if let Some(held) = &delivery.held {
            held.counters().retried();
        }
        let due = crate::clock::unix_now_ms().saturating_add(backoff.as_millis() as u64);
        self.inbox_retries
            .waiting(act, delivery.seq, attempts, due, &error.to_string());
    }

    /// A durable tell failed its last attempt and became a dead letter.
    pub(crate) fn tell_dead_lettered(&self, act: &Activation, delivery: &InboxDelivery) {
        if let Some(held) = &delivery.held {
            held.counters().dead_lettered();
        }
        self.inbox_retries.done(&act.id, delivery.seq);
    }

    /// A retry was given up before its attempt (the activation is going
    /// away; the stored entry waits for the actor's next activation).
    pub(crate) fn retry_given_up(&self, actor: &ActorId, seq: u64) {
        self.inbox_retries.done(actor, seq);
    }
}
