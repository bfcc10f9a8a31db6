//! `troupe._native.Session`: one app stream, for one `_Session` of the
//! Python SDK (which re-connects by making a new one).
//!
//! Events reach Python through the session's inbox, as tuples:
//! `("registered", Registered bytes)`; `("refused", code, message, trailers)`
//! when a status ended the stream before that, `("failed", None, message, [])`
//! when it ended otherwise; then `(kind, message bytes)` for each message the
//! daemon pushes (`"turn"`, `"activate"`, `"deactivate"`, the inner message
//! serialized); and last `("ended", code, message)`, code 0 for a clean close.

use std::sync::Arc;

use parking_lot::Mutex;
use prost::Message;
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tokio::task::JoinHandle;
use troupe_sdk_core::app::{self, AppEvent, AppSender, Attached};
use troupe_sdk_core::connect::ConnectOptions;
use troupe_sdk_core::proto::{daemon_message, AppMessage, DaemonMessage, Register};
use troupe_sdk_core::AttachError;

use crate::client::Client;
use crate::inbox::Inbox;
use crate::{channel, runtime};

#[derive(Debug)]
enum Event {
    Registered(Vec<u8>),
    Refused(i32, String, Vec<(String, String)>),
    Failed(String),
    Message(&'static str, Vec<u8>),
    Ended(i32, String),
}

#[derive(Debug, Default)]
struct Stream {
    /// The attach under way (registration, then nothing): aborted by close.
    attaching: Option<JoinHandle<()>>,
    /// The registered stream; dropping it ends the stream.
    attached: Option<Attached>,
    /// Where answers go; dropped by close so the writer ends.
    sender: Option<AppSender>,
}

#[pyclass(module = "troupe._native", frozen)]
#[derive(Debug)]
pub(crate) struct Session {
    channel: tonic::transport::Channel,
    options: ConnectOptions,
    events: Arc<Inbox<Event>>,
    stream: Arc<Mutex<Stream>>,
}

/// The message inside a daemon message, serialized, with its kind's name.
fn event_of(msg: DaemonMessage) -> Event {
    let kind = app::kind_name(&msg);
    let bytes = match msg.kind {
        Some(daemon_message::Kind::Turn(m)) => m.encode_to_vec(),
        Some(daemon_message::Kind::Activate(m)) => m.encode_to_vec(),
        Some(daemon_message::Kind::Deactivate(m)) => m.encode_to_vec(),
        // Unexpected here; Python logs the kind and ignores it.
        _ => Vec::new(),
    };
    Event::Message(kind, bytes)
}

#[pymethods]
impl Session {
    #[new]
    #[pyo3(signature = (address, ca=None, cert=None, key=None, max_receive_bytes=None))]
    fn new(
        address: String,
        ca: Option<Vec<u8>>,
        cert: Option<Vec<u8>>,
        key: Option<Vec<u8>>,
        max_receive_bytes: Option<usize>,
    ) -> PyResult<Self> {
        let (channel, options) = channel(address, ca, cert, key, max_receive_bytes)?;
        let events = Arc::new(Inbox::new().map_err(|e| PyOSError::new_err(e.to_string()))?);
        Ok(Self {
            channel,
            options,
            events,
            stream: Arc::default(),
        })
    }

    /// The socket to watch for events (`loop.add_reader`).
    fn fileno(&self) -> i32 {
        self.events.fileno()
    }

    /// A client for the calls made from turns, on this session's connection
    /// (so the app's receive limit bounds their replies too).
    fn client(&self) -> PyResult<Client> {
        Client::on_channel(self.channel.clone(), &self.options)
    }

    /// Opens the stream and registers with the serialized `Register`;
    /// `metadata` (the app token) goes with the stream.
    fn attach(&self, register: &[u8], metadata: Vec<(String, String)>) -> PyResult<()> {
        let register = Register::decode(register)
            .map_err(|e| PyValueError::new_err(format!("not a troupe.v1.Register: {e}")))?;
        let mut stream = self.stream.lock();
        if stream.attaching.is_some() {
            return Err(PyRuntimeError::new_err("this session has attached already"));
        }
        let (channel, options) = (self.channel.clone(), self.options.clone());
        let (events, shared) = (self.events.clone(), self.stream.clone());
        let task = runtime()?.spawn(async move {
            let reader_events = events.clone();
            let on_event = move |event| match event {
                AppEvent::Messages(msgs) => reader_events.push_all(msgs.into_iter().map(event_of)),
                AppEvent::Ended(Ok(())) => reader_events.push(Event::Ended(0, String::new())),
                AppEvent::Ended(Err(e)) => {
                    reader_events.push(Event::Ended(e.code as i32, e.message))
                }
            };
            match app::attach(channel, &options, &metadata, register, on_event).await {
                Ok(attached) => {
                    let registered = attached.registered.encode_to_vec();
                    {
                        let mut stream = shared.lock();
                        stream.sender = Some(attached.sender.clone());
                        stream.attached = Some(attached);
                    }
                    events.push(Event::Registered(registered));
                }
                Err(AttachError::Refused(e)) => {
                    events.push(Event::Refused(e.code as i32, e.message, e.trailers))
                }
                Err(other) => events.push(Event::Failed(other.to_string())),
            }
        });
        stream.attaching = Some(task);
        Ok(())
    }

    /// Queues serialized `AppMessage`s (answers) for the writer, in order;
    /// false once the stream is gone. Never blocks. Python hands over what
    /// its event loop produced in one pass: the writer is woken once for them
    /// all, where a wake per answer would cost a thread switch per turn.
    fn send(&self, messages: Vec<Bound<'_, PyBytes>>) -> PyResult<bool> {
        let stream = self.stream.lock();
        let Some(sender) = stream.sender.as_ref() else {
            return Ok(false);
        };
        let mut sent = true;
        for message in messages {
            let message = AppMessage::decode(message.as_bytes())
                .map_err(|e| PyValueError::new_err(format!("not a troupe.v1.AppMessage: {e}")))?;
            sent &= sender.send(message);
        }
        Ok(sent)
    }

    /// The events that arrived since the last take.
    fn take<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        self.events
            .take()
            .into_iter()
            .map(|event| {
                Ok(match event {
                    Event::Message(kind, bytes) => (kind, PyBytes::new(py, &bytes))
                        .into_pyobject(py)?
                        .into_any(),
                    Event::Registered(bytes) => ("registered", PyBytes::new(py, &bytes))
                        .into_pyobject(py)?
                        .into_any(),
                    Event::Refused(code, message, trailers) => ("refused", code, message, trailers)
                        .into_pyobject(py)?
                        .into_any(),
                    Event::Failed(message) => {
                        ("failed", py.None(), message, Vec::<(String, String)>::new())
                            .into_pyobject(py)?
                            .into_any()
                    }
                    Event::Ended(code, message) => {
                        ("ended", code, message).into_pyobject(py)?.into_any()
                    }
                })
            })
            .collect()
    }

    /// Ends the stream (in-flight turns' answers are dropped; the daemon
    /// fails them with the stream).
    fn close(&self) {
        let mut stream = self.stream.lock();
        if let Some(task) = stream.attaching.take() {
            task.abort();
        }
        stream.sender = None;
        stream.attached = None;
    }
}
