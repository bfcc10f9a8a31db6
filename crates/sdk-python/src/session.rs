//! `troupe._native.Session`: the app kept attached (`troupe_sdk_core::
//! reconnect`), for the Python SDK's `App.run` on this core.
//!
//! Before each attempt the core calls the Python `credentials` callable (on a
//! blocking-pool thread, with the GIL: once per attempt, so rare), which
//! returns `(metadata, ca, cert, key)` as read just now, or raises. Events
//! reach Python through the session's inbox, as tuples:
//! `("registered", generation, Registered bytes)`; `(kind, generation,
//! message bytes)` for each message the daemon pushes (`"turn"`,
//! `"activate"`, `"deactivate"`, the inner message serialized);
//! `("lost", outage, code, message, first)` when a stream ends or an attempt
//! fails (`outage`: `"closed"`, `"ended"`, `"refused"` or `"failed"`; code 0
//! when there is none; `first`: the first outage since the app was last
//! registered); and last `("ended", why, detail)`: `"stopped"` (None),
//! `"refused"` ((code, message, trailers)), `"credentials"` (the exception
//! the callable raised) or `"connect"` (a message).

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prost::Message;
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use troupe_sdk_core::app;
use troupe_sdk_core::connect::{ConnectOptions, TlsOptions};
use troupe_sdk_core::proto::{daemon_message, AppMessage, DaemonMessage, Register};
use troupe_sdk_core::reconnect::{
    AppSession, Credentials, Outage, ReconnectPolicy, SessionEnd, SessionEvent, SessionLayer,
};
use troupe_sdk_core::retry::{BudgetOptions, DEFAULT_MAX_TOKENS, DEFAULT_TOKEN_RATIO};

use crate::client::{budget_options, Client};
use crate::inbox::Inbox;
use crate::{py_call_error, runtime, PyCallError};

#[derive(Debug)]
enum Event {
    Registered(u64, Vec<u8>),
    Message(&'static str, u64, Vec<u8>),
    Lost(&'static str, i32, String, bool),
    Stopped,
    Refused(PyCallError),
    Credentials(PyErr),
    Connect(String),
}

/// The message inside a daemon message, serialized, with its kind's name.
fn event_of(generation: u64, msg: DaemonMessage) -> Event {
    let kind = app::kind_name(&msg);
    let bytes = match msg.kind {
        Some(daemon_message::Kind::Turn(m)) => m.encode_to_vec(),
        Some(daemon_message::Kind::Activate(m)) => m.encode_to_vec(),
        Some(daemon_message::Kind::Deactivate(m)) => m.encode_to_vec(),
        Some(daemon_message::Kind::Cancel(m)) => m.encode_to_vec(),
        // Unexpected here; Python logs the kind and ignores it.
        _ => Vec::new(),
    };
    Event::Message(kind, generation, bytes)
}

fn lost(outage: Outage, first: bool) -> Event {
    match outage {
        Outage::Closed => Event::Lost("closed", 0, String::new(), first),
        Outage::Ended(e) => Event::Lost("ended", e.code as i32, e.message, first),
        Outage::Refused(e) => Event::Lost("refused", e.code as i32, e.message, first),
        Outage::Failed(message) => Event::Lost("failed", 0, message, first),
    }
}

/// The Python side of the core's session: its credentials callable and its
/// inbox.
struct Layer {
    /// Shared with the blocking-pool thread that calls it (cloning a `Py`
    /// would take the GIL on the runtime's worker).
    credentials: Arc<Py<PyAny>>,
    events: Arc<Inbox<Event>>,
}

/// What the credentials callable returns.
type PyCredentials = (
    Vec<(String, String)>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
);

/// Calls the credentials callable; on a blocking-pool thread.
fn read_credentials(callable: &Py<PyAny>) -> PyResult<Credentials> {
    let (metadata, ca, cert, key) = Python::with_gil(|py| {
        callable
            .call0(py)
            .and_then(|got| got.extract::<PyCredentials>(py))
    })?;
    let tls =
        TlsOptions::from_pems(ca, cert, key).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(Credentials { metadata, tls })
}

impl SessionLayer for Layer {
    type Error = PyErr;

    async fn credentials(&self) -> PyResult<Credentials> {
        let callable = self.credentials.clone();
        // Off the runtime's one worker: waiting there for the GIL (held by the
        // event loop running handlers) would stall every stream and call.
        tokio::task::spawn_blocking(move || read_credentials(&callable))
            .await
            .map_err(|e| PyRuntimeError::new_err(format!("reading the credentials failed: {e}")))?
    }

    fn on_event(&self, event: SessionEvent<PyErr>) {
        match event {
            SessionEvent::Messages {
                generation,
                messages,
            } => self
                .events
                .push_all(messages.into_iter().map(|m| event_of(generation, m))),
            SessionEvent::Registered {
                generation,
                registered,
            } => self
                .events
                .push(Event::Registered(generation, registered.encode_to_vec())),
            SessionEvent::Lost { outage, first, .. } => self.events.push(lost(outage, first)),
            SessionEvent::Ended(end) => self.events.push(match end {
                SessionEnd::Stopped => Event::Stopped,
                SessionEnd::Refused(e) => Event::Refused(py_call_error(e)),
                SessionEnd::Credentials(e) => Event::Credentials(e),
                SessionEnd::Connect(e) => Event::Connect(e.to_string()),
            }),
        }
    }
}

#[pyclass(module = "troupe._native", frozen)]
pub(crate) struct Session {
    options: ConnectOptions,
    register: Register,
    policy: ReconnectPolicy,
    /// The size of each connection's budget for the turns' calls, or none.
    budget: Option<BudgetOptions>,
    layer: Arc<Layer>,
    events: Arc<Inbox<Event>>,
    running: Mutex<Option<AppSession>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("address", &self.options.address)
            .finish_non_exhaustive()
    }
}

fn seconds(value: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value)
        .map_err(|e| PyValueError::new_err(format!("{what} must be a duration in seconds: {e}")))
}

#[pymethods]
impl Session {
    /// `register`: the serialized `Register`; `credentials`: called before
    /// each attempt (see the module's doc); `retry_budget`: `(max_tokens,
    /// token_ratio)` of the retry budget of the calls the app's turns make
    /// (as `Client`'s), or None for none.
    #[new]
    #[pyo3(signature = (
        address,
        register,
        credentials,
        initial_delay,
        max_delay,
        max_receive_bytes=None,
        retry_budget=Some((DEFAULT_MAX_TOKENS, DEFAULT_TOKEN_RATIO)),
    ))]
    fn new(
        address: String,
        register: &[u8],
        credentials: Py<PyAny>,
        initial_delay: f64,
        max_delay: f64,
        max_receive_bytes: Option<usize>,
        retry_budget: Option<(u32, f64)>,
    ) -> PyResult<Self> {
        let register = Register::decode(register)
            .map_err(|e| PyValueError::new_err(format!("not a troupe.v1.Register: {e}")))?;
        let policy = ReconnectPolicy {
            initial_delay: seconds(initial_delay, "initial_delay")?,
            max_delay: seconds(max_delay, "max_delay")?,
        };
        let budget = budget_options(retry_budget)
            .map(BudgetOptions::checked)
            .transpose()
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let events = Arc::new(Inbox::new().map_err(|e| PyOSError::new_err(e.to_string()))?);
        let options = ConnectOptions {
            address,
            tls: None,
            max_receive_bytes,
        };
        Ok(Self {
            options,
            register,
            policy,
            budget,
            layer: Arc::new(Layer {
                credentials: Arc::new(credentials),
                events: events.clone(),
            }),
            events,
            running: Mutex::new(None),
        })
    }

    /// The socket to watch for events (`loop.add_reader`).
    fn fileno(&self) -> i32 {
        self.events.fileno()
    }

    /// Starts attaching (and re-attaching) to the daemon.
    fn start(&self) -> PyResult<()> {
        let mut running = self.running.lock();
        if running.is_some() {
            return Err(PyRuntimeError::new_err("this session has started already"));
        }
        let _entered = runtime()?.enter();
        *running = Some(AppSession::start(
            self.options.clone(),
            self.register.clone(),
            self.policy,
            self.layer.clone(),
        ));
        Ok(())
    }

    /// A client for the calls made from turns, on the connection of the
    /// latest attempt (so the app's receive limit and TLS apply to them),
    /// with a fresh retry budget of the session's `retry_budget`, so that
    /// the turns' calls on one connection share one, as gRPC throttles per
    /// channel.
    fn client(&self) -> PyResult<Client> {
        let channel = self.running.lock().as_ref().and_then(AppSession::channel);
        let channel =
            channel.ok_or_else(|| PyRuntimeError::new_err("this session has not connected"))?;
        Client::on_channel(channel, &self.options, self.budget)
    }

    /// Queues serialized `AppMessage`s (answers of stream `generation`) for
    /// the writer, in order; false when that stream is gone (the daemon
    /// failed that work with it). Never blocks. Python hands over what its
    /// event loop produced in one pass: the writer is woken once for them
    /// all, where a wake per answer would cost a thread switch per turn.
    fn send(&self, generation: u64, messages: Vec<Bound<'_, PyBytes>>) -> PyResult<bool> {
        let running = self.running.lock();
        let Some(session) = running.as_ref() else {
            return Ok(false);
        };
        let mut sent = true;
        for message in messages {
            let message = AppMessage::decode(message.as_bytes())
                .map_err(|e| PyValueError::new_err(format!("not a troupe.v1.AppMessage: {e}")))?;
            sent &= session.send(generation, message);
        }
        Ok(sent)
    }

    /// The events that arrived since the last take.
    fn take<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        self.events
            .take()
            .into_iter()
            .map(|event| {
                let tuple = match event {
                    Event::Message(kind, generation, bytes) => {
                        (kind, generation, PyBytes::new(py, &bytes)).into_pyobject(py)?
                    }
                    Event::Registered(generation, bytes) => {
                        ("registered", generation, PyBytes::new(py, &bytes)).into_pyobject(py)?
                    }
                    Event::Lost(outage, code, message, first) => {
                        ("lost", outage, code, message, first).into_pyobject(py)?
                    }
                    Event::Stopped => ("ended", "stopped", py.None()).into_pyobject(py)?,
                    Event::Refused(e) => ("ended", "refused", e).into_pyobject(py)?,
                    Event::Credentials(e) => {
                        ("ended", "credentials", e.into_value(py)).into_pyobject(py)?
                    }
                    Event::Connect(message) => ("ended", "connect", message).into_pyobject(py)?,
                };
                Ok(tuple.into_any())
            })
            .collect()
    }

    /// Ends the session at once (the stream, an attempt, or the pause between
    /// two); in-flight turns' answers are dropped (the daemon fails them with
    /// the stream). An `("ended", "stopped", None)` follows unless it had
    /// ended already.
    fn stop(&self) {
        if let Some(session) = self.running.lock().as_ref() {
            session.stop();
        }
    }
}
