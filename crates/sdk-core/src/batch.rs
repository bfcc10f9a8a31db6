//! The app's answers on their way out: the answers ready together go in one
//! `AppBatch`, exactly as the Python SDK batched them, and small answers go
//! ahead of large ones queued before them; to a daemon that reassembles
//! them, a large answer goes a piece at a time (`troupe_proto::parts`) with
//! small ones between the pieces.
//!
//! Many tiny HTTP/2 DATA frames cost the daemon far more than a few larger
//! ones, and HTTP/2 peers limit how many they buffer. A batch stays well under
//! the daemon's 64 MiB message limit: at most [`BATCH_MESSAGES`] answers and
//! [`BATCH_BYTES`] bytes; an answer above [`ALONE_BYTES`] goes alone. Nothing
//! ever waits for more answers than the first.
//!
//! One stream carries every answer, so a small call's answer queued behind
//! the answers of large calls (8 MiB echoes, say) waited for all of them to
//! be written. It now waits for the one being written at most (or its piece
//! being written, when the daemon takes pieces). The daemon
//! applies an answer's state changes in the order answers arrive, so an
//! answer with changes never passes one that has changes too (two turns of
//! one reentrant actor may both have some); answers of one actor are
//! otherwise never queued together (the daemon sends a turn after the
//! activation's answer, a deactivation after the last turn's).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::Stream;
use prost::Message;
use tokio::sync::mpsc::UnboundedReceiver;
use troupe_proto::parts::{goes_in_parts, InParts};
use troupe_proto::v1::{app_message, AppBatch, AppMessage, MessagePart, Registered};

pub const BATCH_MESSAGES: usize = 256;
pub const BATCH_BYTES: usize = 1024 * 1024;
pub const ALONE_BYTES: usize = 64 * 1024;
/// What each answer adds inside `AppBatch` beyond its own size: the field tag
/// (1 byte) and its length (at most 3 bytes for an answer of `ALONE_BYTES`).
const ENTRY_OVERHEAD: usize = 4;
/// Answers taken off the queue to choose from, at most: bounds the work of
/// one choice when a burst is queued.
const MAX_PENDING: usize = 4 * BATCH_MESSAGES;

/// What the daemon said (in `Registered`) that it reads; an older daemon
/// would end the stream on either. Neither until registration.
#[derive(Debug, Default)]
pub struct DaemonReads {
    batches: AtomicBool,
    parts: AtomicBool,
}

impl DaemonReads {
    /// What `registered` says.
    pub fn learn(&self, registered: &Registered) {
        self.batches
            .store(registered.accepts_batches, Ordering::Release);
        self.parts
            .store(registered.accepts_parts, Ordering::Release);
    }
}

/// Pulls answers from the layer's queue and yields what to write next.
#[derive(Debug)]
pub struct Batcher {
    rx: UnboundedReceiver<AppMessage>,
    /// Answers taken off the queue and not written yet, with their sizes,
    /// in queue order.
    pending: VecDeque<(AppMessage, usize)>,
    /// The large answer being written a piece at a time, ahead of every
    /// pending one, with whether it changes state.
    in_parts: Option<InParts<bool>>,
    daemon: Arc<DaemonReads>,
}

/// Whether the daemon applies state changes (or publishes events, which
/// watchers see in the order the turns ended) when it reads `msg`.
fn changes_state(msg: &AppMessage) -> bool {
    match &msg.kind {
        Some(app_message::Kind::TurnResult(r)) => !r.changes.is_empty() || !r.events.is_empty(),
        Some(app_message::Kind::Activated(r)) => !r.changes.is_empty(),
        Some(app_message::Kind::Deactivated(r)) => !r.changes.is_empty(),
        Some(app_message::Kind::Register(_)) | None => false,
        Some(app_message::Kind::Batch(_) | app_message::Kind::Part(_)) => true,
    }
}

fn part(part: MessagePart) -> AppMessage {
    AppMessage {
        kind: Some(app_message::Kind::Part(part)),
    }
}

impl Batcher {
    /// Answers from `rx`, batched and cut in pieces once `daemon` says the
    /// daemon reads them.
    pub fn new(rx: UnboundedReceiver<AppMessage>, daemon: Arc<DaemonReads>) -> Self {
        Self {
            rx,
            pending: VecDeque::new(),
            in_parts: None,
            daemon,
        }
    }

    /// The request stream tonic writes: ends when every sender is gone.
    pub fn into_stream(self) -> impl Stream<Item = AppMessage> + Send + 'static {
        futures::stream::unfold(self, |mut batcher| async move {
            let next = batcher.next().await?;
            Some((next, batcher))
        })
    }

    async fn next(&mut self) -> Option<AppMessage> {
        if self.pending.is_empty() && self.in_parts.is_none() {
            let first = self.rx.recv().await?;
            let size = first.encoded_len();
            self.pending.push_back((first, size));
        }
        if !self.daemon.batches.load(Ordering::Acquire) {
            return self.pending.pop_front().map(|(msg, _)| msg);
        }
        while self.pending.len() < MAX_PENDING {
            let Ok(msg) = self.rx.try_recv() else { break };
            let size = msg.encoded_len();
            self.pending.push_back((msg, size));
        }
        let take = self.chosen();
        let count = take.iter().filter(|t| **t).count();
        if count == 0 {
            return self.next_large();
        }
        if count == 1 {
            let at = take.iter().position(|t| *t).unwrap_or(0);
            return self.pending.remove(at).map(|(msg, _)| msg);
        }
        let mut batch = Vec::with_capacity(count);
        let mut rest = VecDeque::with_capacity(self.pending.len().saturating_sub(count));
        for (entry, taken) in self.pending.drain(..).zip(take) {
            if taken {
                batch.push(entry.0);
            } else {
                rest.push_back(entry);
            }
        }
        self.pending = rest;
        Some(AppMessage {
            kind: Some(app_message::Kind::Batch(AppBatch { messages: batch })),
        })
    }

    /// The next piece of the answer being written in pieces, else the first
    /// pending answer: whole, or its first piece when it is large and the
    /// daemon reads pieces.
    fn next_large(&mut self) -> Option<AppMessage> {
        if let Some(piece) = InParts::next(&mut self.in_parts) {
            return Some(part(piece));
        }
        let (msg, size) = self.pending.pop_front()?;
        if !(self.daemon.parts.load(Ordering::Acquire) && goes_in_parts(size)) {
            return Some(msg);
        }
        let changes = changes_state(&msg);
        InParts::start(&mut self.in_parts, msg, changes).map(part)
    }

    /// Which pending answers the next write carries: the small ones that
    /// fit in a batch, passing large ones (see the module doc); none when
    /// the first is large (it goes alone) or the answer being written in
    /// pieces holds them back.
    fn chosen(&self) -> Vec<bool> {
        let mut take = vec![false; self.pending.len()];
        let mut passed_changes = self.in_parts.as_ref().is_some_and(|p| p.about);
        let (mut count, mut total) = (0, 0);
        for (i, (msg, size)) in self.pending.iter().enumerate() {
            if count == BATCH_MESSAGES {
                break;
            }
            let changes = changes_state(msg);
            if *size > ALONE_BYTES || (changes && passed_changes) {
                passed_changes |= changes;
                continue;
            }
            if total + size + ENTRY_OVERHEAD > BATCH_BYTES {
                break;
            }
            if let Some(t) = take.get_mut(i) {
                *t = true;
            }
            count += 1;
            total += size + ENTRY_OVERHEAD;
        }
        take
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_proto::v1::TurnResult;

    fn answer(call_id: u64) -> AppMessage {
        AppMessage {
            kind: Some(app_message::Kind::TurnResult(TurnResult {
                call_id,
                ..Default::default()
            })),
        }
    }

    fn reads(batches: bool, parts: bool) -> Arc<DaemonReads> {
        let daemon = Arc::new(DaemonReads::default());
        daemon.learn(&Registered {
            accepts_batches: batches,
            accepts_parts: parts,
            ..Default::default()
        });
        daemon
    }

    fn batch_len(msg: &AppMessage) -> usize {
        match &msg.kind {
            Some(app_message::Kind::Batch(b)) => b.messages.len(),
            _ => 1,
        }
    }

    #[tokio::test]
    async fn answers_ready_together_go_in_one_batch_once_allowed() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let daemon = Arc::new(DaemonReads::default());
        let mut batcher = Batcher::new(rx, daemon.clone());
        for id in 0..3 {
            assert!(tx.send(answer(id)).is_ok());
        }
        // Before Registered says so, every answer goes alone.
        assert_eq!(batcher.next().await.map(|m| batch_len(&m)), Some(1));
        daemon.learn(&Registered {
            accepts_batches: true,
            ..Default::default()
        });
        assert_eq!(batcher.next().await.map(|m| batch_len(&m)), Some(2));
    }

    fn answer_of(call_id: u64, bytes: usize, changes: bool) -> AppMessage {
        AppMessage {
            kind: Some(app_message::Kind::TurnResult(TurnResult {
                call_id,
                outcome: Some(troupe_proto::v1::turn_result::Outcome::Reply(
                    troupe_proto::v1::Payload {
                        data: vec![0; bytes].into(),
                        ..Default::default()
                    },
                )),
                changes: if changes {
                    vec![troupe_proto::v1::StateChange {
                        ttl_ms: None,
                        key: "k".into(),
                        op: None,
                    }]
                } else {
                    Vec::new()
                },
                ..Default::default()
            })),
        }
    }

    fn call_ids(msg: &AppMessage) -> Vec<u64> {
        match &msg.kind {
            Some(app_message::Kind::Batch(b)) => b.messages.iter().flat_map(call_ids).collect(),
            Some(app_message::Kind::TurnResult(r)) => vec![r.call_id],
            _ => Vec::new(),
        }
    }

    #[tokio::test]
    async fn small_answers_pass_large_ones_but_state_changes_keep_their_order() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut batcher = Batcher::new(rx, reads(true, false));
        let big = 2 * ALONE_BYTES;
        for msg in [
            answer_of(0, big, true),
            answer_of(1, big, false),
            answer_of(2, 10, false),
            // Changes, behind a large answer with changes: waits for it, and
            // then passes the one without.
            answer_of(3, 10, true),
            answer_of(4, 10, false),
        ] {
            assert!(tx.send(msg).is_ok());
        }
        drop(tx);
        let mut sent = Vec::new();
        while let Some(msg) = batcher.next().await {
            sent.push(call_ids(&msg));
        }
        assert_eq!(sent, vec![vec![2, 4], vec![0], vec![3], vec![1]]);
    }

    /// An answer that publishes an event and changes no state.
    fn publishing(call_id: u64, bytes: usize) -> AppMessage {
        let mut msg = answer_of(call_id, bytes, false);
        if let Some(app_message::Kind::TurnResult(r)) = &mut msg.kind {
            r.events.push(troupe_proto::v1::Payload::default());
        }
        msg
    }

    /// The daemon publishes a turn's events as it reads its answer: a
    /// small answer that publishes must not pass a large one that does, or
    /// watchers would see the later turn's events first.
    #[tokio::test]
    async fn answers_that_publish_keep_their_order_as_state_changes_do() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut batcher = Batcher::new(rx, reads(true, false));
        for msg in [
            publishing(0, 2 * ALONE_BYTES),
            publishing(1, 10),
            answer_of(2, 10, false),
        ] {
            assert!(tx.send(msg).is_ok());
        }
        drop(tx);
        let mut sent = Vec::new();
        while let Some(msg) = batcher.next().await {
            sent.push(call_ids(&msg));
        }
        assert_eq!(sent, vec![vec![2], vec![0], vec![1]]);
    }

    #[tokio::test]
    async fn a_batch_holds_at_most_batch_messages() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut batcher = Batcher::new(rx, reads(true, false));
        for id in 0..(BATCH_MESSAGES as u64 + 1) {
            assert!(tx.send(answer(id)).is_ok());
        }
        assert_eq!(
            batcher.next().await.map(|m| batch_len(&m)),
            Some(BATCH_MESSAGES)
        );
        assert_eq!(batcher.next().await.map(|m| batch_len(&m)), Some(1));
    }

    /// A whole answer's call ids, or a piece as (size, last).
    #[derive(Debug, PartialEq)]
    enum Sent {
        Whole(Vec<u64>),
        Part(usize, bool),
    }

    fn sent(msg: AppMessage) -> Sent {
        match msg.kind {
            Some(app_message::Kind::Part(p)) => Sent::Part(p.data.len(), p.last),
            _ => Sent::Whole(call_ids(&msg)),
        }
    }

    #[tokio::test]
    async fn small_answers_go_between_the_pieces_of_a_large_one() {
        use troupe_proto::parts::PART_BYTES;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut batcher = Batcher::new(rx, reads(true, true));
        let large = answer_of(0, 2 * PART_BYTES, true);
        let rest = large.encoded_len() - 2 * PART_BYTES;
        assert!(tx.send(large).is_ok());
        // First the answer without its reply's bytes, then their pieces.
        assert_eq!(
            batcher.next().await.map(sent),
            Some(Sent::Part(rest, false))
        );
        // Ready while it is being written: the answer without changes goes
        // before its rest, the one with changes after it.
        assert!(tx.send(answer_of(1, 10, true)).is_ok());
        assert!(tx.send(answer_of(2, 10, false)).is_ok());
        assert_eq!(batcher.next().await.map(sent), Some(Sent::Whole(vec![2])));
        assert_eq!(
            batcher.next().await.map(sent),
            Some(Sent::Part(PART_BYTES, false))
        );
        assert_eq!(
            batcher.next().await.map(sent),
            Some(Sent::Part(PART_BYTES, true))
        );
        assert_eq!(batcher.next().await.map(sent), Some(Sent::Whole(vec![1])));

        // To a daemon that reads no pieces, the same answer goes whole.
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut batcher = Batcher::new(rx, reads(true, false));
        assert!(tx.send(answer_of(0, 2 * PART_BYTES, true)).is_ok());
        assert_eq!(batcher.next().await.map(sent), Some(Sent::Whole(vec![0])));
    }
}
