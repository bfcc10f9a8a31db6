//! Taking a message apart around its bulk, so that [`super::Parts`] sends
//! a large payload from the buffer it arrived in rather than from a copy.

use bytes::{BufMut, Bytes, BytesMut};
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
use prost::Message;

use crate::v1::{app_message, daemon_message, turn_result, AppMessage, DaemonMessage, Payload};

/// A message whose bulk, when it has one, is one `bytes` field (a turn's
/// payload, an answer's reply) that can be sent apart from the rest.
pub trait Bulk: Message + Sized {
    /// Takes the message apart when its bulk holds at least `at_least`
    /// bytes; leaves it whole (and returns None) otherwise.
    fn take_bulk(&mut self, at_least: usize) -> Option<Detached>;
}

/// A message taken apart around its bulk.
#[derive(Debug)]
pub struct Detached {
    /// From the root down to the message holding the bulk: each message's
    /// other fields, encoded, and the number of the field that leads on.
    levels: Vec<(Vec<u8>, u32)>,
    bulk: Bytes,
}

impl Detached {
    /// The encoding of everything but the bulk's data, the bulk's fields
    /// last at every level so the bulk ends the message. Protobuf takes
    /// fields in any order, and the length is the canonical encoding's.
    pub(super) fn head(&self) -> BytesMut {
        // Each level's child's length, innermost first.
        let mut child = self.bulk.len();
        let mut children = Vec::with_capacity(self.levels.len());
        for (rest, field) in self.levels.iter().rev() {
            children.push(child);
            child = rest
                .len()
                .saturating_add(key_len(*field))
                .saturating_add(encoded_len_varint(child as u64))
                .saturating_add(child);
        }
        let mut head = BytesMut::with_capacity(child.saturating_sub(self.bulk.len()));
        for ((rest, field), len) in self.levels.iter().zip(children.iter().rev()) {
            head.put_slice(rest);
            encode_key(*field, WireType::LengthDelimited, &mut head);
            encode_varint(*len as u64, &mut head);
        }
        head
    }

    /// The bulk's bytes, which follow the head.
    pub(super) fn bulk(self) -> Bytes {
        self.bulk
    }
}

impl Bulk for DaemonMessage {
    fn take_bulk(&mut self, at_least: usize) -> Option<Detached> {
        let Some(daemon_message::Kind::Turn(turn)) = &mut self.kind else {
            return None;
        };
        if turn.payload.as_ref()?.data.len() < at_least {
            return None;
        }
        let payload = turn.payload.take()?;
        let turn = turn.encode_to_vec();
        self.kind = None;
        // DaemonMessage.turn = 3, Turn.payload = 5.
        Some(around_payload((&*self, 3), (turn, 5), payload))
    }
}

impl Bulk for AppMessage {
    fn take_bulk(&mut self, at_least: usize) -> Option<Detached> {
        let Some(app_message::Kind::TurnResult(result)) = &mut self.kind else {
            return None;
        };
        match &result.outcome {
            Some(turn_result::Outcome::Reply(reply)) if reply.data.len() >= at_least => {}
            _ => return None,
        }
        let Some(turn_result::Outcome::Reply(reply)) = result.outcome.take() else {
            return None;
        };
        let result = result.encode_to_vec();
        self.kind = None;
        // AppMessage.turn_result = 3, TurnResult.reply = 2.
        Some(around_payload((&*self, 3), (result, 2), reply))
    }
}

/// `payload`'s bytes apart from the rest: `root` (the message, its inner
/// one taken out) and `inner` (the message that held the payload, encoded
/// without it), each with the number of the field that leads on.
fn around_payload(
    root: (&impl Message, u32),
    inner: (Vec<u8>, u32),
    mut payload: Payload,
) -> Detached {
    let bulk = std::mem::take(&mut payload.data);
    Detached {
        // Payload.data = 1.
        levels: vec![
            (root.0.encode_to_vec(), root.1),
            inner,
            (payload.encode_to_vec(), 1),
        ],
        bulk,
    }
}
