//! The seam to other daemons: the trait the binary implements over its
//! transport to carry a call to the daemon that owns the actor. Routing
//! (`routing`) decides when to use it.

use crate::error::CallError;
use crate::types::{BoxFuture, Call, Payload};

/// Carries calls to the daemon that owns their actor. The binary implements
/// it over `crates/transport`; the runtime only knows the owner's address.
pub trait Forwarder: Send + Sync + std::fmt::Debug + 'static {
    /// Runs `call` on the daemon at `address` and returns its answer. `hops`
    /// counts this forward (1 for the first).
    fn invoke(&self, address: &str, call: Call, hops: u32)
        -> BoxFuture<Result<Payload, CallError>>;

    /// Delivers a one-way call to the daemon at `address`.
    fn tell(&self, address: &str, call: Call, hops: u32) -> BoxFuture<Result<(), CallError>>;
}
