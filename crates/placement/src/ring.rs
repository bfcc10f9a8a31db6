//! Consistent hashing: which member of a table owns an actor.
//!
//! This module owns the owner function, and every daemon must compute it
//! identically from the same table, on any build and any machine. So the
//! hash is specified, not `std`'s `DefaultHasher` (whose algorithm may
//! change between releases):
//!
//! - a member `node` gets [`VNODES`] points on a 64-bit ring, point `i`
//!   being `xxh3_64_with_seed(node, i)`;
//! - an actor hashes to `xxh3_64(type ++ 0x00 ++ id)`;
//! - its owner is the member of the first point at or after that hash,
//!   wrapping around; points that collide are ordered by node name.
//!
//! Each actor type has its own ring, over the members that host the type.
//! Virtual nodes keep the load balanced and make changes local: a member
//! joining takes about 1/n of the actors, all from others; a member leaving
//! gives away only its own.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

#[cfg(test)]
use xxhash_rust::xxh3::xxh3_64;
use xxhash_rust::xxh3::{xxh3_64_with_seed, Xxh3Default};

use crate::table::TableVersion;

/// Points per member on each type's ring.
pub const VNODES: u64 = 128;

/// A member as an owner: what a caller needs to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingMember {
    pub node: Arc<str>,
    pub address: Arc<str>,
}

/// One type's ring.
#[derive(Debug, Clone, Default)]
pub struct Ring {
    /// Sorted by (hash, node name) so that ties resolve the same everywhere.
    points: Vec<(u64, u32)>,
    members: Vec<RingMember>,
}

impl Ring {
    /// The ring over `members` (node, address); duplicates count once.
    pub fn new<'a>(members: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut list: Vec<RingMember> = Vec::new();
        for (node, address) in members {
            if !list.iter().any(|m| &*m.node == node) {
                list.push(RingMember {
                    node: node.into(),
                    address: address.into(),
                });
            }
        }
        // Member indices must not depend on the order members were given in.
        list.sort_by(|a, b| a.node.cmp(&b.node));
        let mut points = Vec::with_capacity(list.len() * VNODES as usize);
        for (idx, m) in list.iter().enumerate() {
            for i in 0..VNODES {
                points.push((xxh3_64_with_seed(m.node.as_bytes(), i), idx as u32));
            }
        }
        // Indices follow node order, so sorting by (hash, index) orders
        // colliding points by node name.
        points.sort_unstable();
        Ring {
            points,
            members: list,
        }
    }

    /// Whether nobody hosts the type.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The owner of the actor `(actor_type, id)`; `None` on an empty ring.
    pub fn owner(&self, actor_type: &str, id: &str) -> Option<&RingMember> {
        self.owner_at(actor_hash(actor_type, id))
    }
}

impl Ring {
    /// The owner of ring position `h`.
    fn owner_at(&self, h: u64) -> Option<&RingMember> {
        if self.points.is_empty() {
            return None;
        }
        let at = self.points.partition_point(|&(p, _)| p < h);
        let (_, idx) = self.points[at % self.points.len()];
        self.members.get(idx as usize)
    }
}

/// Members that own some actor under `from` which they will not own under
/// `to`: the ones a change must wait for (they hand actors off). The others
/// only gain actors or keep theirs, so waiting for their drain report would
/// only slow the change, e.g. a failover after a crash.
pub fn members_losing_actors(from: &TableVersion, to: &TableVersion) -> BTreeSet<String> {
    let (before, after) = (Rings::new(from), Rings::new(to));
    let mut losing = BTreeSet::new();
    for (ty, ring) in &before.by_type {
        let other = after.by_type.get(ty);
        // Owners are constant between consecutive points of the two rings
        // together, so checking at every point decides every actor.
        let points = ring
            .points
            .iter()
            .chain(other.map_or(&[][..], |o| &o.points[..]))
            .map(|&(p, _)| p);
        for h in points {
            let Some(old) = ring.owner_at(h) else {
                continue;
            };
            let new = other.and_then(|o| o.owner_at(h));
            if new.is_none_or(|n| n.node != old.node) {
                losing.insert(old.node.to_string());
            }
        }
    }
    losing
}

/// The ring position of an actor.
pub fn actor_hash(actor_type: &str, id: &str) -> u64 {
    // Streaming gives the same digest as hashing the concatenation, without
    // allocating on the call path.
    let mut h = Xxh3Default::new();
    h.update(actor_type.as_bytes());
    h.update(&[0]);
    h.update(id.as_bytes());
    h.digest()
}

/// The rings of every type in one table version, built once per version so
/// that owner lookups on the call path are a hash-map get and a binary
/// search.
#[derive(Debug, Clone, Default)]
pub struct Rings {
    by_type: HashMap<String, Ring>,
}

impl Rings {
    /// Every listed member owns actors of the types it hosts; a leaving
    /// member is simply absent from the table it leaves in.
    pub fn new(table: &TableVersion) -> Self {
        let mut hosts: HashMap<&str, Vec<(&str, &str)>> = HashMap::new();
        for m in &table.members {
            for ty in &m.types {
                hosts
                    .entry(ty.as_str())
                    .or_default()
                    .push((m.node.as_str(), m.address.as_str()));
            }
        }
        let by_type = hosts
            .into_iter()
            .map(|(ty, members)| (ty.to_owned(), Ring::new(members)))
            .collect();
        Rings { by_type }
    }

    /// The owner of `(actor_type, id)`; `None` if nobody hosts the type.
    pub fn owner(&self, actor_type: &str, id: &str) -> Option<&RingMember> {
        self.by_type.get(actor_type)?.owner(actor_type, id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn ring(nodes: &[&str]) -> Ring {
        Ring::new(nodes.iter().map(|n| (*n, "127.0.0.1:1")))
    }

    fn owners(r: &Ring, n: usize) -> Vec<String> {
        (0..n)
            .map(|i| {
                r.owner("Counter", &format!("actor-{i}"))
                    .map(|m| m.node.to_string())
                    .unwrap_or_default()
            })
            .collect()
    }

    #[test]
    fn hash_is_pinned_across_builds() {
        // If these change, daemons of different builds disagree on owners:
        // that is a wire-format break, not a refactor.
        assert_eq!(xxh3_64(b""), 0x2d06800538d394c2);
        assert_eq!(actor_hash("Counter", "a"), xxh3_64(b"Counter\0a"));
        let long = "x".repeat(1000);
        let mut key = b"T\0".to_vec();
        key.extend_from_slice(long.as_bytes());
        assert_eq!(actor_hash("T", &long), xxh3_64(&key));
        assert_eq!(xxh3_64_with_seed(b"node-a", 7), 0x5e25040df92fa70a);
    }

    #[test]
    fn every_daemon_computes_the_same_owner() {
        // Same members given in different orders and with different
        // addresses per view: owners depend on node names only.
        let a = Ring::new([("n1", "a:1"), ("n2", "a:2"), ("n3", "a:3")]);
        let b = Ring::new([("n3", "a:3"), ("n1", "a:1"), ("n2", "a:2")]);
        assert_eq!(owners(&a, 5000), owners(&b, 5000));
    }

    #[test]
    fn balance_across_three_members() {
        let r = ring(&["node-a", "node-b", "node-c"]);
        let n = 30_000;
        let mut count: HashMap<String, usize> = HashMap::new();
        for o in owners(&r, n) {
            *count.entry(o).or_default() += 1;
        }
        assert_eq!(count.len(), 3);
        for (node, c) in count {
            let share = c as f64 / n as f64;
            assert!(
                (0.23..=0.43).contains(&share),
                "{node} owns {share:.3} of actors, expected about 1/3"
            );
        }
    }

    #[test]
    fn join_moves_about_one_nth_and_only_to_the_new_member() {
        let n = 20_000;
        let before = owners(&ring(&["node-a", "node-b", "node-c"]), n);
        let after = owners(&ring(&["node-a", "node-b", "node-c", "node-d"]), n);
        let mut moved = 0;
        for (b, a) in before.iter().zip(&after) {
            if b != a {
                moved += 1;
                assert_eq!(a, "node-d", "an actor moved between old members");
            }
        }
        let share = moved as f64 / n as f64;
        assert!(
            (0.15..=0.35).contains(&share),
            "{share:.3} of actors moved on join, expected about 1/4"
        );
    }

    #[test]
    fn leave_moves_only_the_leavers_actors() {
        let n = 20_000;
        let before = owners(&ring(&["node-a", "node-b", "node-c", "node-d"]), n);
        let after = owners(&ring(&["node-a", "node-b", "node-d"]), n);
        for (b, a) in before.iter().zip(&after) {
            if b != "node-c" {
                assert_eq!(b, a, "an actor of a staying member moved");
            } else {
                assert_ne!(a, "node-c");
            }
        }
    }

    #[test]
    fn empty_ring_has_no_owner() {
        assert!(ring(&[]).owner("Counter", "x").is_none());
        let rings = Rings::default();
        assert!(rings.owner("Counter", "x").is_none());
    }

    #[test]
    fn only_members_giving_actors_away_are_losing() {
        let table = |version: u64, nodes: &[&str]| TableVersion {
            version,
            members: nodes
                .iter()
                .map(|n| crate::table::Member {
                    node: (*n).into(),
                    address: format!("{n}:1"),
                    types: vec!["t".into()],
                    leaving: false,
                })
                .collect(),
        };
        let ab = table(1, &["a", "b"]);
        let abc = table(2, &["a", "b", "c"]);
        let a = table(3, &["a"]);
        let losing = |from: &TableVersion, to: &TableVersion| -> Vec<String> {
            members_losing_actors(from, to).into_iter().collect()
        };
        // A join takes from everyone; a removal only from the removed.
        assert_eq!(losing(&ab, &abc), ["a", "b"]);
        assert_eq!(losing(&abc, &ab), ["c"]);
        assert_eq!(losing(&ab, &a), ["b"]);
        assert!(losing(&ab, &ab).is_empty());
        // Every actor agrees with the point-wise answer.
        let (before, after) = (Rings::new(&abc), Rings::new(&ab));
        for i in 0..2000 {
            let id = format!("x{i}");
            let (o, n) = (before.owner("t", &id), after.owner("t", &id));
            if let (Some(o), Some(n)) = (o, n) {
                if o.node != n.node {
                    assert_eq!(&*o.node, "c");
                }
            }
        }
    }
}
