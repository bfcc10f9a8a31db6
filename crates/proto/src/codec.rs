//! The codec every generated client and server uses: prost's, except that
//! an encoder makes room for the whole message before writing it.
//!
//! tonic's encode buffer starts at 8 KiB and prost writes into it piece by
//! piece, so an 8 MiB payload grew it by doubling: ten reallocations, each
//! copying everything written so far, on every large call, turn and reply.
//! The encoder computes the length once, reserves it and writes the message
//! (what `Message::encode` does, minus its check for room, which a growing
//! buffer never fails), leaving a single allocation.

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec, EncodeBuf, Encoder};
use tonic::Status;
use tonic_prost::{ProstCodec, ProstDecoder};

/// prost's codec with [`ReservingEncoder`]s.
#[derive(Debug, Clone)]
pub struct ReservingCodec<T, U> {
    _pd: PhantomData<(T, U)>,
}

impl<T, U> Default for ReservingCodec<T, U> {
    fn default() -> Self {
        Self { _pd: PhantomData }
    }
}

impl<T, U> Codec for ReservingCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ReservingEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ReservingEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        // tonic's decoder already reserves a message's length once its
        // header is read.
        ProstCodec::<T, U>::raw_decoder(BufferSettings::default())
    }
}

/// prost's encoding, into room reserved for the whole message.
#[derive(Debug, Clone)]
pub struct ReservingEncoder<T>(PhantomData<T>);

impl<T: Message> Encoder for ReservingEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.reserve(item.encoded_len());
        item.encode_raw(buf);
        Ok(())
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}
