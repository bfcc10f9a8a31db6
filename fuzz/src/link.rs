//! Daemon-to-daemon links, both halves:
//!
//! - [`run_stream`]: a peer's `PeerLink.Open` stream as the daemon answers
//!   it, through tonic's server for the service (`Links::server`), the
//!   transport's `serve` loop (hello, whole messages, chunk reassembly,
//!   pings) and the daemon's `link_api`, which answers each request as the
//!   `ActorClient` RPC over a real runtime. Operations: a raw `LinkFrame`,
//!   a `LinkMessage` cut into chunks of a chosen size, raw body bytes.
//! - [`run_wire`]: the framing itself (`wire.rs`: the outbox that batches
//!   and chunks, the reassembly), with the property that every message
//!   queued arrives once and unchanged, in any mix of sizes and frames,
//!   and that an adversary's chunks never panic the reassembly.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body::Frame;
use http_body_util::BodyExt;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::codegen::Service;
use troupe_proto::v1 as pb;
use troupe_transport::link::{ChannelPlan, Links, LinksConfig};

use crate::client_api::ClientApi;
use crate::daemon::{self, block_on, bounded};
use crate::input::{grpc_frame, number, Ops, OpsWriter};
use crate::link_api::LinkApi;
use crate::wire::{Framing, Outbox, Reassembly, WireError};

const MAX_OPS: usize = 64;

/// The largest message the stream takes: small, so inputs reach the limit.
const LIMIT: usize = 4096;

/// The links both link targets serve with: chunked replies (the smallest
/// chunks the config allows) and a small message limit.
pub(crate) fn fuzz_links() -> Links {
    Links::new(LinksConfig {
        node: "fuzz".into(),
        channels: ChannelPlan::Split { call: 1, bulk: 1 },
        chunk_bytes: 1024,
        max_message_bytes: LIMIT,
        ..LinksConfig::default()
    })
}

/// Runs one `PeerLink.Open` stream against a fresh daemon.
pub fn run_stream(data: &[u8]) {
    block_on(async {
        let runtime = daemon::start(true);
        let links = fuzz_links();
        let mut service = links
            .server(Arc::new(LinkApi::new(ClientApi::new(runtime.clone()))))
            .into_service();
        let (tx, rx) = mpsc::unbounded_channel::<Result<Frame<Bytes>, Infallible>>();
        let body = http_body_util::StreamBody::new(UnboundedReceiverStream::new(rx));
        let request = http::Request::builder()
            .method("POST")
            .uri("/troupe.v1.PeerLink/Open")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(body);
        let Ok(request) = request else {
            panic!("the harness's request is malformed");
        };
        let Ok(response) = service.call(request).await;
        // The peer reads its replies as they come, as a real one does.
        let replies = tokio::spawn(async move {
            let mut body = response.into_body();
            while let Some(Ok(_)) = body.frame().await {}
        });
        for (op, body) in Ops::new(data).take(MAX_OPS) {
            match op % 3 {
                0 => {
                    let _ = tx.send(Ok(Frame::data(grpc_frame(body))));
                }
                1 => {
                    // [id][chunk size][the message]
                    let (id, rest) = number(body, 1);
                    let (size, message) = number(rest, 1);
                    let size = usize::try_from(size).unwrap_or(1).max(1);
                    let pieces: Vec<&[u8]> = message.chunks(size).collect();
                    let last = pieces.len().saturating_sub(1);
                    for (n, piece) in pieces.into_iter().enumerate() {
                        let frame = pb::LinkFrame {
                            chunks: vec![pb::LinkChunk {
                                id,
                                data: Bytes::copy_from_slice(piece),
                                last: n == last,
                            }],
                            ..Default::default()
                        };
                        let _ = tx.send(Ok(Frame::data(grpc_frame(&frame.encode_to_vec()))));
                    }
                }
                _ => {
                    let _ = tx.send(Ok(Frame::data(Bytes::copy_from_slice(body))));
                }
            }
            for _ in 0..8 {
                tokio::task::yield_now().await;
            }
        }
        drop(tx);
        bounded("the link stream's end", replies).await.ok();
        daemon::stop(runtime).await;
    });
}

fn request(id: &str, method: &str, payload: &[u8]) -> pb::LinkMessage {
    pb::LinkMessage {
        id: 0,
        body: Some(pb::link_message::Body::Request(pb::LinkRequest {
            hops: 1,
            timeout_ms: 500,
            call: Some(pb::link_request::Call::Invoke(pb::InvokeRequest {
                actor: Some(pb::ActorRef {
                    r#type: "counter".into(),
                    id: id.into(),
                }),
                method: method.into(),
                payload: Some(pb::Payload {
                    data: Bytes::copy_from_slice(payload),
                    content_type: pb::ContentType::Json as i32,
                }),
                ..Default::default()
            })),
            ..Default::default()
        })),
    }
}

/// A read of counter c1's state, as request `id`.
pub(crate) fn state_read(id: u64) -> pb::LinkMessage {
    pb::LinkMessage {
        id,
        body: Some(pb::link_message::Body::Request(pb::LinkRequest {
            call: Some(pb::link_request::Call::GetState(pb::GetStateRequest {
                actor: Some(pb::ActorRef {
                    r#type: "counter".into(),
                    id: "c1".into(),
                }),
                keys: Vec::new(),
            })),
            ..Default::default()
        })),
    }
}

/// Seeds for `link_stream`: a hello with requests and a ping, a request
/// in chunks, a state read.
pub fn stream_seeds() -> Vec<Vec<u8>> {
    let mut first = request("c1", "set", b"{\"n\":1}");
    first.id = 1;
    let hello = pb::LinkFrame {
        hello: Some(pb::LinkHello {
            node: "peer-a".into(),
            channel: "call".into(),
            ..Default::default()
        }),
        messages: vec![
            first,
            pb::LinkMessage {
                id: 2,
                body: Some(pb::link_message::Body::Ping(pb::LinkPing {})),
            },
        ],
        ..Default::default()
    };
    let mut large = request("c2", "echo", &[b'7'; 300]);
    large.id = 3;
    let state = pb::LinkFrame {
        messages: vec![state_read(4)],
        ..Default::default()
    };
    let mut chunked = vec![3u8, 100];
    chunked.extend(large.encode_to_vec());
    vec![OpsWriter::new()
        .op(0, &hello.encode_to_vec())
        .op(1, &chunked)
        .op(0, &state.encode_to_vec())
        .finish()]
}

/// Runs one input through an outbox and a reassembly.
///
/// Input: one byte of chunk size (0: no chunking, as `single=N` links),
/// one byte of reassembly limit (in 64-byte units), then operations:
/// queue a message (the body decoded as a `LinkMessage`, else carried as a
/// payload), send one frame, the stream breaks (everything queued is
/// dropped and the reassembly starts over, as on a new stream), or an
/// adversary's chunk straight into a second reassembly.
pub fn run_wire(data: &[u8]) {
    let (chunk, rest) = number(data, 1);
    let (limit, rest) = number(rest, 1);
    // The proportions `LinksConfig::framing` uses (frames of two chunks),
    // at sizes small inputs reach.
    let chunk_bytes = usize::try_from(chunk).ok().filter(|c| *c > 0);
    let framing = Framing {
        chunk_bytes,
        frame_bytes: chunk_bytes.unwrap_or(64).saturating_mul(2),
    };
    let limit = usize::try_from(limit)
        .unwrap_or_default()
        .saturating_mul(64);
    let mut outbox = Outbox::new(framing);
    let mut reassembly = Reassembly::new(limit);
    let mut adversary = Reassembly::new(limit);
    // Queued and not yet delivered, by id: the message and its encoded size.
    let mut expected: BTreeMap<u64, (pb::LinkMessage, usize)> = BTreeMap::new();
    let mut next_id = 1u64;
    for (op, body) in Ops::new(rest).take(256) {
        match op % 4 {
            0 => {
                let mut message =
                    pb::LinkMessage::decode(body).unwrap_or_else(|_| request("w", "echo", body));
                message.id = next_id;
                next_id += 1;
                let len = outbox.push(message.clone());
                assert_eq!(len, message.encoded_len(), "push measures the message");
                expected.insert(message.id, (message, len));
            }
            1 => {
                if !deliver_one(&mut outbox, &mut reassembly, &mut expected, limit) {
                    // The stream was reset: a new one starts empty.
                    outbox.clear();
                    expected.clear();
                    reassembly = Reassembly::new(limit);
                }
            }
            2 => {
                let dropped = outbox.clear();
                for id in &dropped {
                    expected.remove(id);
                }
                assert!(expected.is_empty(), "clear names every queued message");
                assert_eq!(outbox.bytes(), 0, "nothing queued after clear");
                reassembly = Reassembly::new(limit);
            }
            _ => {
                if let Ok(chunk) = pb::LinkChunk::decode(body) {
                    let _ = adversary.add(chunk);
                }
            }
        }
    }
    // Everything still queued arrives.
    while !outbox.is_empty() {
        if !deliver_one(&mut outbox, &mut reassembly, &mut expected, limit) {
            return;
        }
    }
    assert!(
        expected.is_empty(),
        "queued messages never arrived: {:?}",
        expected.keys().collect::<Vec<_>>()
    );
    assert_eq!(outbox.bytes(), 0, "an empty outbox holds no bytes");
}

/// Sends one frame through `reassembly`, checking what arrives against
/// `expected`; false if the stream had to be reset (a message over the
/// limit, which only a message larger than the limit may cause).
fn deliver_one(
    outbox: &mut Outbox,
    reassembly: &mut Reassembly,
    expected: &mut BTreeMap<u64, (pb::LinkMessage, usize)>,
    limit: usize,
) -> bool {
    let Some(frame) = outbox.next_frame() else {
        return true;
    };
    assert!(
        !frame.messages.is_empty() || !frame.chunks.is_empty(),
        "an empty frame"
    );
    let mut arrived = frame.messages;
    for chunk in frame.chunks {
        match reassembly.add(chunk) {
            Ok(Some(message)) => arrived.push(message),
            Ok(None) => {}
            Err(WireError::TooLarge { bytes, .. }) => {
                assert!(
                    bytes > limit,
                    "refused {bytes} bytes under the limit {limit}"
                );
                return false;
            }
            Err(e @ WireError::Undecodable(_)) => panic!("a queued message did not decode: {e}"),
        }
    }
    for message in arrived {
        match expected.remove(&message.id) {
            Some((sent, _)) => {
                assert_eq!(message, sent, "message {} changed on the way", message.id);
            }
            None => panic!("message {} arrived twice or was never queued", message.id),
        }
    }
    true
}

/// Seeds for `link_wire`: small and large messages, chunked and whole.
pub fn wire_seeds() -> Vec<Vec<u8>> {
    let small = request("a", "echo", b"1").encode_to_vec();
    let large = request("b", "echo", &[b'x'; 200]).encode_to_vec();
    let ops = |chunk: u8, limit: u8| {
        let mut seed = vec![chunk, limit];
        seed.extend(
            OpsWriter::new()
                .op(0, &large)
                .op(0, &small)
                .op(1, &[])
                .op(0, &large)
                .op(1, &[])
                .op(1, &[])
                .op(
                    3,
                    &pb::LinkChunk {
                        id: 9,
                        data: Bytes::from_static(b"\x08\x01"),
                        last: true,
                    }
                    .encode_to_vec(),
                )
                .finish(),
        );
        seed
    };
    vec![ops(16, 8), ops(0, 8), ops(64, 2)]
}
