//! One turn: handing it to the host, and applying what the host answered.
//!
//! A turn's state changes apply atomically when it ends (under the
//! activation's lock, all or nothing), then the caller gets its reply — at
//! once, or for `durable` types once the flush that stores the changes is
//! done — and the actor is scheduled again if more calls wait.

use std::sync::Arc;
use std::time::Duration;

use crate::activation::{Activation, Envelope, Status};
use crate::error::{CallError, Unavailable};
use crate::host::{TurnDone, TurnEvents, TurnMeta, TurnOutcome, TurnRequest};
use crate::host_registry::Binding;
use crate::idempotency::Lookup;
use crate::lifecycle::events::Ended;
use crate::metrics::Scheduled;
use crate::reply::{PublishingReply, Reply};
use crate::routing::lease_lapsed;
use crate::shared::Shared;
use crate::types::{
    ActorId, DeactivateReason, StateChange, StateMode, StateSnapshot, TurnKind, TRACE_TARGET,
};
use crate::validate;
use crate::watch::Origin;

/// A read-only turn returned state changes: refused, state unchanged.
fn readonly_wrote(actor: &ActorId, method: Option<&str>, changes: &[StateChange]) -> CallError {
    let mut keys: Vec<&str> = changes.iter().map(|c| c.key.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    CallError::FailedPrecondition(format!(
        "method '{}' of {actor} is read-only but changed state (keys: {}); the changes were \
         refused and the state is unchanged. Write state from a method that is not read-only",
        method.unwrap_or("?"),
        keys.join(", ")
    ))
}

/// The span of one turn, a child of its call's span.
fn turn_span(call: &tracing::Span, actor: &ActorId, method: &str, kind: TurnKind) -> tracing::Span {
    tracing::info_span!(
        target: TRACE_TARGET,
        parent: call,
        "troupe.turn",
        troupe.actor.r#type = %actor.ty,
        troupe.actor.id = %actor.id,
        troupe.method = %method,
        troupe.turn.kind = kind.as_str(),
        otel.status_code = tracing::field::Empty,
        error = tracing::field::Empty,
    )
}

impl Shared {
    /// Hands one turn to the host. The activation is already `Running` (and
    /// counted in `extra_turns` when it runs beside others).
    pub(crate) fn start_turn(
        self: &Arc<Self>,
        act: Arc<Activation>,
        binding: &Binding,
        env: Envelope,
        state: StateSnapshot,
        readonly: Option<Arc<str>>,
    ) {
        let key = crate::idempotency::turn_key(&env, readonly.is_some());
        if let Some(k) = key.as_deref() {
            let new_key = env.extra.as_ref().is_some_and(|e| e.new_key);
            match self.recorded_answer(&act, k, new_key) {
                // Answered before: the method must not run again.
                Lookup::Recorded(answer) => return self.replay(act, env, readonly, answer),
                Lookup::Stored | Lookup::AskStore => {
                    return self.ask_store_then_turn(act, env, state, readonly, key)
                }
                Lookup::New => {}
            }
        }
        self.hand_to_host(act, binding, env, state, readonly, key);
    }

    /// Gives the host a turn whose key (if any) has no recorded answer.
    pub(crate) fn hand_to_host(
        self: &Arc<Self>,
        act: Arc<Activation>,
        binding: &Binding,
        env: Envelope,
        state: StateSnapshot,
        readonly: Option<Arc<str>>,
        key: Option<Box<str>>,
    ) {
        let mut extra = env.extra;
        let span = extra.as_mut().and_then(|e| e.trace.as_mut()).map(|trace| {
            // The host sees the turn's span; the caller's W3C
            // context stays for hosts when nothing is exported.
            let span = turn_span(&trace.span, &act.id, &env.name, env.kind);
            trace.span = span.clone();
            Box::new(span)
        });
        if let Some(stats) = &binding.stats {
            let due = match (&env.reply, env.kind) {
                (Reply::Firing(firing), kind) => Some((
                    Scheduled::firing(kind == TurnKind::Alarm),
                    firing.due_unix_ms,
                )),
                (_, TurnKind::Timer) => extra
                    .as_ref()
                    .and_then(|e| e.timer_due_unix_ms)
                    .map(|due| (Scheduled::Timer, due)),
                _ => None,
            };
            if let Some((kind, due)) = due {
                let late = self.time.now_ms().saturating_sub(due);
                stats.firing_started(kind, Duration::from_millis(late));
            }
        }
        // A durable tell's failure is retried and kept as a dead letter.
        let unanswered =
            env.kind == TurnKind::Call && env.inbox.is_none() && env.reply.unanswered();
        let meta = TurnMeta {
            kind: env.kind,
            touch: env.touch,
            started: binding.stats.as_ref().map(|_| std::time::Instant::now()),
            readonly,
            inbox: env.inbox.map(|tag| Box::new(tag.delivery)),
            key_terms: extra.as_ref().map(|e| e.key_terms()).unwrap_or_default(),
            key,
            replayed: false,
            cancelled: false,
        };
        let (state, expired_keys) = self.expire_at_turn_start(&act, state);
        let request = TurnRequest {
            kind: env.kind,
            name: env.name,
            payload: env.payload,
            extra,
            state,
            timeout: binding.options.turn_timeout,
            lease_deadline_unix_ms: self.placement.lease_end_unix_ms().unwrap_or(0),
            expired_keys,
            unanswered,
        };
        let done = TurnDone {
            rt: self.clone(),
            act: Some(act),
            reply: env.reply,
            _slot: env.slot,
            meta,
            span,
            chain_turn: None,
            events: TurnEvents::default(),
        };
        binding.host.turn(request, done);
    }

    // Called by every turn's completion handle, from another module: inlined
    // there, the handle's outcome is not moved through a call of its own.
    #[inline]
    pub(crate) fn turn_finished(
        self: &Arc<Self>,
        act: Arc<Activation>,
        reply: Reply,
        meta: &TurnMeta,
        span: Option<&tracing::Span>,
        outcome: Result<TurnOutcome, CallError>,
        events: TurnEvents,
    ) {
        let touch = meta.touch;
        let mut inner = act.inner.lock();
        if inner.status == Status::Gone {
            // Fenced while the turn ran: its changes must not reach the store.
            // With the lease still held, only a newer owner's refusal of a
            // write drops an activation under a running turn.
            drop(inner);
            reply.send(Err(if self.placement.may_serve() {
                Unavailable::Fenced {
                    actor: act.id.clone(),
                }
                .into()
            } else {
                lease_lapsed()
            }));
            return;
        }
        // The lease ended and the fence is on its way: the actor may be
        // another daemon's already, so the turn's changes and answer must
        // not count.
        let outcome = if self.placement.may_serve() {
            outcome
        } else {
            Err(lease_lapsed())
        };
        // Whether the caller hears only once the turn's writes are stored;
        // asked only by turns that wrote something.
        let durable = |inner: &crate::activation::Inner| {
            self.config.write_through
                || inner
                    .binding
                    .as_ref()
                    .is_some_and(|b| b.options.state_mode == StateMode::Durable)
        };
        let mut hold_until_flushed = false;
        let result = match outcome {
            Ok(TurnOutcome {
                result: Ok(_),
                changes,
            }) if meta.readonly.is_some() && !changes.is_empty() => {
                Err(readonly_wrote(&act.id, meta.readonly.as_deref(), &changes))
            }
            Ok(TurnOutcome {
                result: Ok(payload),
                changes,
            }) => match validate::state_changes(&changes, self.config.max_payload_bytes)
                .and_then(|()| self.check_events(&events.events))
            {
                Ok(()) => {
                    if !changes.is_empty() {
                        self.record_changes(&act, &mut inner, &changes);
                        hold_until_flushed = durable(&inner);
                    }
                    Ok(payload)
                }
                Err(e) => Err(e),
            },
            Ok(TurnOutcome {
                result: Err(failure),
                ..
            }) => Err(CallError::Actor(failure)),
            Err(e) => Err(e),
        };
        // A turn stopped for its caller leaving did not answer the call: a
        // retry with its key must run the method, not hear that.
        let answered = !(meta.cancelled && result.is_err());
        if let Some(key) = meta.key.as_deref().filter(|_| answered) {
            if self.record_answer(&act, &mut inner, key, meta.key_terms, &result) {
                // The answer is stored beside the changes, and for a durable
                // type acknowledged only once it is.
                hold_until_flushed |= durable(&inner);
            }
        } else if meta.replayed {
            // A replay must not report an answer whose record is unwritten.
            hold_until_flushed = inner.is_dirty() && durable(&inner);
        }
        if let Err(e) = &result {
            if let Some(span) = span {
                span.record("otel.status_code", "ERROR");
                span.record("error", tracing::field::display(e));
            }
        }
        if let (Some(started), Some(stats)) = (
            meta.started,
            inner.binding.as_ref().and_then(|b| b.stats.as_ref()),
        ) {
            match &result {
                Ok(_) | Err(CallError::Actor(_)) => {
                    stats.turn(meta.kind, started.elapsed(), result.is_ok());
                    if result.is_ok() && !events.events.is_empty() {
                        stats.published(events.events.len());
                    }
                }
                Err(e) => {
                    if let Some(metrics) = &self.metrics {
                        metrics.call_failed(&act.id.ty, meta.kind, e);
                    }
                }
            }
        }
        // A durable tell's removal joins this turn's state changes, under
        // the same lock, so one flush writes both or neither.
        let retry = meta
            .inbox
            .as_deref()
            .and_then(|delivery| self.inbox_turn_ended(&act, &mut inner, delivery, &result));
        inner.turns = inner.turns.wrapping_add(1);
        if touch {
            inner.last_active_ms = self.clock.coarse_ms();
        }
        if matches!(result, Err(CallError::TurnTimedOut { .. })) {
            // The app may still be running it: the actor must not get
            // another turn on that instance.
            inner.set_retiring(true);
        }
        let mut deactivate = false;
        let mut retire = false;
        let mut wake = false;
        if inner.extra_turns > 0 {
            // Others of a read-only group, or the turn this one nested in,
            // are still running: the actor stays busy until the last ends.
            inner.extra_turns -= 1;
        } else if inner.host_lost() {
            inner.set_reading(false);
            inner.status = Status::Deactivating;
            deactivate = true;
        } else if inner.retiring() {
            inner.set_reading(false);
            inner.set_retiring(false);
            inner.status = Status::Deactivating;
            retire = true;
        } else {
            inner.set_reading(false);
            inner.status = Status::Idle;
            wake = inner.claim_wake();
        }
        let retry_due = retry
            .and_then(|(delivery, backoff)| self.hold_retry(&act, &mut inner, delivery, backoff));
        let publishing = result.is_ok() && !events.events.is_empty();
        if publishing {
            if let Some(binding) = &inner.binding {
                binding.published.mark();
            }
        }
        drop(inner);
        let reply = if publishing {
            self.publish_events(&act, events, hold_until_flushed, reply)
        } else {
            reply
        };
        if let Some(backoff) = retry_due {
            self.wake_after(act.clone(), backoff);
        }
        if hold_until_flushed && self.config.write_through {
            let (flusher, act) = (self.flusher.clone(), act.clone());
            tokio::spawn(async move {
                let result = match flusher.flush_actor(&act).await {
                    Ok(()) => result,
                    Err(e) => Err(e),
                };
                reply.send(result);
            });
        } else if hold_until_flushed {
            self.flusher.hold_reply(&act, reply, result);
        } else {
            reply.send(result);
        }
        if deactivate {
            tokio::spawn(
                self.clone()
                    .finish_deactivation(act, Vec::new(), Ended::AppDetached),
            );
        } else if retire {
            // Through its app, which learns to drop the stuck instance.
            self.deactivate(act, DeactivateReason::TurnTimeout);
        } else if wake {
            self.schedule(act);
        }
        self.notify_drains();
    }
}

impl Shared {
    /// Hands a succeeded turn's events to its watchers before its reply
    /// goes, so a caller that watches sees them once it has the answer; a
    /// reply held until the turn's writes are stored holds them too.
    fn publish_events(
        self: &Arc<Self>,
        act: &Arc<Activation>,
        events: TurnEvents,
        held_until_stored: bool,
        reply: Reply,
    ) -> Reply {
        let origin = Origin {
            published_unix_ms: self.time.now_ms(),
            trace: events.trace,
        };
        if !held_until_stored {
            self.events.publish(&act.id, events.events, origin);
            return reply;
        }
        match self
            .events
            .hold_until_stored(&act.id, events.events, origin)
        {
            Some(events) => Reply::Publishing(Box::new(PublishingReply {
                events,
                then: reply,
            })),
            None => reply,
        }
    }
}
