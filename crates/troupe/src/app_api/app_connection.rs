//! One connected app as the runtime sees it: an [`ActorHost`] whose work
//! goes down the app's stream tagged with a call id, parked in `pending`
//! until the app answers with that id, and failed when the stream ends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prost::Message as _;
use tokio::sync::{mpsc, Notify};
use tonic::Status;
use tracing::debug;
use troupe_proto::v1 as pb;
use troupe_runtime::{
    is_expiry_key, ActivateDone, ActivateRequest, ActorHost, ActorId, AppWork, DeactivateDone,
    DeactivateReason, DeactivateRequest, EventTrace, MessageBound, TooLargeForApp, TurnDone,
    TurnKind, TurnRequest,
};

use super::outbound::Sized;
use super::sweep::TimedOut;
use crate::{convert, telemetry};

pub(super) type Outbound = mpsc::UnboundedSender<Result<Sized, Status>>;

/// Work handed to the app, waiting for its answer.
pub(super) enum Pending {
    Activate(ActivateDone),
    /// With when it must be answered by, and the type's turn timeout.
    Turn(TurnDone, Instant, Duration),
    Deactivate(DeactivateDone),
}

/// One connected app.
pub(super) struct AppConnection {
    pub(super) name: String,
    /// Down the stream; `None` once the stream is closed, so late work is
    /// refused at once instead of queueing for nobody.
    pub(super) outbound: Mutex<Option<Outbound>>,
    pub(super) pending: Mutex<HashMap<u64, Pending>>,
    pub(super) next_call_id: AtomicU64,
    /// Tells the reader to stop reading the app's side of the stream once the
    /// daemon closed it, so the stream ends even if the app keeps its side
    /// open (otherwise a graceful stop waits for the app to hang up).
    pub(super) closed: Notify,
    /// Call ids of turns failed for running past their timeout.
    pub(super) timed_out: Mutex<TimedOut>,
    /// Largest reply a turn may give (`--max-payload-bytes`): a larger one
    /// fails that turn, not the stream.
    pub(super) max_payload_bytes: usize,
    /// Largest message the daemon sends down this stream, and whose limit
    /// that is.
    pub(super) max_message: (usize, MessageBound),
    /// The app stops a turn on `CancelTurn` (`Register.accepts_cancel`).
    pub(super) accepts_cancel: bool,
}

impl AppConnection {
    pub(super) fn next_call_id(&self) -> u64 {
        self.next_call_id.fetch_add(1, Ordering::Relaxed)
    }

    /// `message`, with its encoded size, if it fits in one message to the
    /// app; otherwise why not, for the callers waiting on the work.
    pub(super) fn sized(
        &self,
        kind: pb::daemon_message::Kind,
        actor: &ActorId,
        work: impl FnOnce() -> AppWork,
    ) -> Result<Sized, TooLargeForApp> {
        let message = pb::DaemonMessage { kind: Some(kind) };
        let bytes = message.encoded_len();
        let (limit, bound) = self.max_message;
        if bytes > limit {
            return Err(TooLargeForApp {
                actor: actor.clone(),
                work: work(),
                bytes,
                limit,
                bound,
                app: self.name.clone(),
            });
        }
        Ok(Sized { message, bytes })
    }

    /// Sends `message` (which carries `call_id`), parking `done` until the
    /// answer. If the stream is gone, `done` is dropped, failing the work.
    pub(super) fn send(&self, call_id: u64, done: Pending, message: Sized) {
        let outbound = self.outbound.lock();
        let Some(tx) = outbound.as_ref() else {
            drop(outbound);
            drop(done);
            return;
        };
        self.pending.lock().insert(call_id, done);
        let sent = tx.send(Ok(message));
        drop(outbound);
        if sent.is_err() {
            let parked = self.pending.lock().remove(&call_id);
            drop(parked);
        }
    }

    /// Ends the stream (with `error` as its status, if any) and fails all
    /// work still waiting on the app.
    pub(super) fn close(&self, error: Option<Status>) {
        if let Some(tx) = self.outbound.lock().take() {
            if let Some(status) = error {
                let _ = tx.send(Err(status));
            }
        }
        self.closed.notify_one();
        let pending = std::mem::take(&mut *self.pending.lock());
        drop(pending);
    }

    pub(super) fn take(&self, call_id: u64) -> Option<Pending> {
        let mut pending = self.pending.lock();
        let taken = pending.remove(&call_id);
        // After a burst (every actor deactivated at once) the map would keep
        // its size for good; give the memory back once it is mostly empty.
        if pending.capacity() > 4096 && pending.len() < pending.capacity() / 4 {
            let keep = pending.len() * 2;
            pending.shrink_to(keep);
        }
        taken
    }
}

impl ActorHost for AppConnection {
    fn name(&self) -> &str {
        &self.name
    }

    fn activate(&self, request: ActivateRequest, done: ActivateDone) {
        // The expiry times are the daemon's; the app is told of expired
        // keys as turns start.
        let state = request
            .state
            .iter()
            .filter(|(k, _)| !is_expiry_key(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let call_id = self.next_call_id();
        let activate = pb::daemon_message::Kind::Activate(pb::Activate {
            call_id,
            actor: Some(convert::actor_ref(&request.actor)),
            state,
            lease_deadline_unix_ms: request.lease_deadline_unix_ms,
        });
        match self.sized(activate, &request.actor, || AppWork::Activation) {
            Ok(message) => self.send(call_id, Pending::Activate(done), message),
            Err(too_large) => {
                debug!(app = %self.name, error = %too_large, "activation not sent");
                done.fail(too_large.into());
            }
        }
    }

    fn turn(&self, request: TurnRequest, mut done: TurnDone) {
        let actor = Some(convert::actor_ref(done.actor()));
        let mut extra = request.extra;
        let trace = extra.as_mut().and_then(|e| e.trace.take());
        let (traceparent, tracestate) = telemetry::turn_context(trace);
        if !traceparent.is_empty() {
            // Whatever the turn publishes continues the context its code
            // was handed: a watcher's work joins the same trace.
            done.trace_events(EventTrace {
                traceparent: traceparent.clone(),
                tracestate: tracestate.clone(),
            });
        }
        let (metadata, came_with, deadline_unix_ms) = convert::turn_extra(extra);
        // Every turn gets one, reminders' and timers' too: the app may make
        // calls from any turn.
        let chain = convert::chain_to_pb(&done.chain_for_calls(came_with.as_ref()));
        let kind = match request.kind {
            TurnKind::Call => pb::TurnKind::Call,
            TurnKind::Reminder => pb::TurnKind::Reminder,
            TurnKind::Timer => pb::TurnKind::Timer,
            TurnKind::Alarm => pb::TurnKind::Alarm,
        } as i32;
        let call_id = self.next_call_id();
        let turn = pb::daemon_message::Kind::Turn(pb::Turn {
            call_id,
            actor,
            kind,
            name: request.name.to_string(),
            payload: Some(convert::payload_to_pb(request.payload)),
            metadata,
            chain: Some(chain),
            traceparent,
            tracestate,
            deadline_unix_ms,
            lease_deadline_unix_ms: request.lease_deadline_unix_ms,
            expired_keys: request.expired_keys,
            unanswered: request.unanswered,
        });
        let work = || AppWork::Turn {
            name: request.name.to_string(),
        };
        match self.sized(turn, done.actor(), work) {
            Ok(message) => {
                let due = Instant::now() + request.timeout;
                let limit = request.timeout;
                self.send(call_id, Pending::Turn(done, due, limit), message);
            }
            Err(too_large) => {
                debug!(app = %self.name, error = %too_large, "turn not sent");
                done.fail(too_large.into());
            }
        }
    }

    fn deactivate(&self, request: DeactivateRequest, done: DeactivateDone) {
        let reason = match request.reason {
            // To the app, an actor shed for room is an idle one that went
            // early: the same hook, the same meaning.
            DeactivateReason::Idle | DeactivateReason::Capacity | DeactivateReason::Memory => {
                pb::deactivate::Reason::Idle
            }
            DeactivateReason::Shutdown => pb::deactivate::Reason::Shutdown,
            DeactivateReason::Admin => pb::deactivate::Reason::Admin,
            DeactivateReason::Migration => pb::deactivate::Reason::Migration,
            DeactivateReason::TurnTimeout => pb::deactivate::Reason::TurnTimeout,
        } as i32;
        let call_id = self.next_call_id();
        let message = pb::DaemonMessage {
            kind: Some(pb::daemon_message::Kind::Deactivate(pb::Deactivate {
                call_id,
                actor: Some(convert::actor_ref(&request.actor)),
                reason,
            })),
        };
        // Not checked against the app's limit: an actor ref and a call id
        // stay far below the least an app may declare.
        let bytes = message.encoded_len();
        self.send(call_id, Pending::Deactivate(done), Sized { message, bytes });
    }
}
