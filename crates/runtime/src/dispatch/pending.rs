//! The bounds on calls that are queued or running: one for the daemon, one
//! per actor type (so a type whose app hangs cannot starve the others).

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::CallError;

#[derive(Debug)]
pub(crate) struct PendingCalls {
    in_use: AtomicUsize,
    /// Changes when a type is registered again with other options.
    limit: AtomicUsize,
}

impl PendingCalls {
    /// The counter lives as long as the process: every call's slot points at
    /// it, and a plain reference (rather than an `Arc`) keeps two atomic
    /// operations per call off the hot path. One counter per runtime created.
    pub(crate) fn new(limit: usize) -> &'static Self {
        Box::leak(Box::new(Self {
            in_use: AtomicUsize::new(0),
            limit: AtomicUsize::new(limit),
        }))
    }

    pub(crate) fn acquire(&'static self) -> Result<PendingSlot, CallError> {
        if !self.take() {
            return Err(CallError::Overloaded(format!(
                "the daemon has {} calls queued or running, its limit (--max-pending-calls); \
                 retry with backoff",
                self.limit()
            )));
        }
        Ok(PendingSlot {
            daemon: Some(self),
            of_type: None,
        })
    }

    /// Takes one place; `false` (taking none) at the limit.
    fn take(&self) -> bool {
        let before = self.in_use.fetch_add(1, Ordering::Relaxed);
        if before >= self.limit() {
            self.in_use.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    pub(crate) fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    pub(crate) fn in_use(&self) -> usize {
        self.in_use.load(Ordering::Relaxed)
    }
}

/// One call's place under the bounds; freed when the call ends however it
/// ends.
#[derive(Debug, Default)]
pub(crate) struct PendingSlot {
    daemon: Option<&'static PendingCalls>,
    of_type: Option<&'static PendingCalls>,
}

impl PendingSlot {
    /// Also takes a place under `of_type`, the bound of the call's type
    /// (named `actor_type` in the refusal), once.
    pub(crate) fn add_type(
        &mut self,
        of_type: &'static PendingCalls,
        actor_type: &str,
    ) -> Result<(), CallError> {
        if self.of_type.is_some() {
            return Ok(());
        }
        if !of_type.take() {
            return Err(CallError::Overloaded(format!(
                "actor type '{actor_type}' has {} calls queued or running, its limit \
                 (max_pending_calls of the type, or the daemon's --max-pending-per-type); its \
                 app may be slow or stuck; retry with backoff",
                of_type.limit()
            )));
        }
        self.of_type = Some(of_type);
        Ok(())
    }
}

impl Drop for PendingSlot {
    fn drop(&mut self) {
        for bound in [self.daemon.take(), self.of_type.take()]
            .into_iter()
            .flatten()
        {
            bound.in_use.fetch_sub(1, Ordering::Relaxed);
        }
    }
}
