//! Erasing the expired keys of an actor that went idle holding keys that
//! expire (`crate::expiry`): its `$expire` reminder fires when the first
//! does, and the keys due then leave the store in one fenced write, while
//! the actor is held unloaded (`held_actor`), so no activation loads the
//! state between the read and the write, or writes over it after.
//!
//! An active actor is let be: its turns forget its keys as they expire.
//! Its reminder comes back at the first key's time, or, when that passed
//! with no turn to forget it, once the actor may have gone idle (its end
//! also notes the reminder anew).

use std::sync::Arc;

use tracing::info;

use crate::error::CallError;
use crate::expiry::{due, earliest, expire_spec};
use crate::runtime::Runtime;
use crate::schedule::{Due, Fired};
use crate::shared::Shared;
use crate::types::{ActorId, StateSnapshot};

/// What an erasure came to.
enum Erased {
    /// Nothing (more) expires: the firing's one-shot record may go.
    Done,
    /// Its reminder was set again, for the next key to expire.
    Rescheduled,
}

impl Shared {
    /// An `$expire` firing: erases what expired of `firing`'s actor unless
    /// it is active.
    pub(crate) async fn fire_expiry(self: &Arc<Self>, firing: &Due) -> Fired {
        if self.is_active(&firing.actor) {
            let Some(next) = self.expiry_recheck(&firing.actor) else {
                return Fired::Ran;
            };
            return match self.scheduler.set(expire_spec(&firing.actor, next)).await {
                Ok(_) => Fired::Superseded,
                Err(e) => Fired::after_error(firing, e),
            };
        }
        let runtime = Runtime {
            shared: self.clone(),
        };
        match runtime.erase_expired_keys(&firing.actor).await {
            Ok(Erased::Done) => Fired::Ran,
            Ok(Erased::Rescheduled) => Fired::Superseded,
            Err(e) => Fired::after_error(firing, e),
        }
    }
}

impl Runtime {
    async fn erase_expired_keys(&self, actor: &ActorId) -> Result<Erased, CallError> {
        let held = self
            .hold_owned_actor(actor, "cleared of its expired state keys")
            .await?;
        if held.was_active {
            // A call activated it meanwhile; its end noted the reminder again.
            return Ok(Erased::Done);
        }
        let shared = &self.shared;
        let left = shared.directory.get(actor);
        shared
            .flusher
            .settle_held(left.as_ref(), |inner| inner.forget_state())
            .await?;
        let mut state: StateSnapshot = shared.stored_state(actor).await?.into_iter().collect();
        let now_ms = shared.time.now_ms();
        if let Some(expired) = due(&state, now_ms) {
            let read = state.clone();
            shared
                .flusher
                .write_edit(actor, held.epoch, read, &expired.changes, &[], now_ms)
                .await?;
            state.apply(&expired.changes);
            info!(
                actor = %actor,
                keys = expired.keys.len(),
                "erased expired state keys of an idle actor"
            );
        }
        let Some(next) = earliest(&state) else {
            return Ok(Erased::Done);
        };
        shared.scheduler.set(expire_spec(actor, next)).await?;
        Ok(Erased::Rescheduled)
    }
}
