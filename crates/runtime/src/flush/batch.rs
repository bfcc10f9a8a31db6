//! One flush's batch: the dirty actors' changes taken under their locks,
//! with the owner epoch each is written under.

use std::sync::Arc;

use troupe_placement::{OwnerEpoch, Placement};
use troupe_storage::ActorWrite;

use super::HeldReply;
use crate::activation::{Activation, Inner, Status};

/// The writes of one flush, with the activations they came from (same
/// order) and the replies waiting for them.
pub(super) struct Batch {
    pub(super) writes: Vec<ActorWrite>,
    pub(super) acts: Vec<Arc<Activation>>,
    pub(super) held: Vec<HeldReply>,
    /// Dirty actors this daemon no longer owns under its table: not
    /// written, refused at once.
    pub(super) not_owned: Vec<Arc<Activation>>,
}

impl Batch {
    pub(super) fn with_capacity(actors: usize, held: Vec<HeldReply>) -> Self {
        Self {
            writes: Vec::with_capacity(actors),
            acts: Vec::with_capacity(actors),
            held,
            not_owned: Vec::new(),
        }
    }

    /// Takes `act`'s dirty keys (and their values now) into the batch,
    /// with the owner epoch this daemon holds the actor under now.
    pub(super) fn take(
        &mut self,
        act: &Arc<Activation>,
        inner: &mut Inner,
        placement: &dyn Placement,
    ) {
        // Gone: dropped without writing (fenced); its state may be stale.
        if inner.status == Status::Gone {
            inner.drop_changes();
            return;
        }
        let Some(dirty) = inner.dirty.take() else {
            return;
        };
        if dirty.is_empty() {
            return;
        }
        // Read with the keys, under the activation's lock: a fence cannot
        // come in between, so the epoch is one this state was current under.
        let epoch = match placement.epoch(&act.id.ty, &act.id.id) {
            OwnerEpoch::Unfenced => None,
            OwnerEpoch::Owned(epoch) => Some(epoch),
            OwnerEpoch::NotOwned => {
                self.not_owned.push(act.clone());
                return;
            }
        };
        let crate::activation::Dirty {
            keys,
            inbox,
            records,
        } = *dirty;
        let changes = keys
            .into_iter()
            .map(|key| {
                let value = inner.state.get(&key).cloned();
                (key, value)
            })
            .collect();
        self.writes.push(ActorWrite {
            actor_type: act.id.ty.to_string(),
            actor_id: act.id.id.to_string(),
            epoch,
            changes,
            inbox,
            records,
        });
        self.acts.push(act.clone());
    }
}
