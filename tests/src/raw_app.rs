//! [`RawApp`]: the app stream at the message (and byte) level, for tests
//! that must misbehave.

use std::net::SocketAddr;

use anyhow::{anyhow, bail};
use bytes::{Buf, BufMut, Bytes};
use prost::Message as _;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{Status, Streaming};

use crate::*;

/// A codec that moves message bytes as they are, so a test can put anything
/// on the app stream.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        let n = src.remaining();
        Ok(Some(src.copy_to_bytes(n)))
    }
}

/// A turn's call chain as `type/id` names, outermost first.
pub fn chain_actors(turn: &pb::Turn) -> Vec<String> {
    turn.chain
        .iter()
        .flat_map(|c| c.actors.iter())
        .map(|a| format!("{}/{}", a.r#type, a.id))
        .collect()
}

/// A Register for `types` that asks for `CancelTurn`.
pub fn register_cancelling(app_name: &str, types: Vec<pb::ActorTypeSpec>) -> pb::AppMessage {
    let mut message = register_message(app_name, types);
    if let Some(pb::app_message::Kind::Register(register)) = message.kind.as_mut() {
        register.accepts_cancel = true;
    }
    message
}

pub fn register_message(app_name: &str, types: Vec<pb::ActorTypeSpec>) -> pb::AppMessage {
    pb::AppMessage {
        kind: Some(pb::app_message::Kind::Register(pb::Register {
            app_name: app_name.into(),
            types,
            sdk: "troupe-tests-raw".into(),
            accepts_batches: false,
            // It takes any size (see `RawApp::open`).
            max_receive_bytes: 0,
            api_version: pb::API_VERSION,
            // Tests that need pieces set this themselves.
            accepts_parts: false,
            // Tests of CancelTurn set this themselves.
            accepts_cancel: false,
        })),
    }
}

/// The app stream at the message level: the test decides what to send and
/// when. Dropping it closes the stream.
#[derive(Debug)]
pub struct RawApp {
    tx: mpsc::UnboundedSender<Bytes>,
    rx: Streaming<Bytes>,
}

impl RawApp {
    /// Opens the stream with `first` as its first message and waits for the
    /// daemon's response headers (the daemon reads the first message first).
    pub async fn open(addr: SocketAddr, first: Bytes) -> Result<RawApp, Status> {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .map_err(|e| Status::internal(e.to_string()))?
            .connect()
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        Self::open_over(channel, first).await
    }

    /// [`RawApp::open`] over a channel already connected (e.g. with TLS).
    pub async fn open_over(channel: Channel, first: Bytes) -> Result<RawApp, Status> {
        let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(usize::MAX);
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(first);
        let opened = async {
            grpc.ready()
                .await
                .map_err(|e| Status::unavailable(e.to_string()))?;
            grpc.streaming(
                tonic::Request::new(UnboundedReceiverStream::new(rx)),
                PathAndQuery::from_static("/troupe.v1.AppHost/Attach"),
                RawCodec,
            )
            .await
        };
        let response = tokio::time::timeout(WAIT, opened)
            .await
            .map_err(|_| Status::deadline_exceeded("test: Attach did not answer"))??;
        Ok(RawApp {
            tx,
            rx: response.into_inner(),
        })
    }

    /// Opens the stream, registers `types` and returns the daemon's answer.
    pub async fn register(
        addr: SocketAddr,
        types: Vec<pb::ActorTypeSpec>,
    ) -> anyhow::Result<(RawApp, pb::Registered)> {
        let channel = Channel::from_shared(format!("http://{addr}"))?
            .connect()
            .await?;
        Self::register_over(channel, types).await
    }

    /// [`RawApp::register`] over a channel already connected (e.g. with TLS).
    pub async fn register_over(
        channel: Channel,
        types: Vec<pb::ActorTypeSpec>,
    ) -> anyhow::Result<(RawApp, pb::Registered)> {
        Self::register_as(channel, register_message("raw-test-app", types)).await
    }

    /// [`RawApp::register_over`] with a Register of the test's own (e.g.
    /// one that sets `accepts_cancel`).
    pub async fn register_as(
        channel: Channel,
        register: pb::AppMessage,
    ) -> anyhow::Result<(RawApp, pb::Registered)> {
        let mut app = RawApp::open_over(channel, register.encode_to_vec().into()).await?;
        match app.recv().await?.and_then(|m| m.kind) {
            Some(pb::daemon_message::Kind::Registered(r)) => Ok((app, r)),
            other => bail!("expected Registered, got {other:?}"),
        }
    }

    pub fn send(&self, message: pb::AppMessage) -> anyhow::Result<()> {
        self.send_bytes(message.encode_to_vec().into())
    }

    pub fn send_bytes(&self, bytes: Bytes) -> anyhow::Result<()> {
        self.tx
            .send(bytes)
            .map_err(|_| anyhow!("raw app stream closed"))
    }

    /// The next daemon message (bounded wait); `Ok(None)` when the stream
    /// ended cleanly; the status when it ended with an error.
    pub async fn recv(&mut self) -> anyhow::Result<Option<pb::DaemonMessage>> {
        match within(WAIT, "a daemon message", self.rx.message()).await? {
            Ok(Some(bytes)) => Ok(Some(pb::DaemonMessage::decode(bytes)?)),
            Ok(None) => Ok(None),
            Err(status) => Err(anyhow::Error::new(status)),
        }
    }

    /// Reads until the daemon ends the stream; returns its final status
    /// (None for a clean end). Fails if the stream stays open.
    pub async fn ended(&mut self) -> anyhow::Result<Option<Status>> {
        loop {
            match within(WAIT, "the daemon to end the app stream", self.rx.message()).await? {
                Ok(Some(_)) => continue,
                Ok(None) => return Ok(None),
                Err(status) => return Ok(Some(status)),
            }
        }
    }

    /// Answers activations (with no changes) until a turn arrives.
    pub async fn next_turn(&mut self) -> anyhow::Result<pb::Turn> {
        loop {
            match self.recv().await?.and_then(|m| m.kind) {
                Some(pb::daemon_message::Kind::Activate(a)) => self.send(pb::AppMessage {
                    kind: Some(pb::app_message::Kind::Activated(pb::ActivateResult {
                        call_id: a.call_id,
                        error: None,
                        changes: Vec::new(),
                        ..Default::default()
                    })),
                })?,
                Some(pb::daemon_message::Kind::Turn(t)) => return Ok(t),
                other => bail!("expected Activate or Turn, got {other:?}"),
            }
        }
    }

    /// Answers turn `call_id` with a JSON reply and no state changes.
    pub fn reply(&self, call_id: u64, json: &str) -> anyhow::Result<()> {
        self.reply_publishing(call_id, json, &[])
    }

    /// [`RawApp::reply`], publishing `events` (JSON) to the actor's watchers.
    pub fn reply_publishing(
        &self,
        call_id: u64,
        json: &str,
        events: &[&str],
    ) -> anyhow::Result<()> {
        self.send(pb::AppMessage {
            kind: Some(pb::app_message::Kind::TurnResult(pb::TurnResult {
                call_id,
                outcome: Some(pb::turn_result::Outcome::Reply(json_payload(
                    json.to_owned(),
                ))),
                changes: Vec::new(),
                events: events
                    .iter()
                    .map(|e| json_payload((*e).to_owned()))
                    .collect(),
                ..Default::default()
            })),
        })
    }
}
