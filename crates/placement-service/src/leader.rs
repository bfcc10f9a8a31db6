//! The leader's soft state: when it last heard from each member and which
//! `next` version each has drained for, kept outside the Raft log, and the
//! rule (`decide`) a tick turns it into `Remove` and `Promote` commands
//! with. A new leader starts every member's clock at its own start, which
//! can only delay a removal, and learns drain reports from the next
//! heartbeats (daemons resend them every time).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::state::{ClusterState, Command};

/// The leader's knowledge that is not in the log.
#[derive(Debug)]
pub(crate) struct Soft {
    /// The term this soft state belongs to; another term starts afresh.
    pub(crate) term: Option<u64>,
    /// When this replica became leader: every member's clock starts here.
    pub(crate) since: Instant,
    pub(crate) last_heard: HashMap<String, Instant>,
    pub(crate) drained: HashMap<String, u64>,
}

impl Soft {
    pub(crate) fn clock(&self, node: &str) -> Instant {
        self.last_heard
            .get(node)
            .copied()
            .map_or(self.since, |t| t.max(self.since))
    }

    pub(crate) fn heard(&mut self, node: &str, at: Instant) {
        let e = self.last_heard.entry(node.to_owned()).or_insert(at);
        *e = (*e).max(at);
    }
}

/// The leader's rule: remove members silent for longer than `lease`
/// (their drain reports are then not needed); otherwise promote `next`
/// once every member it waits for reported draining for it.
pub(crate) fn decide(
    state: &ClusterState,
    soft: &mut Soft,
    now: Instant,
    lease: Duration,
) -> Option<Command> {
    // Forget nodes that are no longer members (removed, or left) — but not
    // one heard from within the lease: a join records its clock before its
    // write commits, and forgetting it here would start its clock at this
    // leader's start instead, removing a member that just joined.
    soft.last_heard.retain(|n, at| {
        state.members.contains_key(n) || now.saturating_duration_since(*at) <= lease
    });
    soft.drained.retain(|n, _| state.members.contains_key(n));
    let expired: Vec<String> = state
        .members
        .keys()
        .filter(|n| now.saturating_duration_since(soft.clock(n)) > lease)
        .cloned()
        .collect();
    if !expired.is_empty() {
        for n in &expired {
            tracing::info!(node = %n, ?lease, "member's lease lapsed: removing it");
        }
        return Some(Command::Remove { nodes: expired });
    }
    let version = state.next.as_ref()?.version;
    let all_drained = state
        .waiting_for
        .iter()
        .all(|n| soft.drained.get(n).copied().unwrap_or(0) >= version);
    all_drained.then_some(Command::Promote { version })
}

#[cfg(test)]
mod tests {
    use troupe_placement::table::Member;

    use super::*;

    fn member(node: &str) -> Member {
        Member {
            node: node.into(),
            address: "127.0.0.1:1".into(),
            types: vec!["C".into()],
            leaving: false,
        }
    }

    fn soft(since: Instant) -> Soft {
        Soft {
            term: Some(1),
            since,
            last_heard: HashMap::new(),
            drained: HashMap::new(),
        }
    }

    fn cluster(nodes: &[&str]) -> ClusterState {
        let mut s = ClusterState::default();
        for n in nodes {
            s.apply(&Command::Join { member: member(n) });
        }
        s
    }

    const LEASE: Duration = Duration::from_secs(3);

    #[test]
    fn promotes_only_once_everyone_waited_for_drained() {
        let t0 = Instant::now();
        let state = cluster(&["a", "b", "c"]); // current {a}, next {a, b, c}
        let version = state.next.as_ref().map(|n| n.version).unwrap_or_default();
        let mut soft = soft(t0);
        soft.heard("a", t0);
        assert_eq!(decide(&state, &mut soft, t0, LEASE), None);
        soft.drained.insert("a".into(), version - 1);
        assert_eq!(decide(&state, &mut soft, t0, LEASE), None);
        soft.drained.insert("a".into(), version);
        assert_eq!(
            decide(&state, &mut soft, t0, LEASE),
            Some(Command::Promote { version })
        );
    }

    #[test]
    fn removes_members_silent_longer_than_the_lease() {
        let t0 = Instant::now();
        let state = cluster(&["a", "b"]);
        let mut soft = soft(t0);
        soft.heard("a", t0 + Duration::from_secs(2));
        // b's clock starts at the leader's start: not expired at exactly
        // the lease, expired after it.
        assert_eq!(decide(&state, &mut soft, t0 + LEASE, LEASE), None);
        let later = t0 + LEASE + Duration::from_millis(1);
        assert_eq!(
            decide(&state, &mut soft, later, LEASE),
            Some(Command::Remove {
                nodes: vec!["b".into()]
            })
        );
    }

    #[test]
    fn a_new_leader_never_expires_before_its_own_start_plus_lease() {
        let t0 = Instant::now();
        let state = cluster(&["a"]);
        // Heard long ago (under a previous leader's clock)...
        let mut soft = soft(t0 + Duration::from_secs(10));
        soft.heard("a", t0);
        // ...still counts from this leader's start.
        let at = t0 + Duration::from_secs(12);
        assert_eq!(decide(&state, &mut soft, at, LEASE), None);
    }

    #[test]
    fn forgets_soft_state_of_non_members() {
        let t0 = Instant::now();
        let state = cluster(&["a"]);
        let mut soft = soft(t0);
        soft.heard("gone", t0);
        soft.drained.insert("gone".into(), 9);
        // Heard within the lease: maybe a join whose write is not applied
        // yet; its clock must survive until it is.
        decide(&state, &mut soft, t0, LEASE);
        assert!(soft.last_heard.contains_key("gone"));
        assert!(!soft.drained.contains_key("gone"));
        decide(&state, &mut soft, t0 + LEASE * 2, LEASE);
        assert!(!soft.last_heard.contains_key("gone"));
    }

    #[test]
    fn a_join_not_yet_applied_keeps_its_clock() {
        // The leader has led for long; "b" joins now and its write is not
        // applied when the tick runs: it must not start from `since`.
        let t0 = Instant::now();
        let mut soft = soft(t0);
        let joined = t0 + LEASE * 10;
        soft.heard("a", joined);
        soft.heard("b", joined);
        assert_eq!(decide(&cluster(&["a"]), &mut soft, joined, LEASE), None);
        let state = cluster(&["a", "b"]);
        let tick = joined + LEASE / 2;
        assert!(
            !matches!(
                decide(&state, &mut soft, tick, LEASE),
                Some(Command::Remove { .. })
            ),
            "a member that just joined was removed"
        );
    }
}
