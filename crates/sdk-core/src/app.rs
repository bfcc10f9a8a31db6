//! The app's `AppHost.Attach` stream: one registration, then the daemon's
//! pushes in and the app's answers out.
//!
//! [`register`] sends `Register` and waits for `Registered`; a status instead
//! is an [`AttachError::Refused`] whose code tells the layer whether
//! re-connecting could help. [`Registration::start`] (or [`attach`], both at
//! once) then starts a reader task that hands each frame's messages (a
//! `DaemonBatch` flattened, in order; a message sent in pieces once whole) to
//! the layer's callback, and ends with one [`AppEvent::Ended`]. Answers go
//! through [`AppSender::send`], which never blocks: they queue for the writer
//! ([`crate::batch`]).

use std::sync::Arc;

use prost::Message;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tonic::Streaming;
use troupe_proto::parts::Reassembly;
use troupe_proto::v1::app_host_client::AppHostClient;
use troupe_proto::v1::{
    app_message, daemon_message, AppMessage, DaemonMessage, Register, Registered,
};

use crate::batch::{Batcher, DaemonReads};
use crate::client::with_metadata;
use crate::connect::ConnectOptions;
use crate::{AttachError, CallError};

/// What the reader hands the layer.
#[derive(Debug)]
pub enum AppEvent {
    /// The messages of one frame, batches flattened; never `Registered`.
    Messages(Vec<DaemonMessage>),
    /// The stream is over: `Ok` when the daemon closed it cleanly (it is
    /// stopping or restarting), else the status that ended it.
    Ended(Result<(), CallError>),
}

/// Queues answers for the stream's writer.
#[derive(Debug, Clone)]
pub struct AppSender {
    tx: mpsc::UnboundedSender<AppMessage>,
}

impl AppSender {
    /// Queues `msg`; false once the stream is gone (its answer has nowhere to
    /// go, and the daemon fails that work when the stream ends).
    pub fn send(&self, msg: AppMessage) -> bool {
        self.tx.send(msg).is_ok()
    }
}

/// A registered app stream. Dropping it ends the stream.
#[derive(Debug)]
pub struct Attached {
    pub registered: Registered,
    pub sender: AppSender,
    reader: JoinHandle<()>,
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Opens the stream on `channel`, registers, and starts the reader, which
/// calls `on_event` from a runtime thread (it must not block).
///
/// `metadata` goes with the stream's request: the app token, if any.
pub async fn attach<F>(
    channel: Channel,
    options: &ConnectOptions,
    metadata: &[(String, String)],
    register: Register,
    on_event: F,
) -> Result<Attached, AttachError>
where
    F: FnMut(AppEvent) + Send + 'static,
{
    Ok(self::register(channel, options, metadata, register)
        .await?
        .start(on_event))
}

/// A stream the daemon registered, whose reader has not started: what it
/// pushes waits in the stream until [`Registration::start`], so a layer can
/// handle `Registered` before any message.
#[derive(Debug)]
pub struct Registration {
    pub registered: Registered,
    tx: mpsc::UnboundedSender<AppMessage>,
    incoming: Streaming<DaemonMessage>,
    /// The most one message (whole, or in pieces) may hold.
    receive_limit: usize,
}

impl Registration {
    /// Where the stream's answers go, usable before the reader starts.
    pub fn sender(&self) -> AppSender {
        AppSender {
            tx: self.tx.clone(),
        }
    }

    /// Starts the reader, which calls `on_event` from a runtime thread (it
    /// must not block).
    pub fn start<F>(self, on_event: F) -> Attached
    where
        F: FnMut(AppEvent) + Send + 'static,
    {
        let reader = tokio::spawn(read(self.incoming, self.receive_limit, on_event));
        Attached {
            registered: self.registered,
            sender: AppSender { tx: self.tx },
            reader,
        }
    }
}

/// Opens the stream on `channel`, sends `Register` and waits for
/// `Registered`. `metadata` goes with the stream's request: the app token,
/// if any. The registration says the app takes messages in pieces: the
/// reader puts them back together.
pub async fn register(
    channel: Channel,
    options: &ConnectOptions,
    metadata: &[(String, String)],
    mut register: Register,
) -> Result<Registration, AttachError> {
    register.accepts_parts = true;
    let (tx, rx) = mpsc::unbounded_channel();
    let daemon = Arc::new(DaemonReads::default());
    let first = AppMessage {
        kind: Some(app_message::Kind::Register(register)),
    };
    // Queued before the stream opens, so Register is the first message.
    if tx.send(first).is_err() {
        return Err(AttachError::EndedEarly);
    }
    let outgoing = Batcher::new(rx, daemon.clone()).into_stream();
    let request =
        with_metadata(tonic::Request::new(outgoing), metadata).map_err(AttachError::Refused)?;
    let mut client = AppHostClient::new(channel)
        .max_decoding_message_size(options.decoding_limit())
        .max_encoding_message_size(usize::MAX);
    let mut incoming = client
        .attach(request)
        .await
        .map_err(|s| AttachError::Refused(s.into()))?
        .into_inner();
    let registered = match incoming.message().await {
        Ok(Some(DaemonMessage {
            kind: Some(daemon_message::Kind::Registered(r)),
        })) => r,
        Ok(Some(other)) => return Err(AttachError::Unexpected(kind_name(&other))),
        Ok(None) => return Err(AttachError::EndedEarly),
        Err(status) => return Err(AttachError::Refused(status.into())),
    };
    daemon.learn(&registered);
    tracing::debug!(
        daemon_version = %registered.daemon_version,
        accepts_batches = registered.accepts_batches,
        accepts_parts = registered.accepts_parts,
        "app stream registered"
    );
    Ok(Registration {
        registered,
        tx,
        incoming,
        receive_limit: options.decoding_limit(),
    })
}

async fn read<F>(mut incoming: Streaming<DaemonMessage>, receive_limit: usize, mut on_event: F)
where
    F: FnMut(AppEvent) + Send + 'static,
{
    let mut pieces = Reassembly::new(receive_limit);
    let end = loop {
        let msg = match incoming.message().await {
            Ok(Some(DaemonMessage {
                kind: Some(daemon_message::Kind::Part(part)),
            })) => match whole(&mut pieces, part) {
                Ok(Some(msg)) => msg,
                Ok(None) => continue,
                Err(status) => break Err(CallError::from(status)),
            },
            Ok(Some(msg)) => msg,
            Ok(None) => break Ok(()),
            Err(status) => break Err(CallError::from(status)),
        };
        match msg.kind {
            Some(daemon_message::Kind::Batch(batch)) => {
                on_event(AppEvent::Messages(batch.messages))
            }
            _ => on_event(AppEvent::Messages(vec![msg])),
        }
    };
    match &end {
        Ok(()) => tracing::debug!("the daemon closed the app stream"),
        Err(e) => tracing::debug!(code = ?e.code, message = %e.message, "app stream ended"),
    }
    on_event(AppEvent::Ended(end));
}

/// Adds `part` to the message being received; that message once whole. A
/// status (which ends the stream) when the pieces are more than the app
/// takes or are not a `DaemonMessage`.
fn whole(
    pieces: &mut Reassembly,
    part: troupe_proto::v1::MessagePart,
) -> Result<Option<DaemonMessage>, tonic::Status> {
    let Some(bytes) = pieces
        .push(part)
        .map_err(|e| tonic::Status::resource_exhausted(e.to_string()))?
    else {
        return Ok(None);
    };
    DaemonMessage::decode(bytes).map(Some).map_err(|e| {
        tonic::Status::internal(format!(
            "the daemon's pieces of a message (MessagePart) are not a DaemonMessage: {e}; \
             the daemon and the SDK disagree on the app protocol, install matching versions"
        ))
    })
}

/// The name of a message's kind, as the SDKs' messages spell it.
pub fn kind_name(msg: &DaemonMessage) -> &'static str {
    match &msg.kind {
        Some(daemon_message::Kind::Registered(_)) => "registered",
        Some(daemon_message::Kind::Activate(_)) => "activate",
        Some(daemon_message::Kind::Turn(_)) => "turn",
        Some(daemon_message::Kind::Deactivate(_)) => "deactivate",
        Some(daemon_message::Kind::Batch(_)) => "batch",
        Some(daemon_message::Kind::Part(_)) => "part",
        Some(daemon_message::Kind::Cancel(_)) => "cancel",
        None => "None",
    }
}
