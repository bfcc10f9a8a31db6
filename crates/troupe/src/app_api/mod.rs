//! `troupe.v1.AppHost`: an app's stream, seen by the runtime as an
//! `ActorHost` (`app_connection`). This module owns the service: an app's
//! registration, and its stream's reader and writer.
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
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prost::Message as _;
use tokio::sync::{mpsc, Notify};
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status, Streaming};
use tracing::{info, warn};
use troupe_proto::v1::{self as pb, API_VERSION};
use troupe_runtime::{MessageBound, Runtime};

use crate::convert;
use crate::convert::errors::{status_of, API_VERSION_TRAILER};

mod answers;
mod app_connection;
mod outbound;
mod sweep;

use answers::read_answers;
use app_connection::{AppConnection, Pending};
use outbound::Sized;
use sweep::CANCEL_SWEEP;

/// How long a new stream may take to send its Register message.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);

/// This daemon's release, told to apps in `Registered.daemon_version`.
const DAEMON_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The smallest receive limit an app may declare. Every message besides
/// turns and activations (Registered, Deactivate: names and ids of at most
/// a few hundred bytes) must fit whatever the app declared, since those
/// have no caller to fail instead.
const MIN_APP_RECEIVE_BYTES: u64 = 64 * 1024;

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
