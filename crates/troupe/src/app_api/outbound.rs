//! The daemon's side of an app stream. For an app that accepts batches,
//! what is queued when the stream is ready to write goes out as one
//! `DaemonBatch` (never waiting for more: a lone message goes at once and
//! alone), so a burst the daemon causes (thousands of idle actors
//! deactivated together) is a few large HTTP/2 frames, not thousands of
//! tiny ones. A batch stays within the app's message limit as well; each
//! message was checked against it before it was queued.

use std::pin::Pin;

use futures::{Stream, StreamExt};
use prost::encoding::encoded_len_varint;
use tokio::sync::mpsc;
use tonic::Status;
use troupe_proto::v1 as pb;

/// What the daemon sends down an app stream.
pub type DaemonStream = Pin<Box<dyn Stream<Item = Result<pb::DaemonMessage, Status>> + Send>>;

/// A message with its encoded size, measured once when it was checked
/// against the app's limit.
#[derive(Debug)]
pub(super) struct Sized {
    pub(super) message: pb::DaemonMessage,
    pub(super) bytes: usize,
}

type Queued = Result<Sized, Status>;
type Item = Result<pb::DaemonMessage, Status>;

/// Most messages in one batch.
const BATCH_MESSAGES: usize = 256;
/// Most encoded bytes in one batch (unless the app takes less); also well
/// under what gRPC libraries accept in one message by default (4 MiB).
const BATCH_BYTES: usize = 1024 * 1024;
/// Messages at least this large go alone: batching them saves nothing.
const LARGE_MESSAGE: usize = 64 * 1024;

/// The stream of `rx`, batched when `batches` (the app set
/// `Register.accepts_batches`) into messages of at most `max_bytes`.
pub(super) fn stream(
    rx: mpsc::UnboundedReceiver<Queued>,
    batches: bool,
    max_bytes: usize,
) -> DaemonStream {
    if !batches {
        return Box::pin(
            tokio_stream::wrappers::UnboundedReceiverStream::new(rx)
                .map(|queued| queued.map(|sized| sized.message)),
        );
    }
    let max_bytes = max_bytes.min(BATCH_BYTES);
    Box::pin(futures::stream::unfold(
        (rx, None::<Queued>),
        move |(mut rx, held)| async move {
            let first = match held {
                Some(queued) => queued,
                None => rx.recv().await?,
            };
            let (item, held) = next_batch(first, &mut rx, max_bytes);
            Some((item, (rx, held)))
        },
    ))
}

/// What a message of `bytes` adds to a `DaemonBatch`: its field tag, its
/// length and itself.
fn entry_len(bytes: usize) -> usize {
    1 + encoded_len_varint(bytes as u64) + bytes
}

/// The encoded size of a `DaemonMessage` holding a batch whose entries add
/// up to `entries` bytes.
fn batch_len(entries: usize) -> usize {
    1 + encoded_len_varint(entries as u64) + entries
}

/// `first` and whatever small messages are queued behind it, as one item of
/// at most `max_bytes` (a message alone may be larger: it was checked
/// against the app's own limit); the message that did not fit is held for
/// the next one.
fn next_batch(
    first: Queued,
    rx: &mut mpsc::UnboundedReceiver<Queued>,
    max_bytes: usize,
) -> (Item, Option<Queued>) {
    let first = match first {
        Ok(sized) => sized,
        // The stream's closing status: after everything sent before it.
        Err(status) => return (Err(status), None),
    };
    if first.bytes >= LARGE_MESSAGE {
        return (Ok(first.message), None);
    }
    let mut entries = entry_len(first.bytes);
    let mut batch = vec![first.message];
    let mut held = None;
    while batch.len() < BATCH_MESSAGES {
        match rx.try_recv() {
            Ok(Ok(sized)) => {
                let entry = entry_len(sized.bytes);
                if sized.bytes >= LARGE_MESSAGE || batch_len(entries + entry) > max_bytes {
                    held = Some(Ok(sized));
                    break;
                }
                entries += entry;
                batch.push(sized.message);
            }
            Ok(Err(status)) => {
                held = Some(Err(status));
                break;
            }
            Err(_) => break,
        }
    }
    let item = if batch.len() == 1 {
        batch.pop().map_or_else(unreachable_empty, Ok)
    } else {
        Ok(pb::DaemonMessage {
            kind: Some(pb::daemon_message::Kind::Batch(pb::DaemonBatch {
                messages: batch,
            })),
        })
    };
    (item, held)
}

fn unreachable_empty() -> Item {
    Err(Status::internal("an empty batch was about to be sent"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(call_id: u64, bytes: usize) -> Queued {
        let message = pb::DaemonMessage {
            kind: Some(pb::daemon_message::Kind::Turn(pb::Turn {
                call_id,
                payload: Some(pb::Payload {
                    data: vec![0; bytes].into(),
                    ..Default::default()
                }),
                ..Default::default()
            })),
        };
        let bytes = prost::Message::encoded_len(&message);
        Ok(Sized { message, bytes })
    }

    fn call_ids(message: &pb::DaemonMessage) -> Vec<u64> {
        match &message.kind {
            Some(pb::daemon_message::Kind::Batch(b)) => {
                b.messages.iter().flat_map(call_ids).collect()
            }
            Some(pb::daemon_message::Kind::Turn(t)) => vec![t.call_id],
            _ => vec![],
        }
    }

    #[tokio::test]
    async fn what_is_queued_goes_together_large_messages_alone_in_order() {
        use futures::StreamExt;
        let (tx, rx) = mpsc::unbounded_channel();
        for id in 0..300 {
            let _ = tx.send(turn(id, 10));
        }
        let _ = tx.send(turn(300, LARGE_MESSAGE));
        let _ = tx.send(turn(301, 10));
        drop(tx);
        let sent: Vec<Vec<u64>> = stream(rx, true, usize::MAX)
            .map(|m| m.map(|m| call_ids(&m)).unwrap_or_default())
            .collect()
            .await;
        let sizes: Vec<usize> = sent.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![256, 44, 1, 1]);
        let order: Vec<u64> = sent.into_iter().flatten().collect();
        assert_eq!(order, (0..302).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn an_app_that_does_not_accept_batches_gets_messages_alone() {
        use futures::StreamExt;
        let (tx, rx) = mpsc::unbounded_channel();
        for id in 0..3 {
            let _ = tx.send(turn(id, 10));
        }
        drop(tx);
        let sent: Vec<Vec<u64>> = stream(rx, false, usize::MAX)
            .map(|m| m.map(|m| call_ids(&m)).unwrap_or_default())
            .collect()
            .await;
        assert_eq!(sent, vec![vec![0], vec![1], vec![2]]);
    }

    #[tokio::test]
    async fn batches_stay_within_the_apps_limit_exactly() {
        use futures::StreamExt;
        // Sizes around the limit, so that some batch ends within a few
        // bytes of it.
        const LIMIT: usize = 100_000;
        let (tx, rx) = mpsc::unbounded_channel();
        let mut expected = 0;
        for id in 0..600 {
            let _ = tx.send(turn(id, 1_000 + (id as usize * 37) % 9_000));
            expected += 1;
        }
        drop(tx);
        let sent: Vec<pb::DaemonMessage> = stream(rx, true, LIMIT)
            .map(|m| m.unwrap_or_default())
            .collect()
            .await;
        let largest = sent
            .iter()
            .map(prost::Message::encoded_len)
            .max()
            .unwrap_or_default();
        assert!(largest <= LIMIT, "a batch of {largest} bytes");
        assert!(largest > LIMIT - 10_000, "batches are filled: {largest}");
        let order: Vec<u64> = sent.iter().flat_map(call_ids).collect();
        assert_eq!(order, (0..expected).collect::<Vec<_>>());
    }

    #[test]
    fn the_batch_size_is_computed_as_prost_encodes_it() {
        for sizes in [
            vec![10],
            vec![100, 200],
            vec![127, 128, 16_383, 16_384, 60_000],
        ] {
            let messages: Vec<pb::DaemonMessage> = sizes
                .iter()
                .filter_map(|&n| turn(0, n).ok())
                .map(|s| s.message)
                .collect();
            let entries: usize = messages
                .iter()
                .map(|m| entry_len(prost::Message::encoded_len(m)))
                .sum();
            let batch = pb::DaemonMessage {
                kind: Some(pb::daemon_message::Kind::Batch(pb::DaemonBatch {
                    messages,
                })),
            };
            assert_eq!(batch_len(entries), prost::Message::encoded_len(&batch));
        }
    }
}
