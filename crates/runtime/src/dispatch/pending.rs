//! The daemon-wide bound on calls that are queued or running.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::CallError;

#[derive(Debug)]
pub(crate) struct PendingCalls {
    in_use: AtomicUsize,
    limit: usize,
}

impl PendingCalls {
    /// The counter lives as long as the process: every call's slot points at
    /// it, and a plain reference (rather than an `Arc`) keeps two atomic
    /// operations per call off the hot path. One counter per runtime created.
    pub(crate) fn new(limit: usize) -> &'static Self {
        Box::leak(Box::new(Self {
            in_use: AtomicUsize::new(0),
            limit,
        }))
    }

    pub(crate) fn acquire(&'static self) -> Result<PendingSlot, CallError> {
        let before = self.in_use.fetch_add(1, Ordering::Relaxed);
        if before >= self.limit {
            self.in_use.fetch_sub(1, Ordering::Relaxed);
            return Err(CallError::Overloaded(format!(
                "the daemon has {} calls queued or running, its limit (--max-pending-calls); \
                 retry with backoff",
                self.limit
            )));
        }
        Ok(PendingSlot(Some(self)))
    }

    pub(crate) fn in_use(&self) -> usize {
        self.in_use.load(Ordering::Relaxed)
    }
}

/// One call's place under the bound; freed when the call ends however it ends.
#[derive(Debug, Default)]
pub(crate) struct PendingSlot(Option<&'static PendingCalls>);

impl Drop for PendingSlot {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            p.in_use.fetch_sub(1, Ordering::Relaxed);
        }
    }
}
