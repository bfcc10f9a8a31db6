//! The reminder writer: one task applies every reminder write, in order,
//! batching whatever has queued into one atomic, durable store write (group
//! commit).

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use troupe_storage::{ReminderKey, ReminderRecord, ReminderStore};

use crate::error::{CallError, Unavailable};

pub(crate) fn store_error(e: troupe_storage::StoreError) -> CallError {
    Unavailable::store("the reminder store failed", e).into()
}

pub(crate) enum WriteOp {
    Put(ReminderRecord),
    Delete(ReminderKey),
}

pub(crate) struct WriteRequest {
    pub(crate) op: WriteOp,
    /// Whether the op was applied (a delete: whether the reminder existed).
    pub(crate) done: oneshot::Sender<Result<bool, CallError>>,
}

/// Largest batch one store write carries.
const MAX_WRITE_BATCH: usize = 8192;

pub(crate) async fn run_writer(
    store: Arc<dyn ReminderStore>,
    mut rx: mpsc::UnboundedReceiver<WriteRequest>,
) {
    let mut batch = Vec::with_capacity(MAX_WRITE_BATCH);
    while rx.recv_many(&mut batch, MAX_WRITE_BATCH).await > 0 {
        let mut puts = Vec::new();
        let mut deletes = Vec::new();
        for req in &batch {
            match &req.op {
                WriteOp::Put(record) => puts.push(record.clone()),
                WriteOp::Delete(key) => deletes.push(key.clone()),
            }
        }
        let result = store.apply_reminders(&puts, &deletes).await;
        let mut existed = match &result {
            Ok(e) => e.clone().into_iter(),
            Err(_) => Vec::new().into_iter(),
        };
        for req in batch.drain(..) {
            let outcome = match &result {
                Err(e) => Err(store_error(e.clone())),
                Ok(_) => match req.op {
                    WriteOp::Put(_) => Ok(true),
                    WriteOp::Delete(_) => Ok(existed.next().unwrap_or(false)),
                },
            };
            let _ = req.done.send(outcome);
        }
    }
}
