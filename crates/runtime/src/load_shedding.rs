//! The runtime's side of load shedding for memory (`memory_gate` decides):
//! which requests are new work and are refused while shedding, and giving
//! memory back when the gate asks.

use tracing::info;

use crate::error::CallError;
use crate::forwarding::ActorRequest;
use crate::memory_gate::MemoryTransition;
use crate::runtime::Runtime;
use crate::types::{Call, TurnKind};

/// Actors called within this long are left active when memory is given
/// back. Measured with keyed calls on sled in a 256 MiB cgroup
/// (`LIMIT_MB=256 bench/keyed_memory.sh`): deactivating actors called every
/// 150 ms brought them straight back, each reading its call records again,
/// and resident memory peaked within 1 MiB of the limit.
const COLD_AFTER_MS: u32 = 1_000;

/// Whether `call` is new work: from outside any turn, and a call (not a
/// firing). Calls carrying a chain belong to a running turn.
fn is_new_work(call: &Call) -> bool {
    call.kind == TurnKind::Call && call.extra.as_deref().is_none_or(|e| e.chain.is_none())
}

impl Runtime {
    /// Hands the gate a reading of the daemon's resident memory (the binary
    /// reads it a few times a second); says when shedding begins or ends.
    pub fn observe_memory(&self, resident_bytes: u64) -> Option<MemoryTransition> {
        let shared = &self.shared;
        let observed = shared
            .memory_gate
            .observe(resident_bytes, shared.clock.now_ms());
        if let Some(share) = observed.give_back {
            let deactivated = shared.give_back_activations(share, COLD_AFTER_MS);
            let keys_shed = shared.records.give_back_half();
            info!(
                resident_bytes,
                deactivated,
                keys_shed,
                "memory near the limit: deactivating the actors idle longest and shedding key memory"
            );
        }
        observed.transition
    }

    /// Refuses `call` while load is shed, unless it is work already under
    /// way.
    pub(crate) fn admit_while_shedding(&self, call: &Call) -> Result<(), CallError> {
        if is_new_work(call) {
            self.shared.memory_gate.admit().inspect_err(|e| {
                self.shared.count_failed(&call.actor.ty, call.kind, e);
            })?;
        }
        Ok(())
    }

    /// Refuses a reminder, alarm or timer setting while load is shed; any
    /// other request that is not a call passes.
    pub(crate) fn admit_setting(&self, request: &ActorRequest) -> Result<(), CallError> {
        match request {
            ActorRequest::SetReminder(_)
            | ActorRequest::SetAlarm(_)
            | ActorRequest::SetTimer(_) => self.shared.memory_gate.admit(),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_calls_from_outside_a_turn_are_new_work() {
        use crate::types::{ActorId, CallChain, CallExtra};
        let call = || Call::new(ActorId::new("t", "a"), "m", Default::default());
        assert!(is_new_work(&call()));
        let firing = Call {
            kind: TurnKind::Reminder,
            ..call()
        };
        assert!(!is_new_work(&firing));
        let nested = Call {
            extra: Some(Box::new(CallExtra {
                chain: Some(CallChain::default()),
                ..Default::default()
            })),
            ..call()
        };
        assert!(!is_new_work(&nested));
    }
}
