//! The actors held unloaded while an operator changes what is stored for
//! them (`lifecycle::purge`, `lifecycle::edit_state`): the workers, the
//! inbox scan and durable tells' sequencing ask it before they activate an
//! actor or store a tell for it. A leaf, so `Shared` can hold it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::types::ActorId;

/// The actors being purged or edited, whose activations wait.
#[derive(Debug, Default)]
pub(crate) struct Holds {
    /// How many holds there are: zero spares the activation path the lock.
    running: AtomicUsize,
    actors: Mutex<HashSet<ActorId>>,
}

impl Holds {
    /// Whether `actor` is held: its activation must not start.
    pub(crate) fn contains(&self, actor: &ActorId) -> bool {
        self.running.load(Ordering::Acquire) != 0 && self.actors.lock().contains(actor)
    }

    pub(crate) fn begin(&self, actor: &ActorId) -> bool {
        let mut actors = self.actors.lock();
        if !actors.insert(actor.clone()) {
            return false;
        }
        self.running.fetch_add(1, Ordering::AcqRel);
        true
    }

    pub(crate) fn end(&self, actor: &ActorId) {
        let mut actors = self.actors.lock();
        if actors.remove(actor) {
            self.running.fetch_sub(1, Ordering::AcqRel);
        }
    }
}
