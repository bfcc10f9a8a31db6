//! The daemon's side of an app stream. For an app that accepts batches,
//! what is queued when the stream is ready to write goes out as one
//! `DaemonBatch` (never waiting for more: a lone message goes at once and
//! alone), so a burst the daemon causes (thousands of idle actors
//! deactivated together) is a few large HTTP/2 frames, not thousands of
//! tiny ones.

use std::pin::Pin;

use futures::Stream;
use prost::Message;
use tokio::sync::mpsc;
use tonic::Status;
use troupe_proto::v1 as pb;

/// What the daemon sends down an app stream.
pub type DaemonStream = Pin<Box<dyn Stream<Item = Result<pb::DaemonMessage, Status>> + Send>>;

type Queued = Result<pb::DaemonMessage, Status>;

/// Most messages in one batch.
const BATCH_MESSAGES: usize = 256;
/// Most encoded bytes in one batch; also well under what SDKs accept in
/// one message (4 MiB by default in gRPC libraries).
const BATCH_BYTES: usize = 1024 * 1024;
/// Messages at least this large go alone: batching them saves nothing.
const LARGE_MESSAGE: usize = 64 * 1024;

/// The stream of `rx`, batched when `batches` (the app set
/// `Register.accepts_batches`).
pub(super) fn stream(rx: mpsc::UnboundedReceiver<Queued>, batches: bool) -> DaemonStream {
    if !batches {
        return Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(rx));
    }
    Box::pin(futures::stream::unfold(
        (rx, None::<Queued>),
        |(mut rx, held)| async move {
            let first = match held {
                Some(queued) => queued,
                None => rx.recv().await?,
            };
            let (item, held) = next_batch(first, &mut rx);
            Some((item, (rx, held)))
        },
    ))
}

/// `first` and whatever small messages are queued behind it, as one item;
/// the message that did not fit is held for the next one.
fn next_batch(first: Queued, rx: &mut mpsc::UnboundedReceiver<Queued>) -> (Queued, Option<Queued>) {
    let first = match first {
        Ok(message) => message,
        // The stream's closing status: after everything sent before it.
        Err(status) => return (Err(status), None),
    };
    let mut bytes = first.encoded_len();
    if bytes >= LARGE_MESSAGE {
        return (Ok(first), None);
    }
    let mut batch = vec![first];
    let mut held = None;
    while batch.len() < BATCH_MESSAGES {
        match rx.try_recv() {
            Ok(Ok(message)) => {
                let size = message.encoded_len();
                if size >= LARGE_MESSAGE || bytes + size > BATCH_BYTES {
                    held = Some(Ok(message));
                    break;
                }
                bytes += size;
                batch.push(message);
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

fn unreachable_empty() -> Queued {
    Err(Status::internal("an empty batch was about to be sent"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(call_id: u64, bytes: usize) -> Queued {
        Ok(pb::DaemonMessage {
            kind: Some(pb::daemon_message::Kind::Turn(pb::Turn {
                call_id,
                payload: Some(pb::Payload {
                    data: vec![0; bytes].into(),
                    ..Default::default()
                }),
                ..Default::default()
            })),
        })
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
        let sent: Vec<Vec<u64>> = stream(rx, true)
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
        let sent: Vec<Vec<u64>> = stream(rx, false)
            .map(|m| m.map(|m| call_ids(&m)).unwrap_or_default())
            .collect()
            .await;
        assert_eq!(sent, vec![vec![0], vec![1], vec![2]]);
    }
}
