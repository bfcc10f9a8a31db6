//! The rarer client RPCs as bytes in, bytes out: state reads, reminders,
//! alarms and timers, so a language layer sends them on the core's channel
//! without a gRPC library of its own.
//!
//! The layer already has the messages' types (it builds and reads them), so
//! the core carries their serialized bytes through tonic's `Grpc::unary` with
//! a codec that does not decode them; only the methods in [`METHODS`] are
//! accepted, so a layer cannot reach past the client API with it.

use bytes::{Buf, BufMut, Bytes};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

/// The `troupe.v1.ActorClient` methods besides Invoke and Tell (which have
/// their own calls, with keys and retries): what `Client` and an actor's
/// context send.
pub const METHODS: &[&str] = &[
    "/troupe.v1.ActorClient/GetState",
    "/troupe.v1.ActorClient/SetReminder",
    "/troupe.v1.ActorClient/GetReminder",
    "/troupe.v1.ActorClient/DeleteReminder",
    "/troupe.v1.ActorClient/PauseReminder",
    "/troupe.v1.ActorClient/ResumeReminder",
    "/troupe.v1.ActorClient/ListReminders",
    "/troupe.v1.ActorClient/SetAlarm",
    "/troupe.v1.ActorClient/GetAlarm",
    "/troupe.v1.ActorClient/DeleteAlarm",
    "/troupe.v1.ActorClient/SetTimer",
    "/troupe.v1.ActorClient/DeleteTimer",
];

/// The method's path as given when it is one of [`METHODS`].
pub(crate) fn known(path: &str) -> Option<&'static str> {
    METHODS.iter().copied().find(|m| *m == path)
}

/// Passes already-serialized messages through untouched.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct BytesCodec;

impl Codec for BytesCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = BytesCodec;
    type Decoder = BytesCodec;

    fn encoder(&mut self) -> Self::Encoder {
        BytesCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        BytesCodec
    }
}

impl Encoder for BytesCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for BytesCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}
