//! Holding one actor unloaded while an operator changes what is stored for
//! it (`purge`, `edit_state`): only its owner may, its hold is taken (calls
//! and durable tells that arrive wait), and its activation ends as an
//! admin's deactivation does, so nothing the app holds in memory outlives
//! the change. Dropping the [`HeldActor`] lets the calls that waited
//! activate it again, on what the store then holds.

use std::sync::Arc;

use troupe_placement::OwnerEpoch;
use troupe_storage::Epoch;

use crate::error::{CallError, Unavailable};
use crate::routing::Route;
use crate::runtime::Runtime;
use crate::shared::Shared;
use crate::types::ActorId;

/// An actor held unloaded; dropping it (however the operation ends, a
/// cancelled request included) releases the hold.
pub(crate) struct HeldActor {
    shared: Arc<Shared>,
    actor: ActorId,
    /// The epoch the store fences this daemon's writes of the actor with
    /// (`None`: a single daemon, unfenced).
    pub(crate) epoch: Option<Epoch>,
    /// Whether the actor was active here (its app saw a deactivation).
    pub(crate) was_active: bool,
}

impl Drop for HeldActor {
    fn drop(&mut self) {
        self.shared.holds.end(&self.actor);
        if let Some(act) = self.shared.directory.get(&self.actor) {
            let wake = act.inner.lock().claim_wake();
            if wake {
                self.shared.schedule(act);
            }
        }
    }
}

impl Runtime {
    /// Takes the hold of `actor`, which this daemon must own, and ends its
    /// activation. `doing` names the operation in the errors ("purged",
    /// "edited").
    pub(crate) async fn hold_owned_actor(
        &self,
        actor: &ActorId,
        doing: &str,
    ) -> Result<HeldActor, CallError> {
        let shared = &self.shared;
        let epoch = match shared.route(actor)? {
            Route::Local => match shared.placement.epoch(&actor.ty, &actor.id) {
                OwnerEpoch::Unfenced => None,
                OwnerEpoch::Owned(epoch) => Some(epoch),
                OwnerEpoch::NotOwned => {
                    return Err(Unavailable::Moving {
                        actor: actor.clone(),
                    }
                    .into())
                }
            },
            Route::Remote(peer) => {
                return Err(Unavailable::NotOwner {
                    actor: actor.clone(),
                    node: peer.node,
                    address: peer.address,
                }
                .into())
            }
            Route::Wait => {
                return Err(Unavailable::Moving {
                    actor: actor.clone(),
                }
                .into())
            }
        };
        if !shared.holds.begin(actor) {
            return Err(CallError::FailedPrecondition(format!(
                "actor {actor} is being purged or its state edited already; wait for that to \
                 finish, then retry"
            )));
        }
        let mut held = HeldActor {
            shared: shared.clone(),
            actor: actor.clone(),
            epoch,
            was_active: false,
        };
        held.was_active = shared
            .end_activation(actor, &format!("it was not {doing}; retry"))
            .await?;
        Ok(held)
    }
}
