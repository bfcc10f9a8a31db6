//! The daemon's view of the cluster: [`ClusterPlacement`] holds the table
//! the daemon last received from the placement service and its lease, and
//! answers the owner questions the runtime asks on every call. The daemon's
//! client (which joins, heartbeats and calls [`ClusterPlacement::set_table`]
//! / [`ClusterPlacement::renew_lease`]) lives in the binary; the rules that
//! keep one activation per actor across table changes are in
//! docs/architecture.md, "Cluster".

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arc_swap::ArcSwap;
use tokio::sync::watch;

use crate::ring::Rings;
use crate::table::Table;
use crate::{Owner, OwnerEpoch, Placement};

/// A table with its rings computed once, swapped in whole.
#[derive(Debug, Default)]
struct View {
    table: Table,
    current: Rings,
    next: Option<Rings>,
}

impl View {
    fn new(table: Table) -> Self {
        let current = Rings::new(&table.current);
        let next = table.next.as_ref().map(Rings::new);
        View {
            table,
            current,
            next,
        }
    }
}

/// The daemon's view of the cluster: implements [`Placement`] from the
/// latest table and lease.
#[derive(Debug)]
pub struct ClusterPlacement {
    node: String,
    /// Read on every call without locking; replaced whole on a new table.
    view: ArcSwap<View>,
    /// Serialises `set_table` so a stale table never replaces a newer one
    /// between the version check and the swap.
    writer: Mutex<()>,
    /// Lease end as nanoseconds after `epoch`; 0: no lease.
    lease_nanos: AtomicU64,
    epoch: Instant,
    changes: watch::Sender<u64>,
}

impl ClusterPlacement {
    /// A view with no table and no lease yet: nothing is placed and the
    /// daemon may not serve until it has joined.
    pub fn new(node: impl Into<String>) -> Arc<Self> {
        let (changes, _) = watch::channel(0);
        Arc::new(ClusterPlacement {
            node: node.into(),
            view: ArcSwap::from_pointee(View::default()),
            writer: Mutex::new(()),
            lease_nanos: AtomicU64::new(0),
            epoch: Instant::now(),
            changes,
        })
    }

    /// This daemon's node name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Installs `table` unless it is older than the one held; returns whether
    /// it was installed. A table with new versions ticks [`Placement::changes`].
    pub fn set_table(&self, table: Table) -> bool {
        // A poisoned lock only means another writer panicked; the view it
        // guards is swapped atomically and cannot be half-written.
        let _guard = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let held = self.view.load().table.versions();
        let new = table.versions();
        if new < held {
            return false;
        }
        let version = table.current.version;
        self.view.store(Arc::new(View::new(table)));
        if new != held {
            self.changes.send_replace(version);
        }
        true
    }

    /// The table held now.
    pub fn table(&self) -> Table {
        self.view.load().table.clone()
    }

    /// The daemon may serve until `until`. Never moves the end backwards:
    /// an acknowledgement of an older heartbeat arriving late must not
    /// shorten the lease, nor extend it past what the newest one grants.
    pub fn renew_lease(&self, until: Instant) {
        let nanos = until.checked_duration_since(self.epoch).map_or(1, |d| {
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
        });
        self.lease_nanos.fetch_max(nanos, Ordering::AcqRel);
    }

    /// The daemon may no longer serve (lease lapsed, left, or rejoining).
    pub fn revoke_lease(&self) {
        self.lease_nanos.store(0, Ordering::Release);
    }

    /// When the lease ends; `None` if there is none.
    pub fn lease_end(&self) -> Option<Instant> {
        match self.lease_nanos.load(Ordering::Acquire) {
            0 => None,
            n => Some(self.epoch + std::time::Duration::from_nanos(n)),
        }
    }

    /// Whether this node owns the actor once `next` is promoted (with no
    /// change in flight: in `current`).
    pub fn owns_in_next(&self, actor_type: &str, actor_id: &str) -> bool {
        let view = self.view.load();
        let rings = view.next.as_ref().unwrap_or(&view.current);
        rings
            .owner(actor_type, actor_id)
            .is_some_and(|m| *m.node == *self.node)
    }
}

impl Placement for ClusterPlacement {
    fn owner(&self, actor_type: &str, actor_id: &str) -> Owner {
        let view = self.view.load();
        let current = view.current.owner(actor_type, actor_id);
        if let Some(next) = &view.next {
            let next = next.owner(actor_type, actor_id);
            if current.map(|m| &m.node) != next.map(|m| &m.node) {
                return Owner::Moving;
            }
        }
        match current {
            None => Owner::Unplaced,
            Some(m) if *m.node == *self.node => Owner::Local,
            Some(m) => Owner::Remote {
                node: m.node.to_string(),
                address: m.address.to_string(),
            },
        }
    }

    fn table_version(&self) -> u64 {
        self.view.load().table.current.version
    }

    fn epoch(&self, actor_type: &str, actor_id: &str) -> OwnerEpoch {
        // One load: the owner and the version come from the same table.
        let view = self.view.load();
        match view.current.owner(actor_type, actor_id) {
            Some(m) if *m.node == *self.node => OwnerEpoch::Owned(view.table.current.version),
            _ => OwnerEpoch::NotOwned,
        }
    }

    fn lease_end_unix_ms(&self) -> Option<u64> {
        // No lease: nothing may run; a deadline long past says so (0 would
        // mean "no deadline" on the wire).
        let Some(end) = self.lease_end() else {
            return Some(1);
        };
        let left = end.saturating_duration_since(Instant::now());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        // Rounded down: a turn is never sent with more time than the lease has.
        u64::try_from(now.saturating_add(left).as_millis())
            .ok()
            .or(Some(u64::MAX))
    }

    fn may_serve(&self) -> bool {
        self.lease_end().is_some_and(|end| end > Instant::now())
    }

    fn changes(&self) -> Option<watch::Receiver<u64>> {
        Some(self.changes.subscribe())
    }

    fn hosts_of(&self, actor_type: &str) -> Vec<Owner> {
        let view = self.view.load();
        let listed = std::iter::once(&view.table.current).chain(view.table.next.as_ref());
        let mut hosts: Vec<Owner> = Vec::new();
        let mut seen: Vec<&str> = Vec::new();
        for member in listed.flat_map(|t| &t.members) {
            if !member.types.iter().any(|t| t == actor_type) || seen.contains(&&*member.node) {
                continue;
            }
            seen.push(&member.node);
            hosts.push(if member.node == self.node {
                Owner::Local
            } else {
                Owner::Remote {
                    node: member.node.clone(),
                    address: member.address.clone(),
                }
            });
        }
        hosts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{Member, TableVersion};
    use std::time::Duration;

    fn member(node: &str, types: &[&str]) -> Member {
        Member {
            node: node.into(),
            address: format!("{node}:1"),
            types: types.iter().map(|t| t.to_string()).collect(),
            leaving: false,
        }
    }

    fn version(v: u64, members: Vec<Member>) -> TableVersion {
        TableVersion {
            version: v,
            members,
        }
    }

    #[test]
    fn no_table_places_nothing_and_no_lease_serves_nothing() {
        let p = ClusterPlacement::new("a");
        assert_eq!(p.owner("Counter", "1"), Owner::Unplaced);
        assert!(!p.may_serve());
        assert_eq!(p.lease_end(), None);
    }

    #[test]
    fn a_types_hosts_are_those_of_both_tables_each_once() {
        let p = ClusterPlacement::new("a");
        assert!(p.hosts_of("Counter").is_empty());
        p.set_table(Table {
            current: version(
                1,
                vec![member("a", &["Counter"]), member("b", &["Counter", "Bus"])],
            ),
            next: Some(version(
                2,
                vec![member("b", &["Counter"]), member("c", &["Counter"])],
            )),
            waiting_for: vec![],
        });
        let remote = |node: &str| Owner::Remote {
            node: node.into(),
            address: format!("{node}:1"),
        };
        assert_eq!(
            p.hosts_of("Counter"),
            vec![Owner::Local, remote("b"), remote("c")]
        );
        assert_eq!(p.hosts_of("Bus"), vec![remote("b")]);
        assert!(p.hosts_of("Other").is_empty());
    }

    #[test]
    fn owners_local_remote_unplaced() {
        let p = ClusterPlacement::new("a");
        p.set_table(Table {
            current: version(
                1,
                vec![member("a", &["Counter"]), member("b", &["Counter"])],
            ),
            next: None,
            waiting_for: vec![],
        });
        let mut local = 0;
        let mut remote = 0;
        for i in 0..200 {
            match p.owner("Counter", &i.to_string()) {
                Owner::Local => {
                    local += 1;
                    assert!(p.owns_in_next("Counter", &i.to_string()));
                }
                Owner::Remote { node, address } => {
                    assert_eq!((node.as_str(), address.as_str()), ("b", "b:1"));
                    remote += 1;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(local > 0 && remote > 0);
        assert_eq!(p.owner("Other", "1"), Owner::Unplaced);
        assert_eq!(p.table_version(), 1);
    }

    #[test]
    fn actors_changing_owner_are_moving() {
        let p = ClusterPlacement::new("a");
        let mut rx = p.changes().unwrap_or_else(|| unreachable!());
        p.set_table(Table {
            current: version(1, vec![member("a", &["C"])]),
            next: Some(version(2, vec![member("a", &["C"]), member("b", &["C"])])),
            waiting_for: vec!["a".into()],
        });
        assert!(rx.has_changed().unwrap_or(false));
        rx.mark_unchanged();
        let mut moving = 0;
        for i in 0..200 {
            let id = i.to_string();
            match p.owner("C", &id) {
                Owner::Moving => {
                    moving += 1;
                    assert!(!p.owns_in_next("C", &id));
                }
                Owner::Local => assert!(p.owns_in_next("C", &id)),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(moving > 0);
        // The same versions again (a new waiting_for) change no owners.
        assert!(p.set_table(Table {
            current: version(1, vec![member("a", &["C"])]),
            next: Some(version(2, vec![member("a", &["C"]), member("b", &["C"])])),
            waiting_for: vec![],
        }));
        assert!(!rx.has_changed().unwrap_or(true));
        // Promotion.
        p.set_table(Table {
            current: version(2, vec![member("a", &["C"]), member("b", &["C"])]),
            next: None,
            waiting_for: vec![],
        });
        assert!(rx.has_changed().unwrap_or(false));
        assert_eq!(*rx.borrow_and_update(), 2);
        assert_eq!(p.table_version(), 2);
    }

    #[test]
    fn older_tables_are_ignored() {
        let p = ClusterPlacement::new("a");
        assert!(p.set_table(Table {
            current: version(3, vec![member("a", &["C"])]),
            ..Table::default()
        }));
        assert!(!p.set_table(Table {
            current: version(2, vec![member("b", &["C"])]),
            next: Some(version(3, vec![])),
            waiting_for: vec![],
        }));
        assert_eq!(p.table_version(), 3);
        assert_eq!(p.owner("C", "x"), Owner::Local);
    }

    #[test]
    fn the_epoch_is_the_current_version_while_owned_and_moving() {
        let p = ClusterPlacement::new("a");
        assert_eq!(p.epoch("C", "x"), OwnerEpoch::NotOwned);
        p.set_table(Table {
            current: version(4, vec![member("a", &["C"])]),
            next: Some(version(5, vec![member("a", &["C"]), member("b", &["C"])])),
            waiting_for: vec!["a".into()],
        });
        // Every actor is a's under version 4, those moving to b included:
        // a hands them off, and writes them, under its own epoch.
        for i in 0..50 {
            assert_eq!(p.epoch("C", &i.to_string()), OwnerEpoch::Owned(4));
        }
        p.set_table(Table {
            current: version(5, vec![member("a", &["C"]), member("b", &["C"])]),
            next: None,
            waiting_for: vec![],
        });
        let epochs: Vec<_> = (0..50).map(|i| p.epoch("C", &i.to_string())).collect();
        assert!(epochs.contains(&OwnerEpoch::Owned(5)));
        assert!(epochs.contains(&OwnerEpoch::NotOwned));
        assert_eq!(p.epoch("Other", "x"), OwnerEpoch::NotOwned);
    }

    #[test]
    fn lease_ends_and_is_revoked() {
        let p = ClusterPlacement::new("a");
        let now = Instant::now();
        p.renew_lease(now + Duration::from_secs(60));
        assert!(p.may_serve());
        // A late acknowledgement of an older heartbeat does not shorten it.
        p.renew_lease(now + Duration::from_secs(1));
        assert_eq!(p.lease_end(), Some(now + Duration::from_secs(60)));
        p.revoke_lease();
        assert!(!p.may_serve());
        p.renew_lease(now);
        assert!(!p.may_serve());
    }
}
