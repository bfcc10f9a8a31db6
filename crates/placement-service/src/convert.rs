//! The placement table between its Rust types (`troupe_placement::table`)
//! and the `troupe.v1` wire messages; used by the service and by the
//! daemon's placement client.

use troupe_placement::table::{Member, Table, TableVersion};
use troupe_proto::v1 as pb;

pub fn member_to_pb(m: Member) -> pb::Member {
    pb::Member {
        node: m.node,
        address: m.address,
        types: m.types,
        leaving: m.leaving,
    }
}

pub fn member_from_pb(m: pb::Member) -> Member {
    Member {
        node: m.node,
        address: m.address,
        types: m.types,
        leaving: m.leaving,
    }
}

fn version_to_pb(t: TableVersion) -> pb::TableVersion {
    pb::TableVersion {
        version: t.version,
        members: t.members.into_iter().map(member_to_pb).collect(),
    }
}

fn version_from_pb(t: pb::TableVersion) -> TableVersion {
    let mut members: Vec<Member> = t.members.into_iter().map(member_from_pb).collect();
    members.sort_by(|a, b| a.node.cmp(&b.node));
    TableVersion {
        version: t.version,
        members,
    }
}

pub fn table_to_pb(t: Table) -> pb::PlacementTable {
    pb::PlacementTable {
        current: Some(version_to_pb(t.current)),
        next: t.next.map(version_to_pb),
        waiting_for: t.waiting_for,
    }
}

/// A table without `current` (never sent by the service) reads as the empty
/// version 0, which every real table supersedes.
pub fn table_from_pb(t: pb::PlacementTable) -> Table {
    Table {
        current: t.current.map(version_from_pb).unwrap_or_default(),
        next: t.next.map(version_from_pb),
        waiting_for: t.waiting_for,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(node: &str, types: &[&str]) -> Member {
        Member {
            node: node.into(),
            address: format!("{node}:1"),
            types: types.iter().map(|t| t.to_string()).collect(),
            leaving: false,
        }
    }

    #[test]
    fn tables_round_trip() {
        let t = Table {
            current: TableVersion {
                version: 4,
                members: vec![member("a", &["C"]), member("b", &[])],
            },
            next: Some(TableVersion {
                version: 5,
                members: vec![member("a", &["C"])],
            }),
            waiting_for: vec!["b".into()],
        };
        assert_eq!(table_from_pb(table_to_pb(t.clone())), t);
    }
}
