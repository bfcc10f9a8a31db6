//! `troupe cluster status --check`: what in the cluster needs a person:
//! placement without a leader, a member that does not answer, and what each
//! member's own status finds (`troupe status --check`). A problem several
//! members report alike (the dead letters of the store they share, the CA
//! they all trust) is said once, with their names.

use troupe_proto::v1 as pb;

use super::MemberView;
use crate::cli::status::problems::{problem, Problem};

pub(super) fn cluster_problems(
    status: &pb::ClusterStatusResponse,
    members: &[MemberView],
) -> Vec<Problem> {
    let mut found = Vec::new();
    if status.leader.is_empty() {
        found.push(problem(
            "the placement service has no leader: daemons cannot join, tables cannot change \
             and leases lapse",
            "check that a majority of the replicas run and reach each other",
        ));
    }
    for v in members {
        if let Err(why) = &v.actors {
            found.push(problem(
                format!(
                    "daemon {} at {} does not answer: {why}",
                    v.member.node, v.member.address
                ),
                "check that it runs and that this machine reaches it: the other daemons \
                 forward its actors' calls to that address",
            ));
        }
    }
    let mut alike: Vec<(&Problem, Vec<&str>)> = Vec::new();
    for v in members {
        for p in &v.problems {
            match alike.iter_mut().find(|(seen, _)| *seen == p) {
                Some((_, nodes)) => nodes.push(&v.member.node),
                None => alike.push((p, vec![&v.member.node])),
            }
        }
    }
    found.extend(alike.into_iter().map(|(p, nodes)| Problem {
        what: format!("{}: {}", nodes.join(", "), p.what),
        fix: p.fix.clone(),
    }));
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(node: &str, actors: Result<u64, String>, problems: &[&str]) -> MemberView {
        let member = pb::Member {
            node: node.into(),
            address: format!("{node}:7420"),
            types: Vec::new(),
            leaving: false,
        };
        MemberView {
            actors,
            problems: problems
                .iter()
                .map(|what| problem(*what, format!("fix {what}")))
                .collect(),
            ..MemberView::unasked(&member, true, false, Some(100))
        }
    }

    fn led() -> pb::ClusterStatusResponse {
        pb::ClusterStatusResponse {
            leader: "1".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_healthy_cluster_has_no_problem() {
        let members = [view("a", Ok(3), &[]), view("b", Ok(0), &[])];
        assert_eq!(cluster_problems(&led(), &members), Vec::new());
    }

    #[test]
    fn members_problems_are_named_once_with_the_members_that_have_them() {
        let members = [
            view(
                "a",
                Ok(3),
                &["3 dead letters in the store", "its placement lease lapsed"],
            ),
            view("b", Err("Connection refused".into()), &[]),
            view("c", Ok(1), &["3 dead letters in the store"]),
        ];
        let found = cluster_problems(&pb::ClusterStatusResponse::default(), &members);
        let what: Vec<&str> = found.iter().map(|p| p.what.as_str()).collect();
        assert_eq!(
            what,
            [
                "the placement service has no leader: daemons cannot join, tables cannot change \
                 and leases lapse",
                "daemon b at b:7420 does not answer: Connection refused",
                "a, c: 3 dead letters in the store",
                "a: its placement lease lapsed",
            ]
        );
        assert_eq!(found[2].fix, "fix 3 dead letters in the store");
    }
}
