//! Call chains: who waits on whom. A call made from inside a turn carries
//! its chain; a call back into an actor already on it either nests in that
//! actor's waiting turn (re-entrant types) or is refused at once as a
//! deadlock, and a chain past the depth limit is refused as runaway
//! recursion. A chain is honoured only when this daemon issued it to a
//! turn still running, or a peer forwarded it (`chain_token`).

use tracing::debug;

use crate::error::CallError;
use crate::shared::Shared;
use crate::types::{ActorId, Call, CallChain};

/// `a → b → c`, for error messages; a long chain shows its ends.
fn chain_path(actors: &[ActorId]) -> String {
    const ENDS: usize = 3;
    let join = |part: &[ActorId]| {
        part.iter()
            .map(|a| crate::error::shortened(&a.to_string(), 80).into_owned())
            .collect::<Vec<_>>()
            .join(" → ")
    };
    if actors.len() <= 2 * ENDS {
        return join(actors);
    }
    let (head, rest) = actors.split_at(ENDS);
    format!(
        "{} → … {} more → {}",
        join(head),
        actors.len() - 2 * ENDS,
        join(&rest[rest.len() - ENDS..])
    )
}

impl Shared {
    /// Refuses a call entering the daemon with a chain it did not issue to
    /// a running turn. Such a chain could make the call nest in (run
    /// beside) the running turn of any re-entrant actor it names, so it is
    /// refused, never dropped: the caller learns at once that its chain is
    /// wrong (docs/security.md).
    pub(crate) fn admit_chain(&self, call: &Call) -> Result<(), CallError> {
        let Some(extra) = call.extra.as_deref() else {
            return Ok(());
        };
        let Some(chain) = &extra.chain else {
            return Ok(());
        };
        if extra.chain_from_peer {
            return Ok(());
        }
        self.chain_tokens
            .check(chain, self.config.max_chain_depth)
            .map_err(|refused| {
                debug!(
                    actor = %call.actor,
                    chain = %chain.id,
                    reason = refused.reason(),
                    "call chain refused"
                );
                let error = CallError::from(refused);
                self.count_failed(&call.actor.ty, call.kind, &error);
                error
            })
    }

    /// Checks a call made from inside a turn against its chain: refuses
    /// runaway depth, and a cycle into a type that is not re-entrant (the
    /// actor already waits on this very chain, so the call could only ever
    /// time out). Returns whether the call re-enters a re-entrant actor.
    pub(crate) fn check_chain(
        &self,
        target: &ActorId,
        chain: &CallChain,
    ) -> Result<bool, CallError> {
        let limit = self.config.max_chain_depth;
        if chain.actors.len() >= limit {
            return Err(CallError::FailedPrecondition(format!(
                "call chain {} is {} calls deep, the limit ({limit}); calling {target} from it \
                 looks like runaway recursion: {} → {target}. Stop the recursion earlier",
                crate::error::shortened(&chain.id, 64),
                chain.actors.len(),
                chain_path(&chain.actors[chain.actors.len().saturating_sub(4)..]),
            )));
        }
        let Some(first) = chain.actors.iter().position(|a| a == target) else {
            return Ok(false);
        };
        if self
            .hosts
            .options(&target.ty)
            .is_some_and(|options| options.reentrant)
        {
            return Ok(true);
        }
        Err(CallError::FailedPrecondition(format!(
            "deadlock: {} → {target} — {target} is waiting on this call chain already, so the call \
             would wait forever. Register actor type '{}' as reentrant to let a chain call back \
             into it, or break the cycle",
            chain_path(&chain.actors[first..]),
            target.ty,
        )))
    }
}
