//! `troupe.v1.AppHost`: an app's stream, seen by the runtime as an
//! [`ActorHost`].
//!
//! Work for the app goes down the stream tagged with a call id; the handle
//! that finishes it waits in `pending` until the app answers with that id.
//! When the stream ends, every pending handle is dropped, which fails the
//! turns it held with UNAVAILABLE, and the runtime unbinds the app's actors.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::{mpsc, Notify};
use tonic::{Request, Response, Status, Streaming};
use tracing::{info, warn};
use troupe_proto::v1 as pb;
use troupe_runtime::{
    ActivateDone, ActivateRequest, ActorHost, CallError, DeactivateDone, DeactivateReason,
    DeactivateRequest, Runtime, TurnDone, TurnKind, TurnRequest,
};

use crate::convert::errors::status_of;
use crate::{convert, telemetry};

mod answers;
mod outbound;

use answers::read_answers;

/// How long a new stream may take to send its Register message.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);

type Outbound = mpsc::UnboundedSender<Result<pb::DaemonMessage, Status>>;

/// Work handed to the app, waiting for its answer.
enum Pending {
    Activate(ActivateDone),
    /// With when it must be answered by, and the type's turn timeout.
    Turn(TurnDone, Instant, Duration),
    Deactivate(DeactivateDone),
}

/// How many turns that timed out are remembered, so that their late
/// answers are dropped quietly rather than taken for protocol errors.
const REMEMBERED_TIMEOUTS: usize = 65_536;

/// One connected app.
struct AppConnection {
    name: String,
    /// Down the stream; `None` once the stream is closed, so late work is
    /// refused at once instead of queueing for nobody.
    outbound: Mutex<Option<Outbound>>,
    pending: Mutex<HashMap<u64, Pending>>,
    next_call_id: AtomicU64,
    /// Tells the reader to stop reading the app's side of the stream once the
    /// daemon closed it, so the stream ends even if the app keeps its side
    /// open (otherwise a graceful stop waits for the app to hang up).
    closed: Notify,
    /// Call ids of turns failed for running past their timeout.
    timed_out: Mutex<TimedOut>,
    /// Largest reply a turn may give (`--max-payload-bytes`): a larger one
    /// fails that turn, not the stream.
    max_payload_bytes: usize,
}

/// Call ids of timed-out turns, the oldest forgotten first.
#[derive(Default)]
struct TimedOut {
    ids: HashSet<u64>,
    order: VecDeque<u64>,
}

impl AppConnection {
    /// Sends `message` with a fresh call id, parking `done` until the answer.
    /// If the stream is gone, `done` is dropped, failing the work.
    fn send(&self, done: Pending, message: impl FnOnce(u64) -> pb::daemon_message::Kind) {
        let call_id = self.next_call_id.fetch_add(1, Ordering::Relaxed);
        let outbound = self.outbound.lock();
        let Some(tx) = outbound.as_ref() else {
            drop(outbound);
            drop(done);
            return;
        };
        self.pending.lock().insert(call_id, done);
        let sent = tx.send(Ok(pb::DaemonMessage {
            kind: Some(message(call_id)),
        }));
        drop(outbound);
        if sent.is_err() {
            let parked = self.pending.lock().remove(&call_id);
            drop(parked);
        }
    }

    /// Ends the stream (with `error` as its status, if any) and fails all
    /// work still waiting on the app.
    fn close(&self, error: Option<Status>) {
        if let Some(tx) = self.outbound.lock().take() {
            if let Some(status) = error {
                let _ = tx.send(Err(status));
            }
        }
        self.closed.notify_one();
        let pending = std::mem::take(&mut *self.pending.lock());
        drop(pending);
    }

    fn take(&self, call_id: u64) -> Option<Pending> {
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

    /// Fails every turn past its deadline with `TurnTimedOut`; the runtime
    /// then deactivates the actor through this app.
    fn fail_overdue_turns(&self, now: Instant) {
        let overdue: Vec<(u64, TurnDone, Duration)> = {
            let mut pending = self.pending.lock();
            let ids: Vec<u64> = pending
                .iter()
                .filter(|(_, p)| matches!(p, Pending::Turn(_, due, _) if *due <= now))
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter()
                .filter_map(|id| match pending.remove(&id) {
                    Some(Pending::Turn(done, _, limit)) => Some((id, done, limit)),
                    _ => None,
                })
                .collect()
        };
        for (call_id, done, limit) in overdue {
            {
                let mut timed_out = self.timed_out.lock();
                timed_out.ids.insert(call_id);
                timed_out.order.push_back(call_id);
                while timed_out.order.len() > REMEMBERED_TIMEOUTS {
                    if let Some(old) = timed_out.order.pop_front() {
                        timed_out.ids.remove(&old);
                    }
                }
            }
            let actor = done.actor().clone();
            warn!(app = %self.name, actor = %actor, ?limit, "turn timed out; deactivating the actor");
            done.fail(CallError::TurnTimedOut { actor, limit });
        }
    }

    /// Whether `call_id` is a turn that timed out (forgetting it).
    fn was_timed_out(&self, call_id: u64) -> bool {
        self.timed_out.lock().ids.remove(&call_id)
    }
}

impl ActorHost for AppConnection {
    fn name(&self) -> &str {
        &self.name
    }

    fn activate(&self, request: ActivateRequest, done: ActivateDone) {
        let state = request
            .state
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let actor = Some(convert::actor_ref(&request.actor));
        self.send(Pending::Activate(done), move |call_id| {
            pb::daemon_message::Kind::Activate(pb::Activate {
                call_id,
                actor,
                state,
                lease_deadline_unix_ms: request.lease_deadline_unix_ms,
            })
        });
    }

    fn turn(&self, request: TurnRequest, done: TurnDone) {
        let actor = Some(convert::actor_ref(done.actor()));
        let mut extra = request.extra;
        let trace = extra.as_mut().and_then(|e| e.trace.take());
        let (traceparent, tracestate) = telemetry::turn_context(trace);
        let (metadata, chain, deadline_unix_ms) = convert::turn_extra(extra, done.actor());
        let kind = match request.kind {
            TurnKind::Call => pb::TurnKind::Call,
            TurnKind::Reminder => pb::TurnKind::Reminder,
            TurnKind::Timer => pb::TurnKind::Timer,
            TurnKind::Alarm => pb::TurnKind::Alarm,
        } as i32;
        let turn = pb::Turn {
            call_id: 0,
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
        };
        let due = Instant::now() + request.timeout;
        let limit = request.timeout;
        self.send(Pending::Turn(done, due, limit), move |call_id| {
            pb::daemon_message::Kind::Turn(pb::Turn { call_id, ..turn })
        });
    }

    fn deactivate(&self, request: DeactivateRequest, done: DeactivateDone) {
        let reason = match request.reason {
            DeactivateReason::Idle => pb::deactivate::Reason::Idle,
            DeactivateReason::Shutdown => pb::deactivate::Reason::Shutdown,
            DeactivateReason::Admin => pb::deactivate::Reason::Admin,
            DeactivateReason::Migration => pb::deactivate::Reason::Migration,
            DeactivateReason::TurnTimeout => pb::deactivate::Reason::TurnTimeout,
        } as i32;
        let actor = Some(convert::actor_ref(&request.actor));
        self.send(Pending::Deactivate(done), move |call_id| {
            pb::daemon_message::Kind::Deactivate(pb::Deactivate {
                call_id,
                actor,
                reason,
            })
        });
    }
}

/// The service; keeps every live connection so shutdown can end them.
#[derive(Clone)]
pub struct AppApi {
    runtime: Runtime,
    connections: Arc<Mutex<HashMap<u64, Arc<AppConnection>>>>,
}

impl std::fmt::Debug for AppApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppApi").finish_non_exhaustive()
    }
}

impl AppApi {
    pub fn new(runtime: Runtime) -> Self {
        Self {
            runtime,
            connections: Arc::default(),
        }
    }

    /// Ends every app stream; apps see the stream close and reconnect later.
    pub fn close_all(&self) {
        let connections: Vec<_> = self.connections.lock().drain().map(|(_, c)| c).collect();
        for connection in connections {
            connection.close(None);
        }
    }
}

#[tonic::async_trait]
impl pb::app_host_server::AppHost for AppApi {
    type AttachStream = outbound::DaemonStream;

    async fn attach(
        &self,
        request: Request<Streaming<pb::AppMessage>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let mut inbound = request.into_inner();
        let first = tokio::time::timeout(REGISTER_TIMEOUT, inbound.message())
            .await
            .map_err(|_| {
                Status::deadline_exceeded(format!(
                    "no Register message within {REGISTER_TIMEOUT:?} of opening the app stream"
                ))
            })??;
        let register = match first.and_then(|m| m.kind) {
            Some(pb::app_message::Kind::Register(r)) => r,
            _ => {
                return Err(Status::failed_precondition(
                    "the first message on the app stream must be Register (app_name, types)",
                ))
            }
        };
        let name = if register.app_name.is_empty() {
            "unnamed-app".to_owned()
        } else {
            register.app_name
        };
        // Both end up in logs and status output.
        troupe_runtime::validate::name("app_name", &name).map_err(status_of)?;
        if !register.sdk.is_empty() {
            troupe_runtime::validate::name("sdk", &register.sdk).map_err(status_of)?;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let connection = Arc::new(AppConnection {
            name: name.clone(),
            outbound: Mutex::new(Some(tx.clone())),
            pending: Mutex::new(HashMap::new()),
            next_call_id: AtomicU64::new(1),
            closed: Notify::new(),
            timed_out: Mutex::default(),
            max_payload_bytes: self.runtime.config().max_payload_bytes,
        });
        let specs = register.types.into_iter().map(convert::type_spec).collect();
        // Work for the new host can be sent the moment it is registered
        // (calls may be waiting for its types); it queues behind this lock
        // until Registered, the answer to Register, is on the stream first.
        let outbound = connection.outbound.lock();
        let registration = self
            .runtime
            .register_host(connection.clone(), specs)
            .map_err(status_of)?;
        let host_id = registration.host_id;
        // Overdue turns are looked for a few times per the shortest timeout.
        let sweep = registration
            .types
            .iter()
            .map(|t| t.turn_timeout / 4)
            .min()
            .unwrap_or(Duration::from_secs(1))
            .clamp(Duration::from_millis(10), Duration::from_secs(1));
        let registered = pb::DaemonMessage {
            kind: Some(pb::daemon_message::Kind::Registered(pb::Registered {
                types: registration
                    .types
                    .iter()
                    .map(|t| convert::type_options_to_pb(t))
                    .collect(),
                daemon_version: env!("CARGO_PKG_VERSION").to_owned(),
                accepts_batches: true,
            })),
        };
        // The receiver is alive (held below), so this cannot fail.
        let _ = tx.send(Ok(registered));
        drop(outbound);
        self.connections.lock().insert(host_id, connection.clone());
        info!(app = %name, sdk = %register.sdk, host_id, batches = register.accepts_batches, "app attached");

        let runtime = self.runtime.clone();
        let connections = self.connections.clone();
        tokio::spawn(async move {
            let error = read_answers(&connection, &mut inbound, sweep).await.err();
            if let Some(status) = &error {
                warn!(app = %connection.name, host_id, error = %status.message(), "app stream failed");
            } else {
                info!(app = %connection.name, host_id, "app detached");
            }
            connection.close(error);
            connections.lock().remove(&host_id);
            runtime.unregister_host(host_id);
        });
        Ok(Response::new(outbound::stream(
            rx,
            register.accepts_batches,
        )))
    }
}
