//! The framed protocol's bytes on a connection: the dialler's magic, each
//! `LinkFrame` behind its length (4 bytes, big-endian), frames read back
//! as slices of one buffer (so chunk data is not copied again), and the
//! writer that encodes whatever frames are ready into one write.
//!
//! The framed protocol exists because HTTP/2 streams cost a forwarded call
//! more than the call itself: each frame passes through hyper's connection
//! task, its stream bookkeeping and window updates, and tonic's decoder, on
//! both daemons. A link needs none of that: it is one ordered byte stream
//! whose messages already carry their own ids.

use std::future::Future;

use bytes::{Buf, BufMut, BytesMut};
use futures::{FutureExt, Stream, StreamExt};
use prost::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use troupe_proto::v1 as pb;

/// What a dialler writes first, so that the listener tells a link from an
/// HTTP/2 client (whose preface starts "PRI * HT") on the same port.
pub(crate) const MAGIC: [u8; 8] = *b"TRPLINK1";

const LENGTH_BYTES: usize = 4;

/// Stop gathering ready frames into one write past this many bytes.
const WRITE_BATCH_BYTES: usize = 512 * 1024;

/// How much to read at a time when no frame's length asks for more.
const READ_BYTES: usize = 64 * 1024;

/// Why a framed connection's bytes cannot be read as frames.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FramesError {
    #[error("the connection failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("a frame of {bytes} bytes exceeds the limit of {limit} bytes")]
    TooLarge { bytes: usize, limit: usize },
    #[error("a frame does not decode: {0}")]
    Undecodable(#[from] prost::DecodeError),
    #[error("the connection closed in the middle of a frame")]
    Truncated,
}

/// Where a link's reader takes its frames from: a framed connection or an
/// HTTP/2 stream. `next_frame` must be cancel-safe (it runs in `select!`).
pub(crate) trait FrameSource: Send {
    /// The next frame; `None` once the other side ended the stream cleanly.
    fn next_frame(&mut self) -> impl Future<Output = Result<Option<pb::LinkFrame>, String>> + Send;
}

impl FrameSource for tonic::Streaming<pb::LinkFrame> {
    async fn next_frame(&mut self) -> Result<Option<pb::LinkFrame>, String> {
        self.message()
            .await
            .map_err(|status| match std::error::Error::source(&status) {
                Some(source) => crate::root_cause(source),
                None => format!("{}: {}", status.code(), status.message()),
            })
    }
}

/// Frames read from one side of a framed connection.
pub(crate) struct FrameReader<R> {
    io: R,
    buffer: BytesMut,
    limit: usize,
}

impl<R: AsyncRead + Unpin + Send> FrameReader<R> {
    /// `limit`: the largest frame accepted.
    pub(crate) fn new(io: R, limit: usize) -> Self {
        Self {
            io,
            buffer: BytesMut::with_capacity(READ_BYTES),
            limit,
        }
    }

    /// The next frame, `None` at a clean end. Cancel-safe: bytes read stay
    /// in the buffer.
    pub(crate) async fn read_frame(&mut self) -> Result<Option<pb::LinkFrame>, FramesError> {
        loop {
            if let Some(frame) = self.decode()? {
                return Ok(Some(frame));
            }
            if self.io.read_buf(&mut self.buffer).await? == 0 {
                return if self.buffer.is_empty() {
                    Ok(None)
                } else {
                    Err(FramesError::Truncated)
                };
            }
        }
    }

    /// A whole frame from the buffer, or room reserved for the rest of it.
    fn decode(&mut self) -> Result<Option<pb::LinkFrame>, FramesError> {
        let Some(length) = self.buffer.get(..LENGTH_BYTES) else {
            self.buffer.reserve(READ_BYTES);
            return Ok(None);
        };
        let mut length_bytes = [0u8; LENGTH_BYTES];
        length_bytes.copy_from_slice(length);
        let length = usize::try_from(u32::from_be_bytes(length_bytes)).unwrap_or(usize::MAX);
        if length > self.limit {
            return Err(FramesError::TooLarge {
                bytes: length,
                limit: self.limit,
            });
        }
        let whole = LENGTH_BYTES.saturating_add(length);
        if self.buffer.len() < whole {
            self.buffer
                .reserve(whole.saturating_sub(self.buffer.len()).max(READ_BYTES));
            return Ok(None);
        }
        self.buffer.advance(LENGTH_BYTES);
        let frame = self.buffer.split_to(length).freeze();
        Ok(Some(pb::LinkFrame::decode(frame)?))
    }
}

impl<R: AsyncRead + Unpin + Send> FrameSource for FrameReader<R> {
    async fn next_frame(&mut self) -> Result<Option<pb::LinkFrame>, String> {
        self.read_frame().await.map_err(|e| e.to_string())
    }
}

/// Appends `frame` with its length to `buffer`.
pub(crate) fn encode_frame(frame: &pb::LinkFrame, buffer: &mut BytesMut) {
    let length = frame.encoded_len();
    buffer.reserve(LENGTH_BYTES.saturating_add(length));
    // A frame holds at most a message and a frame's worth besides, far
    // below 4 GiB; the reader refuses anything over its limit anyway.
    buffer.put_u32(u32::try_from(length).unwrap_or(u32::MAX));
    // Cannot fail: the room was reserved above.
    let _ = frame.encode(buffer);
}

/// Writes `frames` to `io` until they end, every frame ready at the time
/// in one write; then closes `io`'s sending side.
///
/// Before each write it lets the tasks already woken run once (as
/// `troupe-coalesce` does for HTTP/2), so the requests or replies they
/// produce leave in the same write: under load, one write and one wake-up
/// of the peer's reader carry many calls instead of one each.
pub(crate) async fn write_frames<W, S>(mut io: W, mut frames: S) -> std::io::Result<()>
where
    W: AsyncWrite + Unpin,
    S: Stream<Item = pb::LinkFrame> + Unpin,
{
    let mut buffer = BytesMut::with_capacity(READ_BYTES);
    let mut ended = false;
    while !ended {
        let Some(frame) = frames.next().await else {
            break;
        };
        encode_frame(&frame, &mut buffer);
        ended = gather(&mut frames, &mut buffer);
        if !ended && buffer.len() < WRITE_BATCH_BYTES {
            tokio::task::yield_now().await;
            ended = gather(&mut frames, &mut buffer);
        }
        io.write_all(&buffer).await?;
        io.flush().await?;
        buffer.clear();
    }
    io.shutdown().await
}

/// Encodes the frames ready now into `buffer`, up to a batch; whether the
/// frames ended.
fn gather<S: Stream<Item = pb::LinkFrame> + Unpin>(frames: &mut S, buffer: &mut BytesMut) -> bool {
    while buffer.len() < WRITE_BATCH_BYTES {
        match frames.next().now_or_never() {
            Some(Some(frame)) => encode_frame(&frame, buffer),
            Some(None) => return true,
            None => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};
    use troupe_proto::v1 as pb;

    use super::{encode_frame, write_frames, FrameReader, FramesError};

    fn frame(id: u64, data: &[u8]) -> pb::LinkFrame {
        pb::LinkFrame {
            chunks: vec![pb::LinkChunk {
                id,
                data: Bytes::copy_from_slice(data),
                last: true,
            }],
            ..pb::LinkFrame::default()
        }
    }

    #[tokio::test]
    async fn frames_written_in_batches_read_back_in_order() -> Result<(), FramesError> {
        let (near, far) = tokio::io::duplex(1024);
        let frames: Vec<pb::LinkFrame> = (0..50).map(|i| frame(i, &[7u8; 300])).collect();
        let sent = frames.clone();
        let writer = tokio::spawn(write_frames(near, futures::stream::iter(sent)));
        let mut reader = FrameReader::new(far, 4096);
        let mut got = Vec::new();
        while let Some(frame) = reader.read_frame().await? {
            got.push(frame);
        }
        assert_eq!(got, frames);
        assert!(matches!(writer.await, Ok(Ok(()))));
        Ok(())
    }

    #[tokio::test]
    async fn a_frame_over_the_limit_is_refused_before_it_is_read() {
        let mut bytes = BytesMut::new();
        encode_frame(&frame(1, &[0u8; 2000]), &mut bytes);
        let mut reader = FrameReader::new(&bytes[..], 1000);
        assert!(matches!(
            reader.read_frame().await,
            Err(FramesError::TooLarge { limit: 1000, .. })
        ));
    }

    #[tokio::test]
    async fn a_connection_cut_inside_a_frame_is_an_error_not_an_end() {
        let mut bytes = BytesMut::new();
        encode_frame(&frame(1, &[0u8; 100]), &mut bytes);
        let cut = &bytes[..bytes.len() - 10];
        let mut reader = FrameReader::new(cut, 1000);
        assert!(matches!(
            reader.read_frame().await,
            Err(FramesError::Truncated)
        ));
    }
}
