//! `NativeSession`: the app kept attached (`troupe_sdk_core::reconnect`),
//! for the TypeScript SDK's `App` on this core.
//!
//! Before each attempt the core calls the JS `credentials` function (on the
//! event loop, through a threadsafe function whose return value comes back
//! here) for the token metadata and the TLS files as they are now. What the
//! session brings reaches JS through [`NativeSession::take`] as a list of
//! [`NativeEvent`]s, in order: each registration, the messages of one
//! generation pushed since the last take as one serialized `DaemonBatch`
//! (encoded here, on the runtime thread, so the event loop decodes one buffer
//! per burst), each outage, and last how the session ended.

use std::sync::Arc;
use std::time::Duration;

use napi::bindgen_prelude::Buffer;
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::Status;
use napi_derive::napi;
use parking_lot::Mutex;
use prost::Message;
use tokio::sync::oneshot;
use troupe_sdk_core::connect::{ConnectOptions, TlsOptions};
use troupe_sdk_core::proto::{app_message, AppMessage, Register};
use troupe_sdk_core::reconnect::{
    AppSession, Credentials, ReconnectPolicy, SessionEnd, SessionEvent, SessionLayer,
};
use troupe_sdk_core::retry::BudgetOptions;
use troupe_sdk_core::CallError;

mod events;

use events::{append, lost, NativeEvent, Pending};

use crate::client::{NativeClient, NativeRetryBudget};
use crate::error::decode;
use crate::wake::{Inbox, WakeFn};
use crate::{metadata_pairs, runtime, NodeError};

/// What the JS `credentials` function returns: the token metadata (flat:
/// key, value, ...) and the PEM files as read just now; or `failed`, a
/// description, when reading them threw (the layer keeps the error itself
/// and throws it when the session ends with `"credentials"`).
#[napi(object)]
// napi's Buffer has no Debug (and a TLS key must never reach a log line).
#[allow(missing_debug_implementations)]
pub struct NativeCredentials {
    pub metadata: Vec<String>,
    pub ca: Option<Buffer>,
    pub cert: Option<Buffer>,
    pub key: Option<Buffer>,
    pub failed: Option<String>,
}

/// The JS credentials function, `() => NativeCredentials`: weak, so it never
/// holds the process open.
pub type CredentialsFn = ThreadsafeFunction<(), NativeCredentials, (), Status, false, true>;

/// Connection settings other than the per-attempt credentials.
#[napi(object)]
#[derive(Debug)]
pub struct NativeSessionOptions {
    pub address: String,
    pub max_receive_bytes: Option<u32>,
    /// The first pause between attempts, and the one after a registered stream.
    pub initial_delay_ms: f64,
    /// Pauses double up to this.
    pub max_delay_ms: f64,
}

/// Credentials as JS gave them, copied out of its buffers on its thread.
type Given = Result<
    (
        Vec<String>,
        Option<Vec<u8>>,
        Option<Vec<u8>>,
        Option<Vec<u8>>,
    ),
    String,
>;

struct Layer {
    credentials: CredentialsFn,
    events: Arc<Inbox<Vec<Pending>>>,
}

impl Layer {
    async fn ask(&self) -> Given {
        let (tx, rx) = oneshot::channel::<Given>();
        let status = self.credentials.call_with_return_value(
            (),
            ThreadsafeFunctionCallMode::NonBlocking,
            move |got, _env| {
                let pem = |b: Option<Buffer>| b.map(|b| b.to_vec());
                let given = match got {
                    Ok(c) => match c.failed {
                        Some(failed) => Err(failed),
                        None => Ok((c.metadata, pem(c.ca), pem(c.cert), pem(c.key))),
                    },
                    Err(e) => Err(e.reason.clone()),
                };
                // The session stopped waiting: nothing to hand over.
                let _ = tx.send(given);
                Ok(())
            },
        );
        if status != Status::Ok {
            return Err(format!("cannot ask the app for its credentials ({status})"));
        }
        rx.await
            .unwrap_or_else(|_| Err("the app did not give its credentials".to_owned()))
    }
}

impl SessionLayer for Layer {
    type Error = String;

    async fn credentials(&self) -> Result<Credentials, String> {
        let (flat, ca, cert, key) = self.ask().await?;
        let metadata = metadata_pairs(flat).map_err(|e| e.to_string())?;
        let tls = TlsOptions::from_pems(ca, cert, key).map_err(|e| e.to_string())?;
        Ok(Credentials { metadata, tls })
    }

    fn on_event(&self, event: SessionEvent<String>) {
        match event {
            SessionEvent::Messages {
                generation,
                messages,
            } => self.events.push(|q| append(q, generation, messages)),
            SessionEvent::Registered {
                generation,
                registered,
            } => {
                let bytes = registered.encode_to_vec();
                self.events
                    .push(|q| q.push(Pending::Registered(generation, bytes)));
            }
            SessionEvent::Lost { outage, first, .. } => {
                self.events.push(|q| q.push(lost(outage, first)));
            }
            SessionEvent::Ended(end) => {
                let pending = match end {
                    SessionEnd::Stopped => Pending::Ended("stopped", None),
                    SessionEnd::Refused(e) => Pending::Ended("refused", Some(e)),
                    SessionEnd::Credentials(m) => {
                        Pending::Ended("credentials", Some(CallError::new(tonic::Code::Unknown, m)))
                    }
                    SessionEnd::Connect(e) => Pending::Ended(
                        "connect",
                        Some(CallError::new(tonic::Code::InvalidArgument, e.to_string())),
                    ),
                };
                self.events.push(|q| q.push(pending));
            }
        }
    }
}

#[napi]
#[allow(missing_debug_implementations)]
pub struct NativeSession {
    options: ConnectOptions,
    /// The size of each connection's budget for the turns' calls, or none.
    budget: Option<BudgetOptions>,
    running: Mutex<Option<Arc<AppSession>>>,
    events: Arc<Inbox<Vec<Pending>>>,
}

fn delay(ms: f64, what: &'static str) -> Result<Duration, NodeError> {
    Duration::try_from_secs_f64(ms / 1000.0).map_err(|_| NodeError::Options(what))
}

#[napi]
impl NativeSession {
    /// Starts attaching (and re-attaching) with the serialized `Register`;
    /// `credentials` is called before each attempt, `wake` when events wait.
    /// `retry_budget` bounds the retries of the calls the turns make on one
    /// connection together, as a client's; the layer always passes it, null
    /// (or nothing) for no budget.
    #[napi(constructor)]
    pub fn new(
        options: NativeSessionOptions,
        register: Buffer,
        credentials: CredentialsFn,
        wake: WakeFn,
        retry_budget: Option<NativeRetryBudget>,
    ) -> napi::Result<Self> {
        let register: Register = decode(&register, "troupe.v1.Register")?;
        let budget = retry_budget
            .map(|b| BudgetOptions::from(b).checked())
            .transpose()
            .map_err(NodeError::Budget)?;
        let policy = ReconnectPolicy {
            initial_delay: delay(
                options.initial_delay_ms,
                "initialDelayMs must be a duration",
            )?,
            max_delay: delay(options.max_delay_ms, "maxDelayMs must be a duration")?,
        };
        let connect = ConnectOptions {
            address: options.address,
            tls: None,
            max_receive_bytes: options.max_receive_bytes.map(|n| n as usize),
        };
        let events = Arc::new(Inbox::new(wake));
        let layer = Arc::new(Layer {
            credentials,
            events: events.clone(),
        });
        let session = {
            let _entered = runtime()?.enter();
            AppSession::start(connect.clone(), register, policy, layer)
        };
        Ok(Self {
            options: connect,
            budget,
            running: Mutex::new(Some(Arc::new(session))),
            events,
        })
    }

    /// A client for the calls made from turns, on the connection of the
    /// latest attempt (so the app's receive limit and TLS apply to them),
    /// with a fresh retry budget of the session's `retry_budget`, so that
    /// the turns' calls on one connection share one, as gRPC throttles per
    /// channel.
    #[napi]
    pub fn client(&self, wake: WakeFn) -> napi::Result<NativeClient> {
        let channel = self.session()?.channel().ok_or(NodeError::Closed)?;
        Ok(NativeClient::on_channel(
            channel,
            &self.options,
            self.budget,
            wake,
        )?)
    }

    /// Queues a serialized `AppMessage` of stream `generation` (an answer,
    /// or an `AppBatch` of them, unpacked here: the core batches as the
    /// daemon allows) for the writer; dropped when that stream is gone.
    /// Never blocks.
    #[napi]
    pub fn send(&self, generation: i64, message: Buffer) -> napi::Result<()> {
        let message: AppMessage = decode(&message, "troupe.v1.AppMessage")?;
        let Ok(session) = self.session() else {
            return Ok(());
        };
        let generation = u64::try_from(generation).unwrap_or(0);
        let answers = match message.kind {
            Some(app_message::Kind::Batch(batch)) => batch.messages,
            _ => vec![message],
        };
        // Queued from a task on the runtime's one worker, which is where the
        // writer runs too: it cannot take the first answer of what JS had ready
        // together before the rest is queued, so they go out in one write. A
        // lone answer takes the same way, so answers keep JS's order.
        runtime()?.spawn(async move {
            for answer in answers {
                session.send(generation, answer);
            }
        });
        Ok(())
    }

    /// What happened since the last take, in order.
    #[napi]
    pub fn take(&self) -> Vec<NativeEvent> {
        self.events
            .take()
            .into_iter()
            .map(Pending::into_event)
            .collect()
    }

    /// Ends the session at once (the stream, an attempt, or the pause between
    /// two); in-flight turns' answers are dropped (the daemon fails them with
    /// the stream). An `"ended"` event (`"stopped"`) follows unless it had
    /// ended already.
    #[napi]
    pub fn stop(&self) {
        if let Some(session) = self.running.lock().take() {
            session.stop();
        }
    }
}

impl NativeSession {
    fn session(&self) -> Result<Arc<AppSession>, NodeError> {
        self.running.lock().clone().ok_or(NodeError::Closed)
    }
}
