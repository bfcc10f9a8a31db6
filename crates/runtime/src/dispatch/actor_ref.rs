//! [`ActorRef`]: a handle to one actor for in-process callers.

use std::sync::{Arc, OnceLock};

use tokio::sync::oneshot;

use crate::activation::Activation;
use crate::error::CallError;
use crate::reply::{wait_reply, Reply};
use crate::runtime::Runtime;
use crate::shared::Shared;
use crate::types::{ActorId, Payload, TurnKind};

/// A handle to one actor for in-process callers (hosts, tests, benchmarks).
///
/// It remembers the actor's activation, so repeated calls skip the directory
/// lookup; when the actor was deactivated meanwhile, the next call looks it
/// up again. Everything after the lookup (mailbox, turn order, host, state)
/// is the same path as [`Runtime::invoke`] and [`Runtime::tell`].
#[derive(Debug)]
pub struct ActorRef {
    shared: Arc<Shared>,
    id: ActorId,
    /// Read with a plain load on every call, so no lock: set on first use
    /// and kept; once that activation ends, calls resolve by id.
    activation: OnceLock<Arc<Activation>>,
}

impl Runtime {
    /// A handle to `id`; checks the names once, here.
    pub fn actor_ref(&self, id: ActorId) -> Result<ActorRef, CallError> {
        self.shared.check_target(&id)?;
        Ok(ActorRef {
            shared: self.shared.clone(),
            id,
            activation: OnceLock::new(),
        })
    }
}

impl ActorRef {
    pub fn id(&self) -> &ActorId {
        &self.id
    }

    /// Queues a call whose result nobody waits for.
    pub fn tell(&self, method: Arc<str>, payload: Payload) -> Result<(), CallError> {
        let envelope = self
            .shared
            .envelope(TurnKind::Call, method, payload, None, Reply::None)?;
        self.shared
            .deliver(&self.id, Some(&self.activation), envelope)
    }

    /// Calls a method and waits for its result (at most the call timeout).
    pub async fn invoke(&self, method: Arc<str>, payload: Payload) -> Result<Payload, CallError> {
        let (tx, rx) = oneshot::channel();
        let envelope =
            self.shared
                .envelope(TurnKind::Call, method, payload, None, Reply::To(tx))?;
        self.shared
            .deliver(&self.id, Some(&self.activation), envelope)?;
        wait_reply(&self.id, self.shared.config.call_timeout, rx).await
    }
}
