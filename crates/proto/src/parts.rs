//! `MessagePart` (app.proto): a large message of the app stream cut into
//! pieces on one side ([`Parts`]) and put back together on the other
//! ([`Reassembly`]).
//!
//! One stream carries every turn of an actor type, and gRPC writes a message
//! whole: a small call's turn queued behind an 8 MiB one waited until all
//! 8 MiB were written. The sender now writes such a message a piece at a
//! time and lets small messages of other actors go between the pieces.

use bytes::{Bytes, BytesMut};
use prost::Message;

use crate::v1::MessagePart;

/// The data one piece carries: large enough that the pieces' own framing
/// (a gRPC message each) costs little next to their copies, small enough
/// that a small message waits behind one piece for microseconds.
pub const PART_BYTES: usize = 128 * 1024;

/// The most a piece's framing adds to its data: the piece's fields and its
/// place in the enclosing message's oneof.
const PART_FRAMING: usize = 16;

/// Whether a message of `encoded_len` bytes goes in pieces: only when every
/// piece, framing included, is smaller than the whole, so that a receiver
/// whose limit admits the whole admits each piece too.
pub fn goes_in_parts(encoded_len: usize) -> bool {
    encoded_len > PART_BYTES + PART_FRAMING
}

/// The pieces of one encoded message still to send, in order.
#[derive(Debug)]
pub struct Parts {
    rest: Bytes,
    /// The whole's size, until the first piece carried it.
    whole_bytes: Option<usize>,
}

impl Parts {
    /// The pieces of `message`, encoded once here.
    pub fn of(message: &impl Message) -> Self {
        let mut buf = BytesMut::with_capacity(message.encoded_len());
        // Cannot fail: the buffer grows to whatever the message needs.
        let _ = message.encode(&mut buf);
        Self {
            whole_bytes: Some(buf.len()),
            rest: buf.freeze(),
        }
    }

    /// The next piece (its data shares the encoded buffer, uncopied); None
    /// once the one marked last was taken.
    pub fn next_part(&mut self) -> Option<MessagePart> {
        if self.rest.is_empty() {
            return None;
        }
        let data = self.rest.split_to(PART_BYTES.min(self.rest.len()));
        Some(MessagePart {
            data,
            last: self.rest.is_empty(),
            whole_bytes: self.whole_bytes.take().unwrap_or_default() as u64,
        })
    }
}

/// A large message being sent a piece at a time, with what its sender needs
/// to know of it meanwhile (`about`: the daemon keeps its actor, the SDK
/// whether it changes state). Senders hold it in an `Option` slot that is
/// full exactly while pieces of the message remain to be sent.
#[derive(Debug)]
pub struct InParts<T> {
    parts: Parts,
    pub about: T,
}

impl<T> InParts<T> {
    /// Starts sending `message` in pieces from `slot`: its first piece.
    pub fn start(slot: &mut Option<Self>, message: &impl Message, about: T) -> Option<MessagePart> {
        *slot = Some(Self {
            parts: Parts::of(message),
            about,
        });
        Self::next(slot)
    }

    /// The next piece of the message in `slot`, emptying the slot at its
    /// last piece; None when the slot is empty.
    pub fn next(slot: &mut Option<Self>) -> Option<MessagePart> {
        let current = slot.as_mut()?;
        let piece = current.parts.next_part();
        if piece.as_ref().is_none_or(|p| p.last) {
            *slot = None;
        }
        piece
    }
}

/// A reassembled message would exceed the receiver's limit.
#[derive(Debug, thiserror::Error)]
#[error(
    "the pieces of one message (MessagePart) add up to more than {limit} bytes, the most \
     this end receives in one message; send smaller messages, or raise the limit"
)]
pub struct TooLarge {
    pub limit: usize,
}

/// The pieces of the message being received.
#[derive(Debug)]
pub struct Reassembly {
    /// Sized by the first piece's `whole_bytes`, so that each piece is
    /// copied in as it comes (freeing the buffer it was decoded from) and
    /// the whole is never moved while it grows.
    buf: BytesMut,
    limit: usize,
}

impl Reassembly {
    /// Reassembles messages of at most `limit` encoded bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            buf: BytesMut::new(),
            limit,
        }
    }

    /// Adds `part`; at the last piece, the whole message's bytes (for the
    /// caller to decode as the kind it expects).
    pub fn push(&mut self, part: MessagePart) -> Result<Option<Bytes>, TooLarge> {
        let announced = usize::try_from(part.whole_bytes).unwrap_or(usize::MAX);
        let len = self.buf.len().saturating_add(part.data.len());
        if len > self.limit || announced > self.limit {
            self.buf = BytesMut::new();
            return Err(TooLarge { limit: self.limit });
        }
        if self.buf.is_empty() && part.last {
            return Ok(Some(part.data));
        }
        if self.buf.is_empty() {
            self.buf.reserve(announced.max(part.data.len()));
        }
        self.buf.extend_from_slice(&part.data);
        if !part.last {
            return Ok(None);
        }
        // The next message starts a buffer of its own, sized by its first piece.
        Ok(Some(std::mem::take(&mut self.buf).freeze()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1 as pb;

    fn turn(bytes: usize) -> pb::DaemonMessage {
        pb::DaemonMessage {
            kind: Some(pb::daemon_message::Kind::Turn(pb::Turn {
                call_id: 7,
                payload: Some(pb::Payload {
                    data: (0..bytes).map(|i| (i % 251) as u8).collect(),
                    ..Default::default()
                }),
                ..Default::default()
            })),
        }
    }

    #[test]
    fn a_message_cut_in_pieces_comes_back_whole() {
        for bytes in [PART_BYTES + 100, 3 * PART_BYTES, 8 * 1024 * 1024 + 5] {
            let message = turn(bytes);
            assert!(goes_in_parts(message.encoded_len()));
            let mut parts = Parts::of(&message);
            let mut whole = Reassembly::new(usize::MAX);
            let mut pieces = 0;
            let mut decoded = None;
            while let Some(part) = parts.next_part() {
                pieces += 1;
                let wrapped = pb::DaemonMessage {
                    kind: Some(pb::daemon_message::Kind::Part(part.clone())),
                };
                // Every piece, framing included, is smaller than the whole.
                assert!(wrapped.encoded_len() < message.encoded_len());
                assert!(decoded.is_none(), "a piece after the last");
                if let Ok(Some(bytes)) = whole.push(part) {
                    decoded = pb::DaemonMessage::decode(bytes).ok();
                }
            }
            assert_eq!(pieces, message.encoded_len().div_ceil(PART_BYTES));
            assert_eq!(decoded, Some(message));
        }
    }

    #[test]
    fn pieces_beyond_the_limit_are_refused_and_the_next_message_starts_afresh() {
        let message = turn(3 * PART_BYTES);
        let mut whole = Reassembly::new(2 * PART_BYTES);
        let mut parts = Parts::of(&message);
        // The first piece says how large the whole is: refused at once.
        let first = parts.next_part().map(|p| whole.push(p));
        assert!(matches!(first, Some(Err(TooLarge { limit })) if limit == 2 * PART_BYTES));
        // Pieces that do not say so are refused once they add up to more.
        let mut refused = None;
        while let Some(mut part) = parts.next_part() {
            part.whole_bytes = 0;
            if let Err(e) = whole.push(part) {
                refused = Some(e);
                break;
            }
        }
        assert!(matches!(refused, Some(TooLarge { limit }) if limit == 2 * PART_BYTES));
        let small = turn(10);
        let one = MessagePart {
            data: small.encode_to_vec().into(),
            last: true,
            whole_bytes: 0,
        };
        let bytes = whole.push(one).ok().flatten();
        assert_eq!(
            bytes.and_then(|b| pb::DaemonMessage::decode(b).ok()),
            Some(small)
        );
    }

    #[test]
    fn a_message_at_the_threshold_goes_whole() {
        assert!(!goes_in_parts(PART_BYTES));
        assert!(!goes_in_parts(PART_BYTES + PART_FRAMING));
        assert!(goes_in_parts(PART_BYTES + PART_FRAMING + 1));
    }
}
