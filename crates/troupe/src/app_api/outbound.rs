//! The daemon's side of an app stream. For an app that accepts batches,
//! what is queued when the stream is ready to write goes out as one
//! `DaemonBatch` (never waiting for more: a lone message goes at once and
//! alone), so a burst the daemon causes (thousands of idle actors
//! deactivated together) is a few large HTTP/2 frames, not thousands of
//! tiny ones. A batch stays within the app's message limit as well; each
//! message was checked against it before it was queued. Small messages go
//! ahead of large ones queued before them, unless one is for the same actor
//! (see [`next_item`]); to an app that accepts parts, a large message goes a
//! piece at a time (`troupe_proto::parts`), and small ones go between the
//! pieces too.

use std::collections::VecDeque;
use std::pin::Pin;

use futures::Stream;
use prost::encoding::encoded_len_varint;
use tokio::sync::mpsc;
use tonic::Status;
use troupe_proto::parts::{goes_in_parts, InParts};
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

/// What the app said it takes (`Register`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Accepts {
    /// `accepts_batches`.
    pub(super) batches: bool,
    /// `accepts_parts`.
    pub(super) parts: bool,
    /// The largest message, in encoded bytes.
    pub(super) max_bytes: usize,
}

/// The large message being sent a piece at a time, with its actor: it is
/// ahead of every message queued, as the first of them would be.
type InProgress = Option<InParts<Option<pb::ActorRef>>>;

/// The stream of `rx`, batched and cut as the app `accepts`.
pub(super) fn stream(rx: mpsc::UnboundedReceiver<Queued>, accepts: Accepts) -> DaemonStream {
    let limits = Limits {
        messages: if accepts.batches { BATCH_MESSAGES } else { 1 },
        bytes: accepts.max_bytes.min(BATCH_BYTES),
        parts: accepts.parts,
    };
    Box::pin(futures::stream::unfold(
        (rx, VecDeque::<Queued>::new(), InProgress::None),
        move |(mut rx, mut pending, mut in_parts)| async move {
            if pending.is_empty() && in_parts.is_none() {
                pending.push_back(rx.recv().await?);
            }
            while pending.len() < MAX_PENDING {
                match rx.try_recv() {
                    Ok(queued) => pending.push_back(queued),
                    Err(_) => break,
                }
            }
            let item = next_item(&mut pending, &mut in_parts, limits)?;
            Some((item, (rx, pending, in_parts)))
        },
    ))
}

/// How much one item of the stream may carry.
#[derive(Debug, Clone, Copy)]
struct Limits {
    messages: usize,
    bytes: usize,
    /// Large messages go in pieces.
    parts: bool,
}

/// Messages taken off the channel to choose from, at most: bounds the work
/// of one choice when a burst is queued.
const MAX_PENDING: usize = 4 * BATCH_MESSAGES;

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

/// The actor a message is for.
fn actor_of(message: &pb::DaemonMessage) -> Option<&pb::ActorRef> {
    match &message.kind {
        Some(pb::daemon_message::Kind::Turn(m)) => m.actor.as_ref(),
        Some(pb::daemon_message::Kind::Activate(m)) => m.actor.as_ref(),
        Some(pb::daemon_message::Kind::Deactivate(m)) => m.actor.as_ref(),
        _ => None,
    }
}

fn part(part: pb::MessagePart) -> pb::DaemonMessage {
    pb::DaemonMessage {
        kind: Some(pb::daemon_message::Kind::Part(part)),
    }
}

/// The next item to send from `pending`: the small messages queued, as one
/// batch within `limits`, ahead of the large ones queued before them, so
/// that a small call's turn waits behind at most the large message being
/// written (or, to an app that accepts parts, the piece of it being
/// written), not every one queued (16 callers of 8 MiB put 128 MiB ahead of
/// it); else the next piece of the message `in_parts`, else the first large
/// message, alone or as its first piece. A message never overtakes one for
/// the same actor (its activation, say, carrying large state), nor one whose
/// actor it cannot tell, nor the stream's closing status.
fn next_item(
    pending: &mut VecDeque<Queued>,
    in_parts: &mut InProgress,
    limits: Limits,
) -> Option<Item> {
    let take = chosen(pending, in_parts.as_ref(), limits);
    let count = take.iter().filter(|t| **t).count();
    if count == 0 {
        if let Some(piece) = InParts::next(in_parts) {
            return Some(Ok(part(piece)));
        }
        return match pending.pop_front()? {
            Ok(sized) if limits.parts && goes_in_parts(sized.bytes) => {
                let actor = actor_of(&sized.message).cloned();
                InParts::start(in_parts, sized.message, actor).map(|p| Ok(part(p)))
            }
            other => Some(other.map(|s| s.message)),
        };
    }
    if count == 1 {
        let at = take.iter().position(|t| *t).unwrap_or(0);
        return pending.remove(at).map(|q| q.map(|s| s.message));
    }
    let mut batch = Vec::with_capacity(count);
    let mut rest = VecDeque::with_capacity(pending.len().saturating_sub(count));
    for (queued, taken) in pending.drain(..).zip(take) {
        match queued {
            Ok(sized) if taken => batch.push(sized.message),
            other => rest.push_back(other),
        }
    }
    *pending = rest;
    Some(Ok(pb::DaemonMessage {
        kind: Some(pb::daemon_message::Kind::Batch(pb::DaemonBatch {
            messages: batch,
        })),
    }))
}

/// Which of `pending` the next item carries (see [`next_item`]); none
/// when the first is large or the closing status (it goes alone), or when
/// only messages behind the one `in_parts` are queued.
fn chosen(
    pending: &VecDeque<Queued>,
    in_parts: Option<&InParts<Option<pb::ActorRef>>>,
    limits: Limits,
) -> Vec<bool> {
    let mut take = vec![false; pending.len()];
    // Actors of the messages passed over; `None`: one whose actor is not
    // known, which nothing passes.
    let mut passed: Vec<Option<&pb::ActorRef>> =
        in_parts.map(|p| p.about.as_ref()).into_iter().collect();
    let (mut count, mut entries) = (0, 0);
    for (i, queued) in pending.iter().enumerate() {
        let Ok(sized) = queued else { break };
        if count == limits.messages || passed.contains(&None) {
            break;
        }
        let actor = actor_of(&sized.message);
        let blocked = actor.is_none_or(|a| passed.contains(&Some(a))) && !passed.is_empty();
        if sized.bytes >= LARGE_MESSAGE || blocked {
            passed.push(actor);
            continue;
        }
        let entry = entry_len(sized.bytes);
        if count > 0 && batch_len(entries + entry) > limits.bytes {
            break;
        }
        if let Some(t) = take.get_mut(i) {
            *t = true;
        }
        count += 1;
        entries += entry;
    }
    take
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

    /// What an app that takes no parts accepts.
    fn whole(batches: bool, max_bytes: usize) -> Accepts {
        Accepts {
            batches,
            parts: false,
            max_bytes,
        }
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
        let sent: Vec<Vec<u64>> = stream(rx, whole(true, usize::MAX))
            .map(|m| m.map(|m| call_ids(&m)).unwrap_or_default())
            .collect()
            .await;
        let sizes: Vec<usize> = sent.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![256, 44, 1, 1]);
        let order: Vec<u64> = sent.into_iter().flatten().collect();
        assert_eq!(order, (0..302).collect::<Vec<_>>());
    }

    /// A turn of `bytes` for actor `actor`.
    fn turn_for(call_id: u64, actor: &str, bytes: usize) -> Queued {
        let mut queued = turn(call_id, bytes);
        if let Ok(Sized {
            message:
                pb::DaemonMessage {
                    kind: Some(pb::daemon_message::Kind::Turn(t)),
                },
            bytes,
        }) = &mut queued
        {
            t.actor = Some(pb::ActorRef {
                r#type: "echo".into(),
                id: actor.into(),
            });
            *bytes = prost::Message::encoded_len(t) + 2;
        }
        queued
    }

    #[tokio::test]
    async fn small_messages_overtake_queued_large_ones_of_other_actors_only() {
        use futures::StreamExt;
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(turn_for(0, "bulk-1", 2 * LARGE_MESSAGE));
        let _ = tx.send(turn_for(1, "bulk-2", 2 * LARGE_MESSAGE));
        let _ = tx.send(turn_for(2, "small", 10));
        // Behind its own actor's large message: stays there.
        let _ = tx.send(turn_for(3, "bulk-2", 10));
        let _ = tx.send(turn_for(4, "other", 10));
        let _ = tx.send(Err(Status::unavailable("closing")));
        let _ = tx.send(turn_for(5, "late", 10));
        drop(tx);
        let sent: Vec<Result<Vec<u64>, Status>> = stream(rx, whole(true, usize::MAX))
            .map(|m| m.map(|m| call_ids(&m)))
            .collect()
            .await;
        let ok: Vec<Vec<u64>> = sent.iter().map_while(|s| s.clone().ok()).collect();
        assert_eq!(ok, vec![vec![2, 4], vec![0], vec![1], vec![3]]);
        assert!(
            matches!(sent.get(4), Some(Err(s)) if s.code() == tonic::Code::Unavailable),
            "the closing status comes after everything queued before it: {sent:?}"
        );

        // An app that takes no batches gets them one by one, in that order.
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(turn_for(0, "bulk-1", 2 * LARGE_MESSAGE));
        let _ = tx.send(turn_for(1, "small", 10));
        let _ = tx.send(turn_for(2, "bulk-1", 10));
        let _ = tx.send(turn_for(3, "other", 10));
        drop(tx);
        let sent: Vec<Vec<u64>> = stream(rx, whole(false, usize::MAX))
            .map(|m| m.map(|m| call_ids(&m)).unwrap_or_default())
            .collect()
            .await;
        assert_eq!(sent, vec![vec![1], vec![3], vec![0], vec![2]]);
    }

    #[tokio::test]
    async fn an_app_that_does_not_accept_batches_gets_messages_alone() {
        use futures::StreamExt;
        let (tx, rx) = mpsc::unbounded_channel();
        for id in 0..3 {
            let _ = tx.send(turn(id, 10));
        }
        drop(tx);
        let sent: Vec<Vec<u64>> = stream(rx, whole(false, usize::MAX))
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
        let sent: Vec<pb::DaemonMessage> = stream(rx, whole(true, LIMIT))
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

    /// What the app receives: a whole message's call ids, or a piece's size
    /// and whether it is the last.
    #[derive(Debug, PartialEq)]
    enum Sent {
        Whole(Vec<u64>),
        Part(usize, bool),
    }

    async fn next(stream: &mut DaemonStream) -> Option<Sent> {
        use futures::StreamExt;
        stream.next().await.and_then(Result::ok).map(sent)
    }

    fn sent(message: pb::DaemonMessage) -> Sent {
        match message.kind {
            Some(pb::daemon_message::Kind::Part(p)) => Sent::Part(p.data.len(), p.last),
            _ => Sent::Whole(call_ids(&message)),
        }
    }

    #[tokio::test]
    async fn small_messages_go_between_the_pieces_of_a_large_one() {
        use futures::StreamExt;
        use troupe_proto::parts::PART_BYTES;
        let (tx, rx) = mpsc::unbounded_channel();
        let accepts = Accepts {
            batches: true,
            parts: true,
            max_bytes: usize::MAX,
        };
        let mut stream = stream(rx, accepts);
        let large = turn_for(0, "bulk", 3 * PART_BYTES);
        let encoded = large
            .as_ref()
            .map(|s| prost::Message::encoded_len(&s.message))
            .unwrap_or_default();
        let _ = tx.send(large);
        // First the turn without its payload, then the payload's pieces.
        let rest = encoded - 3 * PART_BYTES;
        assert!(rest < PART_BYTES);
        assert_eq!(next(&mut stream).await, Some(Sent::Part(rest, false)));
        // Queued while the large turn is being written: the other actor's
        // turn goes before the rest of it, the same actor's after.
        let _ = tx.send(turn_for(1, "bulk", 10));
        let _ = tx.send(turn_for(2, "small", 10));
        assert_eq!(next(&mut stream).await, Some(Sent::Whole(vec![2])));
        assert_eq!(next(&mut stream).await, Some(Sent::Part(PART_BYTES, false)));
        // A second large turn waits for the first one's last piece.
        let _ = tx.send(turn_for(3, "bulk-2", 2 * PART_BYTES));
        assert_eq!(next(&mut stream).await, Some(Sent::Part(PART_BYTES, false)));
        assert_eq!(next(&mut stream).await, Some(Sent::Part(PART_BYTES, true)));
        assert_eq!(next(&mut stream).await, Some(Sent::Whole(vec![1])));
        assert!(matches!(
            next(&mut stream).await,
            Some(Sent::Part(rest, false)) if rest < PART_BYTES
        ));
        drop(tx);
        let tail: Vec<Sent> = stream
            .filter_map(|m| futures::future::ready(m.ok().map(sent)))
            .collect()
            .await;
        assert!(
            matches!(tail.as_slice(), [Sent::Part(_, false), Sent::Part(_, true)]),
            "{tail:?}"
        );
    }
}
