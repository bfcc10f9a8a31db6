//! What one link stream writes and reads, without the stream: the outbox
//! that turns queued messages into frames (small messages first, large ones
//! cut into chunks that take turns), and the reassembly of chunks on the
//! other side. Pure, so the framing is tested without sockets.

use std::collections::{HashMap, VecDeque};

use bytes::{Bytes, BytesMut};
use prost::Message;
use troupe_proto::parts::{encode_around_bulk, Segments};
use troupe_proto::v1 as pb;

/// How an outbox cuts its frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Framing {
    /// Messages whose encoding is at least this long travel as chunks of
    /// this size; `None`: every message goes whole (one frame may then hold
    /// a message of any size ahead of everything queued behind it).
    pub(crate) chunk_bytes: Option<usize>,
    /// A frame stops taking whole messages past this many bytes.
    pub(crate) frame_bytes: usize,
}

/// How many large messages take turns at once. Interleaving every queued
/// one would make each finish only when all of them do (128 bulk callers:
/// every 512 KiB reply as late as the last); a couple at a time keeps the
/// link full while the rest wait whole, in order. Small messages overtake
/// them all the same.
const INTERLEAVED: usize = 2;

/// A large message on its way, piece by piece.
#[derive(Debug)]
struct Chunking {
    id: u64,
    /// What remains of its encoding (the rest of the message, then its
    /// payload, uncopied).
    rest: Segments,
}

/// Messages waiting for the stream, and how many bytes they hold.
#[derive(Debug)]
pub(crate) struct Outbox {
    framing: Framing,
    whole: VecDeque<(pb::LinkMessage, usize)>,
    chunked: VecDeque<Chunking>,
    bytes: usize,
}

impl Outbox {
    pub(crate) fn new(framing: Framing) -> Self {
        Self {
            framing,
            whole: VecDeque::new(),
            chunked: VecDeque::new(),
            bytes: 0,
        }
    }

    /// Bytes queued and not yet handed to the stream.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.whole.is_empty() && self.chunked.is_empty()
    }

    /// Queues `message`; returns its encoded size.
    pub(crate) fn push(&mut self, message: pb::LinkMessage) -> usize {
        let len = message.encoded_len();
        self.push_sized(message, len);
        len
    }

    /// Queues `message` whose encoded size the caller measured already.
    pub(crate) fn push_sized(&mut self, message: pb::LinkMessage, len: usize) {
        self.bytes = self.bytes.saturating_add(len);
        match self.framing.chunk_bytes {
            Some(chunk) if len > chunk => self.chunked.push_back(Chunking {
                id: message.id,
                rest: encode_around_bulk(message, chunk),
            }),
            _ => self.whole.push_back((message, len)),
        }
    }

    /// Drops everything queued (the stream broke); the ids it held.
    pub(crate) fn clear(&mut self) -> Vec<u64> {
        let ids = self
            .whole
            .drain(..)
            .map(|(m, _)| m.id)
            .chain(self.chunked.drain(..).map(|c| c.id))
            .collect();
        self.bytes = 0;
        ids
    }

    /// The next frame: whole messages first (at least one, then up to the
    /// frame size), then one chunk of each large message in turn, so a small
    /// message waits behind at most one frame's worth of bulk.
    pub(crate) fn next_frame(&mut self) -> Option<pb::LinkFrame> {
        if self.is_empty() {
            return None;
        }
        let mut frame = pb::LinkFrame::default();
        let mut size = 0usize;
        while let Some((_, len)) = self.whole.front() {
            if size > 0 && size.saturating_add(*len) > self.framing.frame_bytes {
                break;
            }
            let Some((message, len)) = self.whole.pop_front() else {
                break;
            };
            size = size.saturating_add(len);
            self.bytes = self.bytes.saturating_sub(len);
            frame.messages.push(message);
        }
        let chunk = self.framing.chunk_bytes.unwrap_or(usize::MAX);
        let mut turn = 0;
        while turn < self.chunked.len().min(INTERLEAVED) && size < self.framing.frame_bytes {
            let Some(large) = self.chunked.get_mut(turn) else {
                break;
            };
            let Some((data, last)) = large.rest.next_piece(chunk) else {
                break;
            };
            size = size.saturating_add(data.len());
            self.bytes = self.bytes.saturating_sub(data.len());
            frame.chunks.push(pb::LinkChunk {
                id: large.id,
                data,
                last,
            });
            if last {
                // The next one waiting moves up into this turn.
                self.chunked.remove(turn);
            } else {
                turn += 1;
            }
        }
        Some(frame)
    }
}

/// Why a stream's frames cannot be read: the stream is reset.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum WireError {
    #[error("a chunked message of {bytes}+ bytes exceeds the limit of {limit} bytes")]
    TooLarge { bytes: usize, limit: usize },
    #[error("a chunked message does not decode: {0}")]
    Undecodable(String),
}

/// Chunks received so far, by message id.
#[derive(Debug)]
pub(crate) struct Reassembly {
    partial: HashMap<u64, Pieces>,
    limit: usize,
}

/// One message's chunks, kept as received (each a slice of its frame,
/// not a copy) until the last one says how large the whole is.
#[derive(Debug, Default)]
struct Pieces {
    chunks: Vec<Bytes>,
    bytes: usize,
}

impl Reassembly {
    /// `limit`: the largest message accepted.
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            partial: HashMap::new(),
            limit,
        }
    }

    /// Takes one chunk; the message once its last chunk is in.
    pub(crate) fn add(
        &mut self,
        chunk: pb::LinkChunk,
    ) -> Result<Option<pb::LinkMessage>, WireError> {
        let pieces = self.partial.entry(chunk.id).or_default();
        let bytes = pieces.bytes.saturating_add(chunk.data.len());
        if bytes > self.limit {
            self.partial.remove(&chunk.id);
            return Err(WireError::TooLarge {
                bytes,
                limit: self.limit,
            });
        }
        pieces.bytes = bytes;
        pieces.chunks.push(chunk.data);
        if !chunk.last {
            return Ok(None);
        }
        let Some(pieces) = self.partial.remove(&chunk.id) else {
            return Ok(None);
        };
        // One copy into a buffer of the exact size: growing one chunk by
        // chunk reallocated and copied an 8 MiB message ten times over.
        let mut whole = BytesMut::with_capacity(pieces.bytes);
        for chunk in &pieces.chunks {
            whole.extend_from_slice(chunk);
        }
        pb::LinkMessage::decode(whole.freeze())
            .map(Some)
            .map_err(|e| WireError::Undecodable(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(id: u64, payload: usize) -> pb::LinkMessage {
        pb::LinkMessage {
            id,
            body: Some(pb::link_message::Body::Request(pb::LinkRequest {
                call: Some(pb::link_request::Call::Invoke(pb::InvokeRequest {
                    method: "echo".into(),
                    payload: Some(pb::Payload {
                        data: Bytes::from(vec![b'x'; payload]),
                        ..pb::Payload::default()
                    }),
                    ..pb::InvokeRequest::default()
                })),
                ..pb::LinkRequest::default()
            })),
        }
    }

    const CHUNKED: Framing = Framing {
        chunk_bytes: Some(1024),
        frame_bytes: 4096,
    };

    /// Sends every frame through a reassembly; the messages in the order
    /// they came out.
    fn deliver(outbox: &mut Outbox) -> Result<Vec<u64>, WireError> {
        let mut reassembly = Reassembly::new(1 << 20);
        let mut order = Vec::new();
        while let Some(frame) = outbox.next_frame() {
            order.extend(frame.messages.iter().map(|m| m.id));
            for chunk in frame.chunks {
                if let Some(m) = reassembly.add(chunk)? {
                    order.push(m.id);
                }
            }
        }
        Ok(order)
    }

    #[test]
    fn small_messages_overtake_a_large_one_already_on_its_way() -> Result<(), WireError> {
        let mut outbox = Outbox::new(CHUNKED);
        let mut reassembly = Reassembly::new(1 << 20);
        let mut order = Vec::new();
        outbox.push(message(1, 100_000));
        let mut frames = 0;
        while let Some(frame) = outbox.next_frame() {
            frames += 1;
            if frames == 2 {
                // A small message queued while the large one is on its way
                // goes in the very next frame.
                outbox.push(message(2, 10));
            }
            order.extend(frame.messages.iter().map(|m| m.id));
            assert!(frame.chunks.len() <= 1);
            for chunk in frame.chunks {
                if let Some(m) = reassembly.add(chunk)? {
                    order.push(m.id);
                }
            }
        }
        assert!(frames > 50);
        assert_eq!(order, vec![2, 1]);
        assert_eq!(outbox.bytes(), 0);
        Ok(())
    }

    #[test]
    fn a_payload_is_chunked_from_its_own_buffer_and_arrives_as_sent() -> Result<(), WireError> {
        let sent = message(1, 10_000);
        let Some(pb::link_message::Body::Request(pb::LinkRequest {
            call: Some(pb::link_request::Call::Invoke(invoke)),
            ..
        })) = &sent.body
        else {
            unreachable!()
        };
        let payload = invoke.payload.as_ref().map(|p| p.data.as_ptr_range());
        let Some(payload) = payload else {
            unreachable!()
        };
        let mut outbox = Outbox::new(CHUNKED);
        outbox.push(sent.clone());
        let mut reassembly = Reassembly::new(1 << 20);
        let (mut shared, mut received) = (0, None);
        while let Some(frame) = outbox.next_frame() {
            for chunk in frame.chunks {
                if payload.contains(&chunk.data.as_ptr()) {
                    shared += chunk.data.len();
                }
                received = reassembly.add(chunk)?.or(received);
            }
        }
        assert_eq!(shared, 10_000, "the payload was copied to be chunked");
        assert_eq!(received, Some(sent));
        assert_eq!(outbox.bytes(), 0);
        Ok(())
    }

    #[test]
    fn large_messages_take_turns_and_arrive_whole() -> Result<(), WireError> {
        let mut outbox = Outbox::new(CHUNKED);
        outbox.push(message(1, 20_000));
        outbox.push(message(2, 5_000));
        outbox.push(message(3, 10));
        // 2 is shorter, so it finishes first although queued second.
        assert_eq!(deliver(&mut outbox)?, vec![3, 2, 1]);
        Ok(())
    }

    #[test]
    fn only_a_couple_of_large_messages_are_on_their_way_at_once() -> Result<(), WireError> {
        let mut outbox = Outbox::new(CHUNKED);
        for id in 1..=6 {
            outbox.push(message(id, 10_000));
        }
        // Equal sizes: they finish in order, not all at the very end.
        assert_eq!(deliver(&mut outbox)?, vec![1, 2, 3, 4, 5, 6]);
        let mut outbox = Outbox::new(CHUNKED);
        for id in 1..=6 {
            outbox.push(message(id, 10_000));
        }
        let first = outbox.next_frame();
        assert!(first.is_some_and(|f| f.chunks.len() == INTERLEAVED));
        Ok(())
    }

    #[test]
    fn whole_messages_keep_their_order_across_frames() -> Result<(), WireError> {
        let mut outbox = Outbox::new(CHUNKED);
        for id in 0..50 {
            outbox.push(message(id, 500));
        }
        assert_eq!(deliver(&mut outbox)?, (0..50).collect::<Vec<_>>());
        Ok(())
    }

    #[test]
    fn without_chunking_a_large_message_goes_whole() {
        let mut outbox = Outbox::new(Framing {
            chunk_bytes: None,
            frame_bytes: 4096,
        });
        outbox.push(message(1, 100_000));
        let frame = outbox.next_frame();
        assert!(frame.is_some_and(|f| f.messages.len() == 1 && f.chunks.is_empty()));
    }

    #[test]
    fn a_chunked_message_over_the_limit_is_refused() {
        let mut outbox = Outbox::new(CHUNKED);
        outbox.push(message(1, 100_000));
        let mut reassembly = Reassembly::new(10_000);
        let mut refused = None;
        while let Some(frame) = outbox.next_frame() {
            for chunk in frame.chunks {
                if let Err(e) = reassembly.add(chunk) {
                    refused = Some(e);
                }
            }
        }
        assert!(matches!(refused, Some(WireError::TooLarge { .. })));
    }
}
