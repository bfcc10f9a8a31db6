//! An activation's mailbox: the calls waiting behind its running turn, in
//! order, with the one exception durable tells need (a delivery waiting out
//! a retry holds the durable tells behind it, not other calls).

use std::collections::VecDeque;
use std::sync::Arc;

use crate::dispatch::pending::PendingSlot;
use crate::reply::Reply;
use crate::types::{CallExtra, Payload, TurnKind};

/// A call waiting in a mailbox.
#[derive(Debug)]
pub(crate) struct Envelope {
    pub(crate) kind: TurnKind,
    pub(crate) name: Arc<str>,
    pub(crate) payload: Payload,
    pub(crate) extra: Option<Box<CallExtra>>,
    pub(crate) reply: Reply,
    pub(crate) slot: PendingSlot,
    /// Whether the turn counts as activity for idle deactivation (timers
    /// without keep-alive do not).
    pub(crate) touch: bool,
    /// A call back into an actor already waiting on its chain, for a
    /// re-entrant type: runs nested in that turn instead of queueing.
    pub(crate) reentering: bool,
    /// A durable tell: its place in the actor's inbox (the `inbox` module).
    pub(crate) inbox: Option<Box<crate::inbox::tag::InboxTag>>,
}

impl Envelope {
    /// The caller stopped waiting (deadline, cancellation): skip the turn.
    pub(crate) fn abandoned(&self) -> bool {
        self.reply.abandoned()
    }
}

/// Calls waiting behind the running turn. Boxed and allocated only while
/// calls wait: a call for an idle actor skips the mailbox (direct dispatch),
/// so most actors never need one, and an empty one costs one pointer.
#[derive(Debug, Default)]
#[allow(clippy::box_collection)] // a thin pointer on purpose: 8 bytes per actor, not 32
pub(crate) struct Mailbox(Option<Box<VecDeque<Envelope>>>);

impl Mailbox {
    pub(crate) fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |q| q.len())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn push_back(&mut self, env: Envelope) {
        self.0.get_or_insert_with(Default::default).push_back(env);
    }

    pub(crate) fn front(&self) -> Option<&Envelope> {
        self.0.as_ref()?.front()
    }

    pub(crate) fn push_front(&mut self, env: Envelope) {
        self.0.get_or_insert_with(Default::default).push_front(env);
    }

    pub(crate) fn pop_front(&mut self) -> Option<Envelope> {
        let queue = self.0.as_mut()?;
        let env = queue.pop_front();
        if queue.is_empty() {
            // Give the buffer back: most actors are idle most of the time.
            self.0 = None;
        }
        env
    }

    /// Whether all that waits is durable tells held behind a retry's
    /// backoff: stored, so a shutdown need not wait for them (the actor's
    /// next activation delivers them).
    pub(crate) fn only_held_retries(&self, now: tokio::time::Instant) -> bool {
        let Some(queue) = self.0.as_ref() else {
            return false;
        };
        queue
            .front()
            .and_then(|env| env.inbox.as_ref())
            .is_some_and(|tag| tag.in_backoff(now))
            && queue.iter().all(|env| env.inbox.is_some())
    }

    /// Drops the deliveries of stored durable tells (their store entry
    /// outlives the activation); returns each one's seq and whether it was
    /// a retry.
    pub(crate) fn drop_stored_tells(&mut self) -> Vec<(u64, bool)> {
        let Some(queue) = self.0.as_mut() else {
            return Vec::new();
        };
        let mut dropped = Vec::new();
        queue.retain(|env| match &env.inbox {
            Some(tag) if tag.ack.is_none() && tag.delivery.seq != 0 => {
                dropped.push((tag.delivery.seq, tag.delivery.attempts > 0));
                false
            }
            _ => true,
        });
        if queue.is_empty() {
            self.0 = None;
        }
        dropped
    }

    /// Takes out the calls `pick` chooses, keeping the others in order:
    /// turns of a timer deleted, or of an actor purged, while they waited.
    pub(crate) fn take_where(&mut self, pick: impl Fn(&Envelope) -> bool) -> Vec<Envelope> {
        let Some(queue) = self.0.as_mut() else {
            return Vec::new();
        };
        if !queue.iter().any(&pick) {
            return Vec::new();
        }
        let mut taken = Vec::new();
        let mut kept = VecDeque::with_capacity(queue.len());
        for env in queue.drain(..) {
            if pick(&env) {
                taken.push(env);
            } else {
                kept.push_back(env);
            }
        }
        if kept.is_empty() {
            self.0 = None;
        } else {
            **queue = kept;
        }
        taken
    }

    /// Takes the first call that is not a durable tell's delivery.
    pub(crate) fn pop_first_not_inbox(&mut self) -> Option<Envelope> {
        let queue = self.0.as_mut()?;
        let at = queue.iter().position(|env| env.inbox.is_none())?;
        let env = queue.remove(at);
        if queue.is_empty() {
            self.0 = None;
        }
        env
    }

    /// The span of the oldest traced call waiting, if any.
    pub(crate) fn first_trace_span(&self) -> Option<tracing::Span> {
        self.0.as_ref()?.iter().find_map(|env| {
            let trace = env.extra.as_ref()?.trace.as_ref()?;
            Some(trace.span.clone())
        })
    }

    /// Empties the mailbox, returning what was in it.
    pub(crate) fn take_all(&mut self) -> VecDeque<Envelope> {
        self.0.take().map(|q| *q).unwrap_or_default()
    }
}
