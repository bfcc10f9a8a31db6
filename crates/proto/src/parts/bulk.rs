//! Taking a message apart around its bulk, so that a large payload is sent
//! in pieces (the app stream's [`super::Parts`], the daemons' link chunks)
//! from the buffer it arrived in rather than from a copy.

use std::collections::VecDeque;

use bytes::{BufMut, Bytes, BytesMut};
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
use prost::Message;

use super::Segments;
use crate::v1::{
    app_message, daemon_message, link_message, link_reply, link_request, turn_result, AppMessage,
    DaemonMessage, LinkMessage, Payload,
};

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
    fn head(&self) -> BytesMut {
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
}

/// `message`'s encoding in segments that add up to it: when its bulk holds
/// at least `at_least` bytes, everything else and then the bulk itself,
/// uncopied; otherwise the whole, encoded.
pub fn encode_around_bulk<M: Bulk>(mut message: M, at_least: usize) -> Segments {
    let mut segments = VecDeque::with_capacity(2);
    if let Some(detached) = message.take_bulk(at_least) {
        segments.push_back(detached.head().freeze());
        segments.push_back(detached.bulk);
    } else {
        let mut buf = BytesMut::with_capacity(message.encoded_len());
        // Cannot fail: the buffer grows to whatever the message needs.
        let _ = message.encode(&mut buf);
        segments.push_back(buf.freeze());
    }
    Segments(segments)
}

// Field numbers on the way to a payload's bytes.
const PAYLOAD_DATA: u32 = 1;
const DAEMON_MESSAGE_TURN: u32 = 3;
const TURN_PAYLOAD: u32 = 5;
const APP_MESSAGE_TURN_RESULT: u32 = 3;
const TURN_RESULT_REPLY: u32 = 2;
const LINK_MESSAGE_REQUEST: u32 = 2;
const LINK_MESSAGE_REPLY: u32 = 3;
const LINK_REQUEST_INVOKE: u32 = 10;
const LINK_REQUEST_TELL: u32 = 11;
const INVOKE_REQUEST_PAYLOAD: u32 = 3;
const TELL_REQUEST_PAYLOAD: u32 = 3;
const LINK_REPLY_INVOKE: u32 = 10;
const INVOKE_RESPONSE_PAYLOAD: u32 = 1;

fn large(payload: Option<&Payload>, at_least: usize) -> bool {
    payload.is_some_and(|p| p.data.len() >= at_least)
}

impl Bulk for DaemonMessage {
    fn take_bulk(&mut self, at_least: usize) -> Option<Detached> {
        let Some(daemon_message::Kind::Turn(turn)) = &mut self.kind else {
            return None;
        };
        if !large(turn.payload.as_ref(), at_least) {
            return None;
        }
        let payload = turn.payload.take()?;
        let inner = vec![(turn.encode_to_vec(), TURN_PAYLOAD)];
        self.kind = None;
        Some(around_payload(
            inner,
            (&*self, DAEMON_MESSAGE_TURN),
            payload,
        ))
    }
}

impl Bulk for AppMessage {
    fn take_bulk(&mut self, at_least: usize) -> Option<Detached> {
        let Some(app_message::Kind::TurnResult(result)) = &mut self.kind else {
            return None;
        };
        let Some(turn_result::Outcome::Reply(reply)) = &result.outcome else {
            return None;
        };
        if !large(Some(reply), at_least) {
            return None;
        }
        let Some(turn_result::Outcome::Reply(payload)) = result.outcome.take() else {
            return None;
        };
        let inner = vec![(result.encode_to_vec(), TURN_RESULT_REPLY)];
        self.kind = None;
        Some(around_payload(
            inner,
            (&*self, APP_MESSAGE_TURN_RESULT),
            payload,
        ))
    }
}

/// A forwarded call's payload, or its answer's (the link's chunks).
impl Bulk for LinkMessage {
    fn take_bulk(&mut self, at_least: usize) -> Option<Detached> {
        let (payload, inner, root_field) = match &mut self.body {
            Some(link_message::Body::Request(request)) => {
                let (payload, holder, field) = match &mut request.call {
                    Some(link_request::Call::Invoke(r)) if large(r.payload.as_ref(), at_least) => {
                        let payload = r.payload.take()?;
                        let holder = (r.encode_to_vec(), INVOKE_REQUEST_PAYLOAD);
                        (payload, holder, LINK_REQUEST_INVOKE)
                    }
                    Some(link_request::Call::Tell(r)) if large(r.payload.as_ref(), at_least) => {
                        let payload = r.payload.take()?;
                        let holder = (r.encode_to_vec(), TELL_REQUEST_PAYLOAD);
                        (payload, holder, LINK_REQUEST_TELL)
                    }
                    _ => return None,
                };
                request.call = None;
                let inner = vec![holder, (request.encode_to_vec(), field)];
                (payload, inner, LINK_MESSAGE_REQUEST)
            }
            Some(link_message::Body::Reply(reply)) => {
                let Some(link_reply::Result::Invoke(r)) = &mut reply.result else {
                    return None;
                };
                if !large(r.payload.as_ref(), at_least) {
                    return None;
                }
                let payload = r.payload.take()?;
                let holder = (r.encode_to_vec(), INVOKE_RESPONSE_PAYLOAD);
                reply.result = None;
                let inner = vec![holder, (reply.encode_to_vec(), LINK_REPLY_INVOKE)];
                (payload, inner, LINK_MESSAGE_REPLY)
            }
            _ => return None,
        };
        self.body = None;
        Some(around_payload(inner, (&*self, root_field), payload))
    }
}

/// `payload`'s bytes apart from the rest. `inner`: the messages between the
/// root and the payload, innermost first, each encoded without the one it
/// held and with the number of the field that held it; `root`: the message
/// itself, emptied of them, and its field that leads on.
fn around_payload(
    mut inner: Vec<(Vec<u8>, u32)>,
    root: (&impl Message, u32),
    mut payload: Payload,
) -> Detached {
    let bulk = std::mem::take(&mut payload.data);
    inner.push((root.0.encode_to_vec(), root.1));
    inner.reverse();
    inner.push((payload.encode_to_vec(), PAYLOAD_DATA));
    Detached {
        levels: inner,
        bulk,
    }
}
