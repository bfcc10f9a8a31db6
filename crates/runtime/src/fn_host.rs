//! An in-process host: actor logic as a Rust function, no app, no sockets.
//! Used by tests and benchmarks to drive the real dispatch path.

use crate::host::{
    ActivateDone, ActivateRequest, ActorHost, DeactivateDone, DeactivateRequest, TurnDone,
    TurnOutcome, TurnRequest,
};
use crate::types::ActorId;

/// Runs every turn with `handler(actor, request)`, synchronously on the
/// worker. The handler reads state from the request and returns its changes.
pub struct FnHost<F> {
    name: String,
    handler: F,
}

impl<F> FnHost<F>
where
    F: Fn(&ActorId, TurnRequest) -> TurnOutcome + Send + Sync + 'static,
{
    pub fn new(name: impl Into<String>, handler: F) -> Self {
        Self {
            name: name.into(),
            handler,
        }
    }
}

impl<F> std::fmt::Debug for FnHost<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnHost").field("name", &self.name).finish()
    }
}

impl<F> ActorHost for FnHost<F>
where
    F: Fn(&ActorId, TurnRequest) -> TurnOutcome + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn activate(&self, _request: ActivateRequest, done: ActivateDone) {
        done.finish(Ok(Vec::new()));
    }

    fn turn(&self, request: TurnRequest, done: TurnDone) {
        let outcome = (self.handler)(done.actor(), request);
        done.finish(outcome);
    }

    fn deactivate(&self, _request: DeactivateRequest, done: DeactivateDone) {
        done.finish(Vec::new());
    }
}
