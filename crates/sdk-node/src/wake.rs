//! The hand-off from the core's runtime thread to Node's event loop.
//!
//! Runtime threads push what they have for JS (turns, answers to calls) onto
//! a queue, and only the push that finds the queue empty calls the JS side's
//! wake-up function, through a threadsafe function. That callback takes the
//! whole queue at once, so a burst of work costs the event loop one callback
//! and the runtime thread never waits for the JS thread. The threadsafe
//! function is weak (unref'd): the layer decides what keeps the process
//! alive (a call under way, a running app).

use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::Status;
use parking_lot::Mutex;

/// The JS wake-up, `() => void`: weak, so it never holds the process open.
pub type WakeFn =
    ThreadsafeFunction<(), napi::bindgen_prelude::Unknown<'static>, (), Status, false, true>;

/// What an inbox holds between two takes.
pub(crate) trait Queue: Default {
    /// Nothing JS could take now (no wake-up needed).
    fn is_empty(&self) -> bool;

    /// What JS takes now, leaving what it may not have yet.
    fn take(&mut self) -> Self {
        std::mem::take(self)
    }
}

impl<T> Queue for Vec<T> {
    fn is_empty(&self) -> bool {
        Vec::is_empty(self)
    }
}

pub(crate) struct Inbox<Q> {
    queue: Mutex<Q>,
    wake: WakeFn,
}

impl<Q> std::fmt::Debug for Inbox<Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbox").finish_non_exhaustive()
    }
}

impl<Q: Queue> Inbox<Q> {
    pub(crate) fn new(wake: WakeFn) -> Self {
        Self {
            queue: Mutex::new(Q::default()),
            wake,
        }
    }

    /// Adds to the queue with `add`, waking JS if it was empty.
    pub(crate) fn push(&self, add: impl FnOnce(&mut Q)) {
        let woke = {
            let mut queue = self.queue.lock();
            let was_empty = queue.is_empty();
            add(&mut queue);
            was_empty && !queue.is_empty()
        };
        if woke {
            // Closing: Node is shutting down and nobody is left to take it.
            let status = self.wake.call((), ThreadsafeFunctionCallMode::NonBlocking);
            if status != Status::Ok && status != Status::Closing {
                tracing::warn!(?status, "could not wake the event loop");
            }
        }
    }

    /// Everything queued so far.
    pub(crate) fn take(&self) -> Q {
        self.queue.lock().take()
    }
}
