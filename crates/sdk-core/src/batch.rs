//! The app's answers on their way out: the answers ready together go in one
//! `AppBatch`, exactly as the Python SDK batched them.
//!
//! Many tiny HTTP/2 DATA frames cost the daemon far more than a few larger
//! ones, and HTTP/2 peers limit how many they buffer. A batch stays well under
//! the daemon's 64 MiB message limit: at most [`BATCH_MESSAGES`] answers and
//! [`BATCH_BYTES`] bytes; an answer above [`ALONE_BYTES`] goes alone. Nothing
//! ever waits for more answers than the first.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::Stream;
use prost::Message;
use tokio::sync::mpsc::UnboundedReceiver;
use troupe_proto::v1::{app_message, AppBatch, AppMessage};

pub const BATCH_MESSAGES: usize = 256;
pub const BATCH_BYTES: usize = 1024 * 1024;
pub const ALONE_BYTES: usize = 64 * 1024;
/// What each answer adds inside `AppBatch` beyond its own size: the field tag
/// (1 byte) and its length (at most 3 bytes for an answer of `ALONE_BYTES`).
const ENTRY_OVERHEAD: usize = 4;

/// Pulls answers from the layer's queue and yields what to write next.
pub(crate) struct Batcher {
    rx: UnboundedReceiver<AppMessage>,
    /// An answer that did not fit in the previous batch: written next.
    held: Option<AppMessage>,
    /// Whether the daemon said (in `Registered`) that it reads `AppBatch`; an
    /// older one would end the stream on one. False until registration.
    batches: Arc<AtomicBool>,
}

impl Batcher {
    pub(crate) fn new(rx: UnboundedReceiver<AppMessage>, batches: Arc<AtomicBool>) -> Self {
        Self {
            rx,
            held: None,
            batches,
        }
    }

    /// The request stream tonic writes: ends when every sender is gone.
    pub(crate) fn into_stream(self) -> impl Stream<Item = AppMessage> + Send + 'static {
        futures::stream::unfold(self, |mut batcher| async move {
            let next = batcher.next().await?;
            Some((next, batcher))
        })
    }

    async fn next(&mut self) -> Option<AppMessage> {
        let first = match self.held.take() {
            Some(held) => held,
            None => self.rx.recv().await?,
        };
        if !self.batches.load(Ordering::Acquire) {
            return Some(first);
        }
        let size = first.encoded_len();
        if size > ALONE_BYTES {
            return Some(first);
        }
        let mut batch = vec![first];
        let mut total = size + ENTRY_OVERHEAD;
        while batch.len() < BATCH_MESSAGES {
            let Ok(msg) = self.rx.try_recv() else { break };
            let size = msg.encoded_len();
            if size > ALONE_BYTES || total + size + ENTRY_OVERHEAD > BATCH_BYTES {
                // Goes first in the next write, alone or starting a batch.
                self.held = Some(msg);
                break;
            }
            batch.push(msg);
            total += size + ENTRY_OVERHEAD;
        }
        if batch.len() == 1 {
            return batch.pop();
        }
        Some(AppMessage {
            kind: Some(app_message::Kind::Batch(AppBatch { messages: batch })),
        })
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

    fn batch_len(msg: &AppMessage) -> usize {
        match &msg.kind {
            Some(app_message::Kind::Batch(b)) => b.messages.len(),
            _ => 1,
        }
    }

    #[tokio::test]
    async fn answers_ready_together_go_in_one_batch_once_allowed() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let allowed = Arc::new(AtomicBool::new(false));
        let mut batcher = Batcher::new(rx, allowed.clone());
        for id in 0..3 {
            assert!(tx.send(answer(id)).is_ok());
        }
        // Before Registered says so, every answer goes alone.
        assert_eq!(batcher.next().await.map(|m| batch_len(&m)), Some(1));
        allowed.store(true, Ordering::Release);
        assert_eq!(batcher.next().await.map(|m| batch_len(&m)), Some(2));
    }

    #[tokio::test]
    async fn a_batch_holds_at_most_batch_messages() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut batcher = Batcher::new(rx, Arc::new(AtomicBool::new(true)));
        for id in 0..(BATCH_MESSAGES as u64 + 1) {
            assert!(tx.send(answer(id)).is_ok());
        }
        assert_eq!(
            batcher.next().await.map(|m| batch_len(&m)),
            Some(BATCH_MESSAGES)
        );
        assert_eq!(batcher.next().await.map(|m| batch_len(&m)), Some(1));
    }
}
