//! A worker's run queue: activations with work, in arrival order.
//!
//! A ring buffer under a lock rather than a linked channel: with a million
//! actors busy, the queue holds a million entries, and a buffer that is
//! reused keeps the allocator out of the hot path and the entries in
//! sequential memory the CPU prefetches well.

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::activation::{Activation, Envelope};

/// An entry of a worker's run queue.
pub(crate) struct Runnable {
    pub(crate) act: Arc<Activation>,
    /// Direct dispatch: a call for an idle actor with an empty mailbox rides
    /// here instead of in the mailbox. It is always the actor's oldest call,
    /// so order holds; it saves the mailbox buffer and keeps the call in the
    /// queue's sequential memory, which stays warm in cache.
    pub(crate) first: Option<Envelope>,
}

#[derive(Debug)]
pub(crate) struct RunQueue<T> {
    items: Mutex<VecDeque<T>>,
    /// Wakes the worker when the queue goes from empty to not empty. A
    /// notification with no waiter is kept, so none is lost between the
    /// worker finding the queue empty and starting to wait.
    wake: Notify,
}

impl<T> RunQueue<T> {
    pub(crate) fn new() -> Self {
        Self {
            items: Mutex::new(VecDeque::new()),
            wake: Notify::new(),
        }
    }

    pub(crate) fn push(&self, item: T) {
        let was_empty = {
            let mut items = self.items.lock();
            items.push_back(item);
            items.len() == 1
        };
        if was_empty {
            self.wake.notify_one();
        }
    }

    /// Moves up to `max` items into `out`, waiting while the queue is empty.
    pub(crate) async fn pop_batch(&self, out: &mut Vec<T>, max: usize) {
        loop {
            {
                let mut items = self.items.lock();
                let n = items.len().min(max);
                out.extend(items.drain(..n));
            }
            if !out.is_empty() {
                return;
            }
            self.wake.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_waiting_worker_is_woken_and_order_is_kept() {
        let queue = std::sync::Arc::new(RunQueue::new());
        let q = queue.clone();
        let worker = tokio::spawn(async move {
            let mut out = Vec::new();
            q.pop_batch(&mut out, 10).await;
            out
        });
        tokio::task::yield_now().await;
        queue.push(1);
        queue.push(2);
        let got = worker.await.unwrap_or_default();
        assert_eq!(got.first(), Some(&1));
        let mut rest = Vec::new();
        if got.len() == 1 {
            queue.pop_batch(&mut rest, 10).await;
            assert_eq!(rest, vec![2]);
        } else {
            assert_eq!(got, vec![1, 2]);
        }
    }
}
