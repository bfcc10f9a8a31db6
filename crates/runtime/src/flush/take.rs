//! Taking the dirty actors into a flush's batch without holding the worker
//! that runs the flush, and putting everything back if the flush is dropped
//! part-way (a shutdown's timeout, an admin call whose caller went away).
//!
//! A flush of 60,000 dirty actors takes 40-75 ms to take on one worker
//! (`cargo bench -p troupe-runtime --bench reminders -- --state-on-sled`):
//! without yield points, the turns queued behind it on that worker wait as
//! long, once a flush interval. So the flush yields whenever tokio's
//! cooperative budget says so, as any long loop on a worker should.

use std::sync::Arc;

use super::batch::Batch;
use super::{Flusher, HeldReply};
use crate::activation::Activation;

/// A batch being taken; if dropped before [`Taking::done`], every change
/// it took goes back to its actor as dirty, the actors it did not reach go
/// back on the dirty list, and the held replies wait for the next flush.
struct Taking<'a> {
    flusher: &'a Flusher,
    batch: Option<Batch>,
    rest: std::vec::IntoIter<Arc<Activation>>,
}

impl Flusher {
    /// Takes `acts`' dirty changes into one batch with `held`, yielding to
    /// the worker's other tasks between actors when the budget runs out.
    pub(super) async fn take_batch(
        &self,
        acts: Vec<Arc<Activation>>,
        held: Vec<HeldReply>,
    ) -> Batch {
        let mut taking = Taking {
            flusher: self,
            batch: Some(Batch::with_capacity(acts.len(), held)),
            rest: acts.into_iter(),
        };
        for act in taking.rest.by_ref() {
            if let Some(batch) = taking.batch.as_mut() {
                let mut inner = act.inner.lock();
                inner.set_in_dirty_list(false);
                batch.take(&act, &mut inner, &*self.placement);
            }
            tokio::task::consume_budget().await;
        }
        taking.done()
    }
}

impl Taking<'_> {
    fn done(mut self) -> Batch {
        self.batch
            .take()
            .unwrap_or_else(|| Batch::with_capacity(0, Vec::new()))
    }
}

impl Drop for Taking<'_> {
    fn drop(&mut self) {
        let Some(batch) = self.batch.take() else {
            return;
        };
        let Batch {
            writes,
            acts,
            held,
            not_owned,
        } = batch;
        self.flusher.give_back(&acts, writes, &not_owned);
        // Still flagged as listed, so a turn would not list them again.
        self.flusher.dirty.lock().extend(self.rest.by_ref());
        self.flusher.held.lock().extend(held);
    }
}
