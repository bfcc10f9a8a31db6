//! The store's side of purging an actor (`lifecycle::purge`): done under
//! the write lock, so no batch holding the actor's older changes is in
//! flight while the store removes its records, or lands after.

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
        let _guard = self.write_lock.lock().await;
        if let Some(act) = act {
            // Changes made before the purge began are written first: their
            // callers may hold replies that wait for them, which then say
            // they were stored, as they were, before the purge.
            self.write_actor_locked(act).await?;
            forget(&mut act.inner.lock());
        }
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
