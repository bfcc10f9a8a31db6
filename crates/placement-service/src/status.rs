//! The replicas as `ClusterStatus` lists them: this replica's peers list
//! (`--peers`, or `--peers-file` as last read) and the Raft membership it
//! knows, each with its role, so an operator
//! (and the tests) can watch a scale-up or scale-down happen.

use std::collections::BTreeMap;

use openraft::{BasicNode, RaftMetrics};
use troupe_proto::v1 as pb;

/// Every replica in `peers` or in the membership, by id. The address is the
/// one in `peers` when listed, else the one the membership records (a
/// replica a leader with a newer list added).
pub(crate) fn replicas(
    own_id: u64,
    own_last_index: u64,
    peers: &BTreeMap<u64, String>,
    metrics: &RaftMetrics<u64, BasicNode>,
) -> Vec<pb::Replica> {
    let membership = metrics.membership_config.membership();
    let mut addresses: BTreeMap<u64, String> = membership
        .nodes()
        .map(|(id, node)| (*id, node.addr.clone()))
        .collect();
    addresses.extend(peers.iter().map(|(id, a)| (*id, a.clone())));
    let voters: Vec<u64> = membership.voter_ids().collect();
    let learners: Vec<u64> = membership.learner_ids().collect();
    addresses
        .into_iter()
        .map(|(id, address)| {
            let last_log_index = if id == own_id {
                own_last_index
            } else {
                metrics
                    .replication
                    .as_ref()
                    .and_then(|r| r.get(&id).copied().flatten())
                    .map_or(0, |l| l.index)
            };
            pb::Replica {
                id: id.to_string(),
                address,
                leader: metrics.current_leader == Some(id),
                last_log_index,
                voter: voters.contains(&id),
                learner: learners.contains(&id),
            }
        })
        .collect()
}

/// The address of replica `id`: from `peers`, else from the membership.
pub(crate) fn address_of(
    id: u64,
    peers: &BTreeMap<u64, String>,
    metrics: &RaftMetrics<u64, BasicNode>,
) -> Option<String> {
    peers.get(&id).cloned().or_else(|| {
        metrics
            .membership_config
            .membership()
            .get_node(&id)
            .map(|n| n.addr.clone())
    })
}
