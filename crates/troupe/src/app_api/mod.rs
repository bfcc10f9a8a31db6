//! `troupe.v1.AppHost`: an app's stream, seen by the runtime as an
//! [`ActorHost`].
//!
//! Work for the app goes down the stream tagged with a call id; the handle
//! that finishes it waits in `pending` until the app answers with that id.
//! When the stream ends, every pending handle is dropped, which fails the
//! turns it held with UNAVAILABLE, and the runtime unbinds the app's actors.
//!
//! No message goes down the stream larger than the app can receive (the
//! limit it declared at registration, or the daemon's own): a turn or an
//! activation that would not fit fails its callers with RESOURCE_EXHAUSTED
//! before it is sent, since the app could only fail the whole stream on it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prost::Message as _;
use tokio::sync::{mpsc, Notify};
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status, Streaming};
use tracing::{debug, info, warn};
use troupe_proto::v1::{self as pb, API_VERSION};
use troupe_runtime::{
    is_expiry_key, ActivateDone, ActivateRequest, ActorHost, ActorId, AppWork, DeactivateDone,
    DeactivateReason, DeactivateRequest, EventTrace, MessageBound, Runtime, TooLargeForApp,
    TurnDone, TurnKind, TurnRequest,
};

use crate::convert::errors::{status_of, API_VERSION_TRAILER};
use crate::{convert, telemetry};

mod answers;
mod outbound;
mod sweep;

use answers::read_answers;
use outbound::Sized;
use sweep::{TimedOut, CANCEL_SWEEP};

/// How long a new stream may take to send its Register message.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);

/// This daemon's release, told to apps in `Registered.daemon_version`.
const DAEMON_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The smallest receive limit an app may declare. Every message besides
/// turns and activations (Registered, Deactivate: names and ids of at most
/// a few hundred bytes) must fit whatever the app declared, since those
/// have no caller to fail instead.
const MIN_APP_RECEIVE_BYTES: u64 = 64 * 1024;

type Outbound = mpsc::UnboundedSender<Result<Sized, Status>>;

/// Work handed to the app, waiting for its answer.
enum Pending {
    Activate(ActivateDone),
    /// With when it must be answered by, and the type's turn timeout.
    Turn(TurnDone, Instant, Duration),
    Deactivate(DeactivateDone),
}

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
    /// Largest message the daemon sends down this stream, and whose limit
    /// that is.
    max_message: (usize, MessageBound),
    /// The app stops a turn on `CancelTurn` (`Register.accepts_cancel`).
    accepts_cancel: bool,
}

impl AppConnection {
    fn next_call_id(&self) -> u64 {
        self.next_call_id.fetch_add(1, Ordering::Relaxed)
    }

    /// `message`, with its encoded size, if it fits in one message to the
    /// app; otherwise why not, for the callers waiting on the work.
    fn sized(
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
    fn send(&self, call_id: u64, done: Pending, message: Sized) {
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

/// Largest message an app may send, whole or in pieces, unless twice
/// `--max-payload-bytes` is larger: a reply over `--max-payload-bytes` but
/// under this fails its own turn with a clear error, not the whole stream.
pub const APP_MESSAGE_LIMIT: usize = 64 * 1024 * 1024;

/// The service; keeps every live connection so shutdown can end them.
#[derive(Clone)]
pub struct AppApi {
    runtime: Runtime,
    connections: Arc<Mutex<HashMap<u64, Arc<AppConnection>>>>,
    /// The most the daemon sends in one message on an app stream (the
    /// server's encoding limit): more would end the stream.
    max_message_bytes: usize,
}

impl std::fmt::Debug for AppApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppApi").finish_non_exhaustive()
    }
}

impl AppApi {
    /// `max_message_bytes`: the server's encoding limit for app streams.
    pub fn new(runtime: Runtime, max_message_bytes: usize) -> Self {
        Self {
            runtime,
            connections: Arc::default(),
            max_message_bytes,
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
            })?
            .map_err(|status| answers::broken_stream(&status))?;
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
        check_api_version(register.api_version, &register.sdk)?;
        let max_message = max_message(register.max_receive_bytes, self.max_message_bytes)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let connection = Arc::new(AppConnection {
            name: name.clone(),
            outbound: Mutex::new(Some(tx.clone())),
            pending: Mutex::new(HashMap::new()),
            next_call_id: AtomicU64::new(1),
            closed: Notify::new(),
            timed_out: Mutex::default(),
            max_payload_bytes: self.runtime.config().max_payload_bytes,
            max_message,
            accepts_cancel: register.accepts_cancel,
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
        // Overdue turns are looked for a few times per the shortest timeout;
        // turns whose callers left, every CANCEL_SWEEP.
        let longest = if connection.accepts_cancel {
            CANCEL_SWEEP
        } else {
            Duration::from_secs(1)
        };
        let sweep = registration
            .types
            .iter()
            .map(|t| t.turn_timeout / 4)
            .min()
            .unwrap_or(longest)
            .clamp(Duration::from_millis(10), longest);
        let registered = pb::DaemonMessage {
            kind: Some(pb::daemon_message::Kind::Registered(pb::Registered {
                types: registration
                    .types
                    .iter()
                    .map(|t| convert::type_options_to_pb(t))
                    .collect(),
                daemon_version: DAEMON_VERSION.to_owned(),
                accepts_batches: true,
                api_version: API_VERSION,
                accepts_parts: true,
            })),
        };
        let bytes = registered.encoded_len();
        // The receiver is alive (held below), so this cannot fail.
        let _ = tx.send(Ok(Sized {
            message: registered,
            bytes,
        }));
        drop(outbound);
        self.connections.lock().insert(host_id, connection.clone());
        info!(
            app = %name, sdk = %register.sdk, api_version = register.api_version, host_id,
            batches = register.accepts_batches, parts = register.accepts_parts,
            cancel = register.accepts_cancel,
            max_receive_bytes = register.max_receive_bytes, "app attached"
        );

        let runtime = self.runtime.clone();
        let connections = self.connections.clone();
        let answer_limit = APP_MESSAGE_LIMIT.max(self.max_message_bytes);
        tokio::spawn(async move {
            let error = read_answers(&connection, &mut inbound, sweep, answer_limit)
                .await
                .err();
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
            outbound::Accepts {
                batches: register.accepts_batches,
                parts: register.accepts_parts,
                max_bytes: max_message.0,
            },
        )))
    }
}

/// Refuses an app whose SDK speaks another app API version
/// (`Register.api_version`) than this daemon: its messages could mean
/// something else to us, so it fails at registration with a message that
/// says what to install, not later on a misread turn. `sdk` is the SDK's
/// own name and release (`Register.sdk`, already validated), for the message.
fn check_api_version(api_version: u32, sdk: &str) -> Result<(), Status> {
    // 0: an SDK from before the field. Every such SDK spoke version 1, the
    // version the field came with, so it is taken as 1: accepted while the
    // daemon speaks 1 (apps built before the check keep working), and
    // refused like any other mismatch once the version goes up.
    let app_version = if api_version == 0 { 1 } else { api_version };
    if app_version == API_VERSION {
        return Ok(());
    }
    let sdk = if sdk.is_empty() {
        "an SDK that did not name itself"
    } else {
        sdk
    };
    let mut status = Status::failed_precondition(format!(
        "app API version mismatch: the app's SDK ({sdk}) speaks app API version \
         {app_version}, this daemon (troupe {DAEMON_VERSION}) speaks version {API_VERSION}; \
         install matching versions: the SDK and the daemon ship together in \
         `pip install troupe` / `npm install @troupe/sdk` (or run the daemon built from \
         the same checkout as the SDK)"
    ));
    status
        .metadata_mut()
        .insert(API_VERSION_TRAILER, MetadataValue::from(API_VERSION));
    Err(status)
}

/// The largest message to send an app that declared `declared` bytes
/// (`Register.max_receive_bytes`, 0 for none) on a daemon that sends at
/// most `daemon` bytes, and whose limit that is.
fn max_message(declared: u64, daemon: usize) -> Result<(usize, MessageBound), Status> {
    if declared == 0 {
        return Ok((daemon, MessageBound::Daemon));
    }
    if declared < MIN_APP_RECEIVE_BYTES {
        return Err(Status::invalid_argument(format!(
            "Register.max_receive_bytes is {declared}, less than the daemon needs to send any \
             message ({MIN_APP_RECEIVE_BYTES}); declare at least {MIN_APP_RECEIVE_BYTES}, or 0 \
             if the app receives messages of any size"
        )));
    }
    Ok(match usize::try_from(declared) {
        Ok(app) if app < daemon => (app, MessageBound::App),
        _ => (daemon, MessageBound::Daemon),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smaller_of_the_apps_and_the_daemons_limit_applies() {
        let daemon = 8 << 20;
        assert_eq!(
            max_message(0, daemon).ok(),
            Some((daemon, MessageBound::Daemon))
        );
        assert_eq!(
            max_message(1 << 20, daemon).ok(),
            Some((1 << 20, MessageBound::App))
        );
        assert_eq!(
            max_message(u64::MAX, daemon).ok(),
            Some((daemon, MessageBound::Daemon))
        );
        let refused = max_message(1000, daemon)
            .err()
            .map(|s| (s.code(), s.message().to_owned()));
        assert!(
            matches!(&refused, Some((tonic::Code::InvalidArgument, m)) if m.contains("65536")),
            "{refused:?}"
        );
    }
}
