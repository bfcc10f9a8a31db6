//! The app's `AppHost.Attach` stream: one registration, then the daemon's
//! pushes in and the app's answers out.
//!
//! [`register`] sends `Register` and waits for `Registered`; a status instead
//! is an [`AttachError::Refused`] whose code tells the layer whether
//! re-connecting could help. [`Registration::start`] (or [`attach`], both at
//! once) then starts a reader task that hands each frame's messages (a
//! `DaemonBatch` flattened, in order) to the layer's callback, and ends with
//! one [`AppEvent::Ended`]. Answers go through [`AppSender::send`], which never
//! blocks: they queue for the writer ([`crate::batch`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tonic::Streaming;
use troupe_proto::v1::app_host_client::AppHostClient;
use troupe_proto::v1::{
    app_message, daemon_message, AppMessage, DaemonMessage, Register, Registered,
};

use crate::batch::Batcher;
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
        let reader = tokio::spawn(read(self.incoming, on_event));
        Attached {
            registered: self.registered,
            sender: AppSender { tx: self.tx },
            reader,
        }
    }
}

/// Opens the stream on `channel`, sends `Register` and waits for
/// `Registered`. `metadata` goes with the stream's request: the app token,
/// if any.
pub async fn register(
    channel: Channel,
    options: &ConnectOptions,
    metadata: &[(String, String)],
    register: Register,
) -> Result<Registration, AttachError> {
    let (tx, rx) = mpsc::unbounded_channel();
    let batches = Arc::new(AtomicBool::new(false));
    let first = AppMessage {
        kind: Some(app_message::Kind::Register(register)),
    };
    // Queued before the stream opens, so Register is the first message.
    if tx.send(first).is_err() {
        return Err(AttachError::EndedEarly);
    }
    let outgoing = Batcher::new(rx, batches.clone()).into_stream();
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
    batches.store(registered.accepts_batches, Ordering::Release);
    tracing::debug!(
        daemon_version = %registered.daemon_version,
        accepts_batches = registered.accepts_batches,
        "app stream registered"
    );
    Ok(Registration {
        registered,
        tx,
        incoming,
    })
}

async fn read<F>(mut incoming: Streaming<DaemonMessage>, mut on_event: F)
where
    F: FnMut(AppEvent) + Send + 'static,
{
    let end = loop {
        match incoming.message().await {
            Ok(Some(msg)) => match msg.kind {
                Some(daemon_message::Kind::Batch(batch)) => {
                    on_event(AppEvent::Messages(batch.messages))
                }
                _ => on_event(AppEvent::Messages(vec![msg])),
            },
            Ok(None) => break Ok(()),
            Err(status) => break Err(CallError::from(status)),
        }
    };
    match &end {
        Ok(()) => tracing::debug!("the daemon closed the app stream"),
        Err(e) => tracing::debug!(code = ?e.code, message = %e.message, "app stream ended"),
    }
    on_event(AppEvent::Ended(end));
}

/// The name of a message's kind, as the SDKs' messages spell it.
pub fn kind_name(msg: &DaemonMessage) -> &'static str {
    match &msg.kind {
        Some(daemon_message::Kind::Registered(_)) => "registered",
        Some(daemon_message::Kind::Activate(_)) => "activate",
        Some(daemon_message::Kind::Turn(_)) => "turn",
        Some(daemon_message::Kind::Deactivate(_)) => "deactivate",
        Some(daemon_message::Kind::Batch(_)) => "batch",
        None => "None",
    }
}
