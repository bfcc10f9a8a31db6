//! The reminder writer: one task applies every reminder write, in order,
//! batching whatever has queued into one durable store write (group
//! commit).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use troupe_storage::{ReminderApplied, ReminderStore, ReminderWrite};

use crate::error::{CallError, Unavailable};
use crate::types::ActorId;

pub(crate) fn store_error(e: troupe_storage::StoreError) -> CallError {
    Unavailable::store("the reminder store failed", e).into()
}

pub(crate) struct WriteRequest {
    /// With the owner epoch the daemon held the actor under when it queued
    /// the write (the store refuses it if a newer owner came since).
    pub(crate) write: ReminderWrite,
    /// Whether the op was applied (a delete: whether the reminder existed).
    pub(crate) done: oneshot::Sender<Result<bool, CallError>>,
    /// Its place in the order writes were queued (from 1).
    pub(crate) seq: u64,
}

/// Largest batch one store write carries.
const MAX_WRITE_BATCH: usize = 8192;

/// How long the writer waits with nothing to write before giving a store
/// that asks for them an empty batch, for its housekeeping.
const IDLE_BATCH_AFTER: Duration = Duration::from_millis(100);

/// Applies queued writes batch by batch (and, while idle, gives a store
/// that asks for them empty batches) until `stop` completes, then
/// writes what is still queued and ends, counting in `failed_while_closing`
/// the writes the store refused after `stop`. After each batch, `settled`
/// holds the last `seq` it carried: every write up to it is in the store or
/// failed (a load waits for it, see `Scheduler::load`).
pub(crate) async fn run_writer(
    store: Arc<dyn ReminderStore>,
    mut rx: mpsc::UnboundedReceiver<WriteRequest>,
    stop: impl Future<Output = ()>,
    failed_while_closing: Arc<AtomicUsize>,
    settled: Arc<watch::Sender<u64>>,
) {
    tokio::pin!(stop);
    let mut batch = Vec::with_capacity(MAX_WRITE_BATCH);
    loop {
        let upkeep = store.wants_idle_batches();
        tokio::select! {
            biased;
            n = rx.recv_many(&mut batch, MAX_WRITE_BATCH) => {
                if n == 0 {
                    return;
                }
                // A failure reached every request of the batch.
                let _ = apply(&*store, &mut batch, &settled).await;
            }
            () = tokio::time::sleep(IDLE_BATCH_AFTER), if upkeep => {
                if let Err(e) = store.apply_reminders(&[]).await {
                    tracing::debug!(error = %e, "reminder store housekeeping failed; tried again when idle");
                }
            }
            () = &mut stop => {
                // Every task that writes has ended: what is queued is all.
                loop {
                    while batch.len() < MAX_WRITE_BATCH {
                        match rx.try_recv() {
                            Ok(request) => batch.push(request),
                            Err(_) => break,
                        }
                    }
                    if batch.is_empty() {
                        return;
                    }
                    let writes = batch.len();
                    if let Err(e) = apply(&*store, &mut batch, &settled).await {
                        tracing::warn!(
                            writes,
                            error = %e,
                            "reminder writes failed while stopping; those reminders may fire again after a restart"
                        );
                        failed_while_closing.fetch_add(writes, Ordering::Relaxed);
                    }
                }
            }
        }
    }
}

/// Writes `batch` as one store write and answers each request.
async fn apply(
    store: &dyn ReminderStore,
    batch: &mut Vec<WriteRequest>,
    settled: &watch::Sender<u64>,
) -> Result<(), troupe_storage::StoreError> {
    let writes: Vec<ReminderWrite> = batch.iter().map(|req| req.write.clone()).collect();
    let result = store.apply_reminders(&writes).await;
    if let Some(last) = batch.last() {
        settled.send_replace(last.seq);
    }
    for (i, req) in batch.drain(..).enumerate() {
        let key = req.write.op.key();
        let outcome = match &result {
            Err(e) => Err(store_error(e.clone())),
            Ok(applied) => match applied.get(i) {
                Some(ReminderApplied::Put) => Ok(true),
                Some(ReminderApplied::Deleted { existed }) => Ok(*existed),
                Some(ReminderApplied::Fenced) => Err(Unavailable::Fenced {
                    actor: ActorId::new(key.actor_type.as_str(), key.actor_id.as_str()),
                }
                .into()),
                None => Err(CallError::Internal(
                    "the reminder store answered fewer writes than it was given".into(),
                )),
            },
        };
        let _ = req.done.send(outcome);
    }
    result.map(drop)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use troupe_storage::conformance::{HookedReminders, ReminderHooks};

    use super::*;

    /// Housekeeping that takes `left` empty batches.
    #[derive(Debug, Default)]
    struct Upkeep {
        left: AtomicUsize,
        done: tokio::sync::Notify,
    }

    impl ReminderHooks for Upkeep {
        fn applying(&self, writes: &[ReminderWrite]) {
            if writes.is_empty() {
                let before = self
                    .left
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
                if before == Ok(1) {
                    self.done.notify_one();
                }
            }
        }

        fn wants_idle_batches(&self) -> bool {
            self.left.load(Ordering::SeqCst) > 0
        }
    }

    #[tokio::test]
    async fn an_idle_writer_gives_empty_batches_while_the_store_asks() {
        let store = Arc::new(HookedReminders::new(Upkeep {
            left: AtomicUsize::new(3),
            ..Upkeep::default()
        }));
        let (tx, rx) = mpsc::unbounded_channel();
        let writer = tokio::spawn(run_writer(
            store.clone(),
            rx,
            std::future::pending(),
            Arc::default(),
            Arc::new(watch::Sender::new(0)),
        ));
        let asked =
            tokio::time::timeout(Duration::from_secs(10), store.hooks.done.notified()).await;
        assert!(asked.is_ok(), "the writer gave no empty batches");
        assert!(!store.wants_idle_batches());
        drop(tx);
        assert!(writer.await.is_ok());
    }
}
