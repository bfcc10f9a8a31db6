//! The codec every generated client and server uses: prost's, except that
//! an encoder makes room for the whole message before writing it.
//!
//! tonic's encode buffer starts at 8 KiB and prost writes into it piece by
//! piece, so an 8 MiB payload grew it by doubling: ten reallocations, each
//! copying everything written so far, on every large call, turn and reply.
//! Reserving the encoded length first costs one length computation per
//! message (prost computes it again to check the room) and leaves a single
//! allocation.

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec, EncodeBuf, Encoder};
use tonic::Status;
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

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
        ReservingEncoder(ProstCodec::<T, U>::raw_encoder(BufferSettings::default()))
    }

    fn decoder(&mut self) -> Self::Decoder {
        // tonic's decoder already reserves a message's length once its
        // header is read.
        ProstCodec::<T, U>::raw_decoder(BufferSettings::default())
    }
}

/// prost's encoder, reserving the message's encoded length first.
#[derive(Debug, Clone)]
pub struct ReservingEncoder<T>(ProstEncoder<T>);

impl<T: Message> Encoder for ReservingEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.reserve(item.encoded_len());
        self.0.encode(item, buf)
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
