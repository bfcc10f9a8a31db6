//! The store's side of purging an actor (`lifecycle::purge`): its last
//! changes written and forgotten under the write lock, so that no batch
//! holding them is in flight while the store removes its records, or lands
//! after; the removal itself outside it.

use std::sync::Arc;

use troupe_storage::{Epoch, PurgedActor, StoreError};

use super::Flusher;
use crate::activation::{Activation, Inner};
use crate::error::{CallError, Unavailable};
use crate::types::ActorId;

impl Flusher {
    /// Writes what `act` (the actor's activation, if one is left) has not
    /// written yet, lets `forget` drop what it holds of the store under its
    /// lock, then has the store remove the actor's records.
    pub(crate) async fn purge_actor(
        &self,
        actor: &ActorId,
        act: Option<&Arc<Activation>>,
        epoch: Option<Epoch>,
        forget: impl FnOnce(&mut Inner),
    ) -> Result<PurgedActor, CallError> {
        {
            let _guard = self.write_lock.lock().await;
            if let Some(act) = act {
                // Changes made before the purge began are written first:
                // their callers may hold replies that wait for them, which
                // then say they were stored, as they were, before the purge.
                self.write_actor_locked(act).await?;
                forget(&mut act.inner.lock());
            }
        }
        // Not under the lock, so the other actors' flushes (and the durable
        // replies waiting for them) go on while the store removes a large
        // actor: taking the lock waited out every batch in flight that could
        // hold this actor's changes, and none taken from now on can (its
        // activation forgot them, and the gate keeps it unloaded).
        match self.store.purge_actor(&actor.ty, &actor.id, epoch).await {
            Ok(purged) => Ok(purged),
            Err(StoreError::Fenced { .. }) => Err(Unavailable::Fenced {
                actor: actor.clone(),
            }
            .into()),
            Err(e) => Err(Unavailable::store(
                format!("cannot purge the stored records of {actor}"),
                e,
            )
            .into()),
        }
    }
}
