//! `NativeSession`: one app stream, for one `Session` of the TypeScript SDK
//! (which re-connects by making a new one).
//!
//! What the stream brings reaches JS through [`NativeSession::take`] as one
//! [`NativeEvents`]: `Registered` first, then every message the daemon pushed
//! since the last take as one serialized `DaemonBatch` (encoded here, on the
//! runtime thread, so the event loop decodes one buffer per burst), and last
//! how the stream ended.

use std::sync::Arc;

use napi::bindgen_prelude::Buffer;
use napi_derive::napi;
use parking_lot::Mutex;
use prost::Message;
use tokio::task::JoinHandle;
use troupe_sdk_core::app::{self, AppEvent, AppSender, Attached};
use troupe_sdk_core::connect::ConnectOptions;
use troupe_sdk_core::proto::{app_message, AppMessage, DaemonMessage, Register};
use troupe_sdk_core::{AttachError, CallError};

use crate::client::NativeClient;
use crate::error::decode;
use crate::wake::{Inbox, Queue, WakeFn};
use crate::{channel, metadata_pairs, runtime, NativeConnect, NativeStatus, NodeError};

/// `DaemonBatch.messages` is field 1: each message is appended as that field,
/// so the queued bytes are always a whole `DaemonBatch`.
const BATCH_FIELD: u32 = 1;

/// How the stream ended: `stage` is `"refused"` (a status before
/// `Registered`: `status.code` says whether re-connecting can help),
/// `"failed"` (it ended otherwise before `Registered`; code 2, UNKNOWN) or
/// `"ended"` (after it; code 0 when the daemon closed it cleanly).
#[napi(object)]
#[derive(Debug)]
pub struct NativeEnd {
    pub stage: String,
    pub status: NativeStatus,
}

/// What arrived since the last take, in this order.
#[napi(object)]
// napi's Buffer has no Debug (and a TLS key must never reach a log line).
#[allow(missing_debug_implementations)]
pub struct NativeEvents {
    /// The serialized `Registered`.
    pub registered: Option<Buffer>,
    /// A serialized `DaemonBatch` of every message pushed since, batches
    /// flattened, in order.
    pub messages: Option<Buffer>,
    pub end: Option<NativeEnd>,
}

/// The stream's reader starts inside `app::attach`, before this crate can
/// queue `Registered`: what it pushes meanwhile is held back until then, so JS
/// always sees `Registered` first.
#[derive(Debug, Default)]
struct Pending {
    /// `Registered` was queued (or taken): messages and the end may go.
    open: bool,
    registered: Option<Vec<u8>>,
    messages: Vec<u8>,
    end: Option<NativeEnd>,
}

impl Queue for Pending {
    fn is_empty(&self) -> bool {
        let refused = self.end.as_ref().is_some_and(|e| e.stage != "ended");
        self.registered.is_none()
            && !refused
            && (!self.open || (self.messages.is_empty() && self.end.is_none()))
    }

    fn take(&mut self) -> Self {
        if self.open {
            return std::mem::replace(
                self,
                Self {
                    open: true,
                    ..Self::default()
                },
            );
        }
        let refused = self.end.as_ref().is_some_and(|e| e.stage != "ended");
        Self {
            end: if refused { self.end.take() } else { None },
            ..Self::default()
        }
    }
}

impl Pending {
    fn append(&mut self, msgs: Vec<DaemonMessage>) {
        for msg in msgs {
            prost::encoding::message::encode(BATCH_FIELD, &msg, &mut self.messages);
        }
    }
}

fn end(stage: &str, e: CallError) -> NativeEnd {
    NativeEnd {
        stage: stage.to_owned(),
        status: e.into(),
    }
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

#[napi]
#[derive(Debug)]
pub struct NativeSession {
    /// Dropped by `close`, so the connection ends with the session (see
    /// `NativeClient::calls`).
    channel: Mutex<Option<tonic::transport::Channel>>,
    options: ConnectOptions,
    events: Arc<Inbox<Pending>>,
    stream: Arc<Mutex<Stream>>,
}

#[napi]
impl NativeSession {
    /// A session on its own channel; `wake` is called when events wait.
    #[napi(constructor)]
    pub fn new(options: NativeConnect, wake: WakeFn) -> napi::Result<Self> {
        let (channel, options) = channel(options)?;
        Ok(Self {
            channel: Mutex::new(Some(channel)),
            options,
            events: Arc::new(Inbox::new(wake)),
            stream: Arc::default(),
        })
    }

    /// A client for the calls made from turns, on this session's connection
    /// (so the app's receive limit bounds their replies too).
    #[napi]
    pub fn client(&self, wake: WakeFn) -> napi::Result<NativeClient> {
        let channel = self.channel()?;
        Ok(NativeClient::on_channel(channel, &self.options, wake))
    }

    /// Opens the stream and registers with the serialized `Register`;
    /// `metadata` (flat: the app token) goes with the stream.
    #[napi]
    pub fn attach(&self, register: Buffer, metadata: Vec<String>) -> napi::Result<()> {
        let register: Register = decode(&register, "troupe.v1.Register")?;
        let metadata = metadata_pairs(metadata)?;
        let mut stream = self.stream.lock();
        if stream.attaching.is_some() {
            return Err(NodeError::Attached.into());
        }
        let (channel, options) = (self.channel()?, self.options.clone());
        let (events, shared) = (self.events.clone(), self.stream.clone());
        let task = runtime()?.spawn(async move {
            let reader_events = events.clone();
            let on_event = move |event| match event {
                AppEvent::Messages(msgs) => reader_events.push(|q| q.append(msgs)),
                AppEvent::Ended(result) => {
                    let status = result
                        .err()
                        .unwrap_or_else(|| CallError::new(tonic::Code::Ok, ""));
                    reader_events.push(|q| q.end = Some(end("ended", status)));
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
                    // Queued ahead of any message: JS reads `registered` first.
                    events.push(|q| {
                        q.registered = Some(registered);
                        q.open = true;
                    });
                }
                Err(AttachError::Refused(e)) => events.push(|q| q.end = Some(end("refused", e))),
                Err(other) => {
                    let e = CallError::new(tonic::Code::Unknown, other.to_string());
                    events.push(|q| q.end = Some(end("failed", e)));
                }
            }
        });
        stream.attaching = Some(task);
        Ok(())
    }

    /// Queues a serialized `AppMessage` (an answer, or an `AppBatch` of
    /// them, unpacked here: the core batches as the daemon allows) for the
    /// writer; false once the stream is gone. Never blocks.
    #[napi]
    pub fn send(&self, message: Buffer) -> napi::Result<bool> {
        let message: AppMessage = decode(&message, "troupe.v1.AppMessage")?;
        let Some(sender) = self.stream.lock().sender.clone() else {
            return Ok(false);
        };
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
                sender.send(answer);
            }
        });
        Ok(true)
    }

    /// What arrived since the last take.
    #[napi]
    pub fn take(&self) -> NativeEvents {
        let pending = self.events.take();
        NativeEvents {
            registered: pending.registered.map(Buffer::from),
            messages: (!pending.messages.is_empty()).then(|| pending.messages.into()),
            end: pending.end,
        }
    }

    /// Ends the stream (in-flight turns' answers are dropped; the daemon
    /// fails them with the stream).
    #[napi]
    pub fn close(&self) {
        let mut stream = self.stream.lock();
        if let Some(task) = stream.attaching.take() {
            task.abort();
        }
        stream.sender = None;
        stream.attached = None;
        self.channel.lock().take();
    }
}

impl NativeSession {
    fn channel(&self) -> Result<tonic::transport::Channel, NodeError> {
        self.channel.lock().clone().ok_or(NodeError::Closed)
    }
}
