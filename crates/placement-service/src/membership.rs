//! The rule that makes the Raft membership follow the leader's `--peers`,
//! as a pure function: what the leader sees → the one change to make next.
//! `reconcile` probes the replicas and applies the step.
//!
//! The rule, and why it is safe:
//!
//! - **Only the leader acts, toward its own list, one change at a time.**
//!   Voter changes go through openraft's joint consensus (a majority of the
//!   old voters and of the new ones must accept), and a step is proposed only
//!   when a majority of both is reachable, so it commits instead of hanging.
//! - **A running replica is never removed; a stopped one is never added.**
//!   A replica the leader's list lacks is removed only after it has not
//!   answered for a grace period; a listed replica is added (as a learner,
//!   promoted once caught up) only while it answers. So during a rolling
//!   update, a leader still holding the old list cannot undo what a leader
//!   with the new list did: growing adds replicas that run, which an old-list
//!   leader leaves alone; shrinking removes replicas that were stopped, which
//!   an old-list leader cannot add back. The price: a replica dropped from
//!   the list is only removed once it is stopped, and a newly added replica
//!   that goes down for longer than the grace while an old-list replica leads
//!   is removed until a new-list replica leads again.
//! - **Removing only unreachable voters never costs availability:** the
//!   reachable voters are the same before and after, and the new voter set is
//!   smaller, so if they were a majority of the old set they are one of the
//!   new set too.
//! - The leader never removes itself: a voter is removed only once it is
//!   `gone`, and the leader always answers itself. With `--peers` it is in
//!   its own list (the config is refused otherwise); a `--peers-file` may
//!   drop it while it leads (it is being scaled away), and it goes on
//!   leading, removing only stopped voters, until it is stopped itself.

use std::collections::{BTreeMap, BTreeSet};

/// Learners this many log entries or fewer behind the leader are caught up
/// enough to vote: a few writes in flight should not stall a promotion.
pub const CATCH_UP_LAG: u64 = 16;

/// What the leader knows about the group when it decides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// The voter sets: one, or two while a joint config is in effect
    /// (old, new).
    pub configs: Vec<BTreeSet<u64>>,
    /// Members that do not vote (yet).
    pub learners: BTreeSet<u64>,
    /// Replicas that answered the leader's latest probe (the leader itself
    /// included).
    pub reachable: BTreeSet<u64>,
    /// Replicas that have not answered for longer than the removal grace.
    pub gone: BTreeSet<u64>,
    /// Last log index known replicated to each follower and learner.
    pub matched: BTreeMap<u64, u64>,
    /// The leader's last log index.
    pub last_index: u64,
}

/// The next membership change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A joint config is in effect (a leader stopped between openraft's two
    /// steps): propose its new half as the uniform config.
    FinishJoint { voters: BTreeSet<u64> },
    /// Start replicating to a listed replica that is not a member.
    AddLearner { id: u64, addr: String },
    /// Make caught-up learners voters: `voters` is the new voter set.
    Promote {
        voters: BTreeSet<u64>,
        added: BTreeSet<u64>,
    },
    /// Drop unlisted voters that are gone: `voters` is the new voter set.
    RemoveVoters {
        voters: BTreeSet<u64>,
        removed: BTreeSet<u64>,
    },
    /// Drop unlisted learners that are gone.
    RemoveLearners { ids: BTreeSet<u64> },
}

impl Observed {
    fn voters(&self) -> BTreeSet<u64> {
        self.configs.last().cloned().unwrap_or_default()
    }

    fn is_member(&self, id: u64) -> bool {
        self.learners.contains(&id) || self.configs.iter().any(|c| c.contains(&id))
    }

    /// Whether a majority of `voters` answers: a change needing them
    /// commits.
    fn majority_reachable(&self, voters: &BTreeSet<u64>) -> bool {
        let up = voters.intersection(&self.reachable).count();
        up * 2 > voters.len()
    }

    fn caught_up(&self, id: u64) -> bool {
        self.matched
            .get(&id)
            .is_some_and(|m| m.saturating_add(CATCH_UP_LAG) >= self.last_index)
    }
}

/// The change that moves the membership toward `desired` (the leader's
/// `--peers`), or `None` when there is nothing to do or nothing safe to do.
pub fn next_step(desired: &BTreeMap<u64, String>, seen: &Observed) -> Option<Step> {
    if seen.configs.len() > 1 {
        let voters = seen.voters();
        let every_half = seen.configs.iter().all(|c| seen.majority_reachable(c));
        return every_half.then_some(Step::FinishJoint { voters });
    }
    let voters = seen.voters();
    if !seen.majority_reachable(&voters) {
        // Nothing would commit; wait for the group to be healthy.
        return None;
    }

    let stale_learners: BTreeSet<u64> = seen
        .learners
        .iter()
        .filter(|id| !desired.contains_key(id) && seen.gone.contains(id))
        .copied()
        .collect();
    if !stale_learners.is_empty() {
        return Some(Step::RemoveLearners {
            ids: stale_learners,
        });
    }

    // Grow before shrinking: replacing a replica never goes through a
    // smaller group than either end.
    let to_add = desired
        .iter()
        .find(|(id, _)| !seen.is_member(**id) && seen.reachable.contains(id));
    if let Some((id, addr)) = to_add {
        return Some(Step::AddLearner {
            id: *id,
            addr: addr.clone(),
        });
    }

    let added: BTreeSet<u64> = seen
        .learners
        .iter()
        .filter(|id| {
            desired.contains_key(id) && seen.reachable.contains(id) && seen.caught_up(**id)
        })
        .copied()
        .collect();
    if !added.is_empty() {
        let next: BTreeSet<u64> = voters.union(&added).copied().collect();
        if seen.majority_reachable(&next) {
            return Some(Step::Promote {
                voters: next,
                added,
            });
        }
    }

    let removed: BTreeSet<u64> = voters
        .iter()
        .filter(|id| !desired.contains_key(id) && seen.gone.contains(id))
        .copied()
        .collect();
    if !removed.is_empty() {
        let next: BTreeSet<u64> = voters.difference(&removed).copied().collect();
        if !next.is_empty() && seen.majority_reachable(&next) {
            return Some(Step::RemoveVoters {
                voters: next,
                removed,
            });
        }
    }
    None
}

#[cfg(test)]
#[path = "membership_tests.rs"]
mod tests;
