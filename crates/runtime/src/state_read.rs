//! Reading an actor's state without a turn, for callers (`GetState`) and
//! operators (`troupe state get`): from its activation when that holds it
//! loaded, else from the store, where the actor lives; the daemon's expiry
//! keys and expired keys left out (the `expiry` module).

use bytes::Bytes;
use troupe_storage::StoredState;

use crate::activation::Status;
use crate::error::{CallError, Unavailable};
use crate::expiry;
use crate::forwarding::{ActorRequest, ActorResponse, RequestContext};
use crate::runtime::Runtime;
use crate::shared::Shared;
use crate::types::ActorId;
use crate::validate;

/// A state read: the entries (sorted by key), whether the actor is active,
/// and when those of them that expire do.
type StateRead = (Vec<(String, Bytes)>, bool, Box<[(String, u64)]>);

impl Runtime {
    /// Reads state without a turn, where the actor lives; also says whether
    /// it is active.
    pub async fn get_state(
        &self,
        actor: &ActorId,
        keys: &[String],
    ) -> Result<(Vec<(String, Bytes)>, bool), CallError> {
        let request = ActorRequest::GetState {
            actor: actor.clone(),
            keys: keys.to_vec(),
        };
        match self.request(request, RequestContext::default()).await? {
            ActorResponse::State {
                entries, active, ..
            } => Ok((entries, active)),
            other => Err(other.unexpected("state")),
        }
    }
}

impl Shared {
    /// Reads state without a turn: from the activation when it has loaded
    /// state, otherwise from the store. Also says whether it is active.
    pub(crate) async fn get_state_here(
        &self,
        actor: &ActorId,
        keys: &[String],
    ) -> Result<StateRead, CallError> {
        validate::name("actor type", &actor.ty)?;
        validate::name("actor id", &actor.id)?;
        for key in keys {
            validate::name("state key", key)?;
        }
        let wanted = |k: &str| keys.is_empty() || keys.iter().any(|w| w == k);
        let (state, active): (Vec<(String, Bytes)>, bool) = match self.loaded_state(actor) {
            Some(loaded) => loaded,
            None => (self.stored_state(actor).await?.into_iter().collect(), false),
        };
        let mut entries = Vec::new();
        let mut expires = Vec::new();
        for (key, value, at) in expiry::visible(state, self.time.now_ms()) {
            if wanted(&key) {
                if let Some(at) = at {
                    expires.push((key.clone(), at));
                }
                entries.push((key, value));
            }
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        Ok((entries, active, expires.into_boxed_slice()))
    }

    /// The state an activation of `actor` holds, and whether it is active;
    /// `None` when none holds it loaded.
    fn loaded_state(&self, actor: &ActorId) -> Option<(Vec<(String, Bytes)>, bool)> {
        let act = self.directory.get(actor)?;
        let inner = act.inner.lock();
        inner.state_loaded().then(|| {
            let entries = inner
                .state
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            (entries, inner.status != Status::Unloaded)
        })
    }

    /// What the store holds for `actor`.
    pub(crate) async fn stored_state(&self, actor: &ActorId) -> Result<StoredState, CallError> {
        self.flusher
            .store()
            .load(&actor.ty, &actor.id)
            .await
            .map_err(|e| Unavailable::store(format!("cannot read the state of {actor}"), e).into())
    }
}
