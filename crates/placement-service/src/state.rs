//! The replicated state: membership and the placement tables.
//!
//! This module owns the deterministic state machine every replica applies
//! from the Raft log. It never reads clocks or soft state: expiry and drain
//! reports are the leader's business (`service::grpc`), which turns them
//! into `Remove` and `Promote` commands.
//!
//! Changes are serialised: while `next` is in flight, later joins and leaves
//! only update `members`, the desired membership. Whenever no change is in
//! flight and the desired membership differs from `current`, the difference
//! becomes the following `next` (so queued changes are coalesced into one
//! table change, applied in log order).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use troupe_placement::table::{Member, Table, TableVersion};

/// A change to the cluster, as a Raft log entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// A new member, or a member's new address or types.
    Join { member: Member },
    /// A graceful leave: the member is absent from the next table.
    Leave { node: String },
    /// Members whose lease lapsed: nobody waits for their drain reports.
    Remove { nodes: Vec<String> },
    /// `next` (of this version) becomes `current`.
    Promote { version: u64 },
}

/// Membership and tables, identical on every replica at the same log index.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterState {
    /// The desired membership: every live member, leaving ones marked.
    pub members: BTreeMap<String, Member>,
    pub current: TableVersion,
    pub next: Option<TableVersion>,
    /// Members of `current` whose drain report `next` needs (alive ones:
    /// removed members are dropped from it).
    pub waiting_for: BTreeSet<String>,
    /// The highest version ever given to a table; versions never repeat,
    /// even when an in-flight `next` is replaced.
    pub last_version: u64,
}

impl ClusterState {
    /// Applies one command; the result is the table afterwards.
    pub fn apply(&mut self, command: &Command) -> Table {
        match command {
            Command::Join { member } => {
                // Node names are unique per daemon run, so a leaving member
                // never joins again: a Join for it is a heartbeat's types
                // change (its last app detached as it shut down), which must
                // not undo the leave, or the leaver stays in every table and
                // waits out its whole shutdown grace.
                let leaving = self.members.get(&member.node).is_some_and(|m| m.leaving);
                let member = Member {
                    leaving,
                    types: normalised(&member.types),
                    ..member.clone()
                };
                self.members.insert(member.node.clone(), member);
            }
            Command::Leave { node } => {
                let in_tables = self.current.contains(node)
                    || self.next.as_ref().is_some_and(|n| n.contains(node));
                if !in_tables {
                    // Never owned anything: nothing to hand off.
                    self.members.remove(node);
                } else if let Some(m) = self.members.get_mut(node) {
                    m.leaving = true;
                }
            }
            Command::Remove { nodes } => {
                for node in nodes {
                    self.members.remove(node);
                    self.waiting_for.remove(node);
                }
                // A dead member must not become an owner: replace an
                // in-flight next that lists it. The new version needs new
                // drain reports, so nothing promotes on the old ones.
                let listed = self
                    .next
                    .as_ref()
                    .is_some_and(|n| nodes.iter().any(|node| n.contains(node)));
                if listed {
                    self.next = None;
                    // Even when the rest equals `current`: a daemon holding
                    // the cancelled next only accepts a newer version.
                    self.start_change(true);
                }
            }
            Command::Promote { version } => {
                if self.next.as_ref().is_some_and(|n| n.version == *version) {
                    self.promote();
                }
            }
        }
        self.advance();
        self.table()
    }

    /// The table as published (waiting_for without the leader's drain
    /// reports; the leader narrows it).
    pub fn table(&self) -> Table {
        Table {
            current: self.current.clone(),
            next: self.next.clone(),
            waiting_for: self.waiting_for.iter().cloned().collect(),
        }
    }

    fn desired(&self) -> Vec<Member> {
        // BTreeMap order: sorted by node, as the proto promises.
        self.members
            .values()
            .filter(|m| !m.leaving)
            .cloned()
            .collect()
    }

    /// Starts the next change if none is in flight and one is wanted; with
    /// nobody to wait for, it completes at once.
    fn advance(&mut self) {
        if self.next.is_none() {
            self.start_change(false);
        }
        // Ends: each round promotes, and once `current` is the desired
        // membership no change starts.
        while self.next.is_some() && self.waiting_for.is_empty() {
            self.promote();
            self.start_change(false);
        }
    }

    /// Starts a change to the desired membership; unless `force`, only if
    /// it differs from `current`.
    fn start_change(&mut self, force: bool) {
        let desired = self.desired();
        if !force && desired == self.current.members {
            self.waiting_for.clear();
            return;
        }
        self.last_version += 1;
        self.next = Some(TableVersion {
            version: self.last_version,
            members: desired,
        });
        // Only members handing actors off must report; removed ones are not
        // waited for (their lease is over).
        let losing = troupe_placement::ring::members_losing_actors(
            &self.current,
            self.next.as_ref().unwrap_or(&self.current),
        );
        self.waiting_for = self
            .current
            .members
            .iter()
            .filter(|m| self.members.contains_key(&m.node) && losing.contains(&m.node))
            .map(|m| m.node.clone())
            .collect();
    }

    fn promote(&mut self) {
        let Some(next) = self.next.take() else {
            return;
        };
        self.current = next;
        self.waiting_for.clear();
        // Leavers absent from the new current have handed everything off.
        let current = &self.current;
        self.members
            .retain(|node, m| !m.leaving || current.contains(node));
    }
}

fn normalised(types: &[String]) -> Vec<String> {
    let set: BTreeSet<&String> = types.iter().collect();
    set.into_iter().cloned().collect()
}

/// Whether `types` (as a daemon reports them) differ from the member's.
pub fn types_differ(member: &Member, types: &[String]) -> bool {
    member.types != normalised(types)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(node: &str) -> Member {
        Member {
            node: node.into(),
            address: format!("127.0.0.1:{}", node.len()),
            types: vec!["C".into()],
            leaving: false,
        }
    }

    fn join(s: &mut ClusterState, node: &str) -> Table {
        s.apply(&Command::Join {
            member: member(node),
        })
    }

    fn nodes(t: &TableVersion) -> Vec<&str> {
        t.members.iter().map(|m| m.node.as_str()).collect()
    }

    #[test]
    fn first_join_promotes_at_once() {
        let mut s = ClusterState::default();
        let t = join(&mut s, "a");
        assert_eq!(t.current.version, 1);
        assert_eq!(nodes(&t.current), ["a"]);
        assert!(t.next.is_none());
        assert!(t.waiting_for.is_empty());
    }

    #[test]
    fn second_join_waits_for_current_members() {
        let mut s = ClusterState::default();
        join(&mut s, "a");
        let t = join(&mut s, "b");
        assert_eq!(t.current.version, 1);
        let next = t.next.as_ref().unwrap_or_else(|| unreachable!());
        assert_eq!((next.version, nodes(next)), (2, vec!["a", "b"]));
        assert_eq!(t.waiting_for, ["a"]);
        let t = s.apply(&Command::Promote { version: 2 });
        assert_eq!((t.current.version, nodes(&t.current)), (2, vec!["a", "b"]));
        assert!(t.next.is_none());
    }

    #[test]
    fn changes_queue_behind_the_one_in_flight() {
        let mut s = ClusterState::default();
        join(&mut s, "a");
        join(&mut s, "b"); // next v2 = a, b
        join(&mut s, "c"); // queued
        s.apply(&Command::Leave { node: "a".into() }); // queued
        let t = s.table();
        let next = t.next.as_ref().unwrap_or_else(|| unreachable!());
        assert_eq!((next.version, nodes(next)), (2, vec!["a", "b"]));
        // A stale promote changes nothing.
        assert_eq!(s.apply(&Command::Promote { version: 7 }), t);
        let t = s.apply(&Command::Promote { version: 2 });
        assert_eq!(nodes(&t.current), ["a", "b"]);
        let next = t.next.as_ref().unwrap_or_else(|| unreachable!());
        assert_eq!((next.version, nodes(next)), (3, vec!["b", "c"]));
        assert_eq!(t.waiting_for, ["a", "b"]);
        let t = s.apply(&Command::Promote { version: 3 });
        assert_eq!(nodes(&t.current), ["b", "c"]);
        assert!(t.next.is_none());
        // The leaver is gone once it owns nothing.
        assert!(!s.members.contains_key("a"));
    }

    #[test]
    fn rejoin_with_same_details_changes_nothing() {
        let mut s = ClusterState::default();
        join(&mut s, "a");
        let before = s.clone();
        join(&mut s, "a");
        assert_eq!(s, before);
    }

    #[test]
    fn changed_types_make_a_new_table() {
        let mut s = ClusterState::default();
        join(&mut s, "a");
        let mut m = member("a");
        m.types = vec!["D".into(), "C".into(), "D".into()];
        assert!(types_differ(&s.members["a"], &m.types));
        let t = s.apply(&Command::Join { member: m });
        // Hosting one more type takes nothing from anyone: promoted at once.
        assert!(t.next.is_none());
        assert_eq!(t.current.members[0].types, ["C", "D"]);
        assert!(!types_differ(
            &t.current.members[0],
            &["D".into(), "C".into()]
        ));
        // Dropping a type gives its actors away: "a" must hand them off.
        let mut m = member("a");
        m.types = vec!["D".into()];
        let t = s.apply(&Command::Join { member: m });
        let next = t.next.as_ref().unwrap_or_else(|| unreachable!());
        assert_eq!(next.members[0].types, ["D"]);
        assert_eq!(t.waiting_for, ["a"]);
    }

    #[test]
    fn expired_members_are_not_waited_for() {
        let mut s = ClusterState::default();
        join(&mut s, "a");
        join(&mut s, "b");
        s.apply(&Command::Promote { version: 2 });
        join(&mut s, "c"); // next v3 = a, b, c; waiting for a, b
        let t = s.apply(&Command::Remove {
            nodes: vec!["a".into()],
        });
        // "a" was in the in-flight next: it is replaced by one without it.
        let next = t.next.as_ref().unwrap_or_else(|| unreachable!());
        assert_eq!((next.version, nodes(next)), (4, vec!["b", "c"]));
        assert_eq!(t.waiting_for, ["b"]);
        // The old version cannot be promoted any more.
        let t = s.apply(&Command::Promote { version: 3 });
        assert_eq!(t.current.version, 2);
    }

    #[test]
    fn cancelling_a_change_still_moves_versions_forward() {
        let mut s = ClusterState::default();
        join(&mut s, "a");
        join(&mut s, "b");
        s.apply(&Command::Promote { version: 2 });
        let t = join(&mut s, "c"); // next v3 = a, b, c
        let held = t.versions();
        let t = s.apply(&Command::Remove {
            nodes: vec!["c".into()],
        });
        // The change is replaced by one to the same members as current,
        // with a newer version, so daemons holding v3 accept it; nobody
        // loses actors in it, so it is promoted at once.
        assert!(t.versions() > held, "{:?} !> {held:?}", t.versions());
        assert!(t.next.is_none());
        assert!(t.current.version > 3);
        assert_eq!(nodes(&t.current), ["a", "b"]);
    }

    #[test]
    fn removing_everyone_in_current_promotes_at_once() {
        let mut s = ClusterState::default();
        join(&mut s, "a");
        join(&mut s, "b"); // next v2 waits for a
        let t = s.apply(&Command::Remove {
            nodes: vec!["a".into()],
        });
        // Nobody left to wait for: b's table is current.
        assert_eq!(nodes(&t.current), ["b"]);
        assert!(t.next.is_none());
        let t = s.apply(&Command::Remove {
            nodes: vec!["b".into()],
        });
        assert!(t.current.members.is_empty());
        assert!(t.next.is_none());
    }

    #[test]
    fn removing_the_only_member_handing_off_completes_the_change() {
        let mut s = ClusterState::default();
        join(&mut s, "a");
        join(&mut s, "b");
        s.apply(&Command::Promote { version: 2 });
        let t = s.apply(&Command::Leave { node: "a".into() }); // next v3 = b
                                                               // Only the leaver hands actors off; b just gains them.
        assert_eq!(t.waiting_for, ["a"]);
        let t = s.apply(&Command::Remove {
            nodes: vec!["a".into()],
        });
        // Its lease is over: nobody left to wait for.
        assert_eq!(t.current.version, 3);
        assert!(t.next.is_none());
    }

    #[test]
    fn a_types_change_after_a_leave_does_not_undo_it() {
        let mut s = ClusterState::default();
        join(&mut s, "a");
        join(&mut s, "b");
        s.apply(&Command::Promote { version: 2 });
        let t = s.apply(&Command::Leave { node: "a".into() }); // next v3 = b
        let leaving_version = t.next.as_ref().map(|n| n.version);
        // a's heartbeat, sent before its leave landed, reports its app gone.
        let t = s.apply(&Command::Join {
            member: Member {
                types: Vec::new(),
                ..member("a")
            },
        });
        assert!(s.members.get("a").is_some_and(|m| m.leaving));
        let next = t.next.as_ref().map(|n| (n.version, n.contains("a")));
        assert_eq!(next, leaving_version.map(|v| (v, false)));
        let t = s.apply(&Command::Remove {
            nodes: vec!["a".into()],
        });
        assert!(!t.current.contains("a"));
    }

    #[test]
    fn leave_of_a_member_that_owns_nothing_is_immediate() {
        let mut s = ClusterState::default();
        join(&mut s, "a");
        join(&mut s, "b"); // next v2 = a, b
        join(&mut s, "c"); // queued
        s.apply(&Command::Leave { node: "c".into() });
        assert!(!s.members.contains_key("c"));
        let t = s.apply(&Command::Promote { version: 2 });
        assert!(t.next.is_none());
    }

    #[test]
    fn replicas_applying_the_same_log_agree() {
        let log = vec![
            Command::Join {
                member: member("a"),
            },
            Command::Join {
                member: member("bb"),
            },
            Command::Leave { node: "a".into() },
            Command::Promote { version: 2 },
            Command::Remove {
                nodes: vec!["bb".into()],
            },
        ];
        let mut x = ClusterState::default();
        let mut y = ClusterState::default();
        for c in &log {
            x.apply(c);
        }
        for c in &log {
            y.apply(c);
        }
        assert_eq!(x, y);
        let bytes = serde_json::to_vec(&x).unwrap_or_default();
        let z: ClusterState = serde_json::from_slice(&bytes).unwrap_or_default();
        assert_eq!(x, z);
    }
}
