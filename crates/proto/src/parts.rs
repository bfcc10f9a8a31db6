//! `MessagePart` (app.proto): a large message of the app stream cut into
//! pieces on one side ([`Parts`]) and put back together on the other
//! ([`Reassembly`]).
//!
//! One stream carries every turn of an actor type, and gRPC writes a message
//! whole: a small call's turn queued behind an 8 MiB one waited until all
//! 8 MiB were written. The sender now writes such a message a piece at a
//! time and lets small messages of other actors go between the pieces; a
//! payload among them goes from its own buffer ([`Bulk`]), uncopied.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

use crate::v1::MessagePart;

mod bulk;
pub use bulk::{encode_around_bulk, Bulk, Detached};

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

/// What remains of a message's encoding ([`encode_around_bulk`]), in
/// segments no piece spans: cut by the app stream's [`Parts`] and the
/// daemons' link chunks alike.
#[derive(Debug)]
pub struct Segments(VecDeque<Bytes>);

impl Segments {
    /// Bytes left to send.
    pub fn len(&self) -> usize {
        self.0.iter().map(Bytes::len).sum()
    }

    /// Whether every byte was sent.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The next piece of at most `max` bytes (at least one; sharing the
    /// segment's buffer, uncopied) and whether it is the last; None once
    /// the last was taken.
    pub fn next_piece(&mut self, max: usize) -> Option<(Bytes, bool)> {
        let segment = self.0.front_mut()?;
        let data = segment.split_to(max.max(1).min(segment.len()));
        if segment.is_empty() {
            self.0.pop_front();
        }
        Some((data, self.0.is_empty()))
    }
}

/// The pieces of one encoded message still to send, in order.
#[derive(Debug)]
pub struct Parts {
    rest: Segments,
    /// The whole's size, until the first piece carried it.
    whole_bytes: Option<usize>,
}

impl Parts {
    /// The pieces of `message`. Its bulk, when it has one, is never copied
    /// here: the rest is encoded ahead of it, and the bulk's pieces share
    /// its buffer, so the sender copies it once (into the stream), as when
    /// a message is sent whole.
    pub fn of<M: Bulk>(message: M) -> Self {
        let rest = encode_around_bulk(message, PART_BYTES);
        Self {
            whole_bytes: Some(rest.len()),
            rest,
        }
    }

    /// The next piece (its data shares the encoded buffer or the bulk,
    /// uncopied); None once the one marked last was taken.
    pub fn next_part(&mut self) -> Option<MessagePart> {
        let (data, last) = self.rest.next_piece(PART_BYTES)?;
        Some(MessagePart {
            data,
            last,
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
    pub fn start(slot: &mut Option<Self>, message: impl Bulk, about: T) -> Option<MessagePart> {
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

/// The most a receiver allocates ahead on a first piece's word: an
/// announced size past any real message (a faulty peer's) must not abort
/// the process by asking for more memory than exists.
const RESERVE_AT_MOST: usize = 256 * 1024 * 1024;

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
            // A receiver without a limit takes the announced size on trust
            // only this far; a larger whole grows as its pieces come.
            self.buf
                .reserve(announced.min(RESERVE_AT_MOST).max(part.data.len()));
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
    use prost::Message;

    use super::*;
    use crate::v1 as pb;

    fn turn(len: usize) -> pb::DaemonMessage {
        pb::DaemonMessage {
            kind: Some(pb::daemon_message::Kind::Turn(pb::Turn {
                call_id: 7,
                payload: Some(pb::Payload {
                    data: bytes(len),
                    ..Default::default()
                }),
                ..Default::default()
            })),
        }
    }

    fn bytes(len: usize) -> Bytes {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    /// The pieces of `message`, checked as they come, and what a receiver
    /// makes of them.
    fn round_trip<M: Bulk + Default + Clone>(message: &M) -> (Vec<MessagePart>, Option<M>) {
        let canonical = message.encoded_len();
        assert!(goes_in_parts(canonical));
        let mut parts = Parts::of(message.clone());
        let mut whole = Reassembly::new(canonical);
        let (mut pieces, mut decoded) = (Vec::new(), None);
        while let Some(part) = parts.next_part() {
            // Every piece, framing included, is smaller than the whole.
            let wrapped = pb::DaemonMessage {
                kind: Some(pb::daemon_message::Kind::Part(part.clone())),
            };
            assert!(wrapped.encoded_len() < canonical);
            assert!(decoded.is_none(), "a piece after the last");
            pieces.push(part.clone());
            // A receiver whose limit is the canonical encoding's length
            // takes the pieces: they add up to exactly that.
            match whole.push(part) {
                Ok(Some(bytes)) => decoded = M::decode(bytes).ok(),
                Ok(None) => {}
                Err(e) => panic!("refused: {e}"),
            }
        }
        assert_eq!(pieces[0].whole_bytes as usize, canonical);
        (pieces, decoded)
    }

    #[test]
    fn a_message_cut_in_pieces_comes_back_whole() {
        for len in [PART_BYTES + 100, 3 * PART_BYTES, 8 * 1024 * 1024 + 5] {
            let message = turn(len);
            let (pieces, decoded) = round_trip(&message);
            // The rest of the turn, then the payload's pieces.
            assert_eq!(pieces.len(), 1 + len.div_ceil(PART_BYTES));
            assert_eq!(decoded, Some(message));
        }
    }

    #[test]
    fn every_field_around_the_bulk_comes_back() {
        let turn = pb::DaemonMessage {
            kind: Some(pb::daemon_message::Kind::Turn(pb::Turn {
                call_id: 9,
                name: "put".into(),
                kind: pb::TurnKind::Call as i32,
                metadata: [("k".to_string(), "v".to_string())].into(),
                payload: Some(pb::Payload {
                    data: bytes(2 * PART_BYTES + 3),
                    content_type: pb::ContentType::Bytes as i32,
                }),
                traceparent: "00-abc-def-01".into(),
                ..Default::default()
            })),
        };
        assert_eq!(round_trip(&turn).1, Some(turn));
        let answer = pb::AppMessage {
            kind: Some(pb::app_message::Kind::TurnResult(pb::TurnResult {
                call_id: 9,
                outcome: Some(pb::turn_result::Outcome::Reply(pb::Payload {
                    data: bytes(5 * PART_BYTES),
                    content_type: pb::ContentType::Bytes as i32,
                })),
                changes: vec![pb::StateChange {
                    ttl_ms: None,
                    key: "count".into(),
                    op: Some(pb::state_change::Op::Set(bytes(10))),
                }],
                lease_expired: false,
                events: Vec::new(),
            })),
        };
        assert_eq!(round_trip(&answer).1, Some(answer));
        let invoke = pb::InvokeRequest {
            actor: Some(pb::ActorRef {
                r#type: "t".into(),
                id: "1".into(),
            }),
            method: "put".into(),
            payload: Some(pb::Payload {
                data: bytes(2 * PART_BYTES),
                content_type: pb::ContentType::Bytes as i32,
            }),
            ..Default::default()
        };
        let forwarded = |call| pb::LinkMessage {
            id: 4,
            body: Some(pb::link_message::Body::Request(pb::LinkRequest {
                hops: 1,
                timeout_ms: 500,
                traceparent: "00-abc-def-01".into(),
                call: Some(call),
                ..Default::default()
            })),
        };
        let call = forwarded(pb::link_request::Call::Invoke(invoke.clone()));
        assert_eq!(round_trip(&call).1, Some(call));
        let tell = forwarded(pb::link_request::Call::Tell(pb::TellRequest {
            actor: invoke.actor.clone(),
            method: "put".into(),
            payload: invoke.payload.clone(),
            ..Default::default()
        }));
        assert_eq!(round_trip(&tell).1, Some(tell));
        let reply = pb::LinkMessage {
            id: 4,
            body: Some(pb::link_message::Body::Reply(pb::LinkReply {
                result: Some(pb::link_reply::Result::Invoke(pb::InvokeResponse {
                    payload: invoke.payload.clone(),
                })),
            })),
        };
        assert_eq!(round_trip(&reply).1, Some(reply));
        // Large for another reason than the bulk: sent as encoded, whole.
        let mut state = turn_with_large_metadata();
        assert!(state.take_bulk(PART_BYTES).is_none());
        assert_eq!(round_trip(&state).1, Some(state));
    }

    fn turn_with_large_metadata() -> pb::DaemonMessage {
        pb::DaemonMessage {
            kind: Some(pb::daemon_message::Kind::Turn(pb::Turn {
                metadata: [("big".to_string(), "x".repeat(3 * PART_BYTES))].into(),
                payload: Some(pb::Payload {
                    data: bytes(10),
                    ..Default::default()
                }),
                ..Default::default()
            })),
        }
    }

    #[test]
    fn the_bulk_is_sent_from_its_own_buffer() {
        let message = turn(4 * PART_BYTES);
        let Some(pb::daemon_message::Kind::Turn(t)) = &message.kind else {
            unreachable!()
        };
        let payload = t.payload.as_ref().map(|p| p.data.as_ptr_range());
        let Some(payload) = payload else {
            unreachable!()
        };
        let mut parts = Parts::of(message);
        let mut shared = 0;
        while let Some(part) = parts.next_part() {
            if payload.contains(&part.data.as_ptr()) {
                shared += part.data.len();
            }
        }
        assert_eq!(shared, 4 * PART_BYTES, "the payload was copied");
    }

    #[test]
    fn pieces_beyond_the_limit_are_refused_and_the_next_message_starts_afresh() {
        let message = turn(3 * PART_BYTES);
        let mut whole = Reassembly::new(2 * PART_BYTES);
        let mut parts = Parts::of(message);
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
    fn an_absurd_announced_size_is_not_allocated_ahead() {
        let mut whole = Reassembly::new(usize::MAX);
        let first = MessagePart {
            data: bytes(10),
            last: false,
            whole_bytes: u64::MAX,
        };
        assert!(matches!(whole.push(first), Ok(None)));
        let last = MessagePart {
            data: bytes(5),
            last: true,
            whole_bytes: 0,
        };
        assert_eq!(whole.push(last).ok().flatten().map(|b| b.len()), Some(15));
    }

    #[test]
    fn a_message_at_the_threshold_goes_whole() {
        assert!(!goes_in_parts(PART_BYTES));
        assert!(!goes_in_parts(PART_BYTES + PART_FRAMING));
        assert!(goes_in_parts(PART_BYTES + PART_FRAMING + 1));
    }
}
