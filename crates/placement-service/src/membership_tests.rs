//! The reconcile rule, step by step through the StatefulSet flows.

use super::*;

fn ids(list: &[u64]) -> BTreeSet<u64> {
    list.iter().copied().collect()
}

fn peers(list: &[u64]) -> BTreeMap<u64, String> {
    list.iter()
        .map(|id| (*id, format!("p-{id}:7470")))
        .collect()
}

/// A uniform config of `voters`, all reachable and caught up at index 100.
fn healthy(voters: &[u64]) -> Observed {
    Observed {
        configs: vec![ids(voters)],
        reachable: ids(voters),
        matched: voters.iter().map(|id| (*id, 100)).collect(),
        last_index: 100,
        ..Observed::default()
    }
}

#[test]
fn nothing_to_do_when_the_members_are_the_list() {
    assert_eq!(next_step(&peers(&[1, 2, 3]), &healthy(&[1, 2, 3])), None);
}

#[test]
fn scale_up_adds_running_replicas_as_learners_then_promotes_them_together() {
    let desired = peers(&[1, 2, 3, 4, 5]);
    let mut seen = healthy(&[1, 2, 3]);
    // 4 and 5 not running yet: nothing to add.
    assert_eq!(next_step(&desired, &seen), None);
    seen.reachable.extend([4, 5]);
    assert_eq!(
        next_step(&desired, &seen),
        Some(Step::AddLearner {
            id: 4,
            addr: "p-4:7470".into()
        })
    );
    seen.learners.insert(4);
    seen.matched.insert(4, 0);
    assert_eq!(
        next_step(&desired, &seen),
        Some(Step::AddLearner {
            id: 5,
            addr: "p-5:7470".into()
        })
    );
    seen.learners.insert(5);
    seen.matched.insert(5, 0);
    // Not caught up: not promoted.
    assert_eq!(next_step(&desired, &seen), None);
    seen.matched.insert(4, 100);
    seen.matched.insert(5, 100 - CATCH_UP_LAG);
    assert_eq!(
        next_step(&desired, &seen),
        Some(Step::Promote {
            voters: ids(&[1, 2, 3, 4, 5]),
            added: ids(&[4, 5]),
        })
    );
}

#[test]
fn scale_down_removes_unlisted_voters_only_once_they_are_gone() {
    let desired = peers(&[1, 2, 3]);
    let mut seen = healthy(&[1, 2, 3, 4, 5]);
    // Still running: kept (a leader with an older list may have added them).
    assert_eq!(next_step(&desired, &seen), None);
    seen.reachable = ids(&[1, 2, 3]);
    // Stopped, but not yet for the grace: kept.
    assert_eq!(next_step(&desired, &seen), None);
    seen.gone = ids(&[4, 5]);
    assert_eq!(
        next_step(&desired, &seen),
        Some(Step::RemoveVoters {
            voters: ids(&[1, 2, 3]),
            removed: ids(&[4, 5]),
        })
    );
}

#[test]
fn an_old_list_leader_does_not_undo_a_newer_list() {
    // Scale up finished by a 5-list leader; a 3-list replica now leads.
    let old = peers(&[1, 2, 3]);
    assert_eq!(next_step(&old, &healthy(&[1, 2, 3, 4, 5])), None);
    // Scale down finished by a 3-list leader; a 5-list replica now leads
    // while 4 and 5 are stopped: it does not add them back.
    let new = peers(&[1, 2, 3, 4, 5]);
    let mut seen = healthy(&[1, 2, 3]);
    seen.gone = ids(&[4, 5]);
    assert_eq!(next_step(&new, &seen), None);
}

#[test]
fn a_rolling_restart_with_the_same_list_changes_nothing() {
    let desired = peers(&[1, 2, 3]);
    let mut seen = healthy(&[1, 2, 3]);
    seen.reachable.remove(&3);
    seen.gone.insert(3);
    assert_eq!(next_step(&desired, &seen), None);
}

#[test]
fn no_change_is_proposed_without_a_reachable_majority() {
    let desired = peers(&[1, 2, 3, 4, 5]);
    let mut seen = healthy(&[1, 2, 3]);
    seen.reachable = ids(&[1, 4, 5]);
    assert_eq!(next_step(&desired, &seen), None);
    // Nor a removal while the current voters lack one: it could not commit.
    let desired = peers(&[1, 2]);
    let mut seen = healthy(&[1, 2, 3, 4, 5]);
    seen.reachable = ids(&[1, 2]);
    seen.gone = ids(&[3, 4, 5]);
    assert_eq!(next_step(&desired, &seen), None);
}

#[test]
fn a_replacement_grows_before_it_shrinks() {
    // 3 is dead and replaced by 4 in the list.
    let desired = peers(&[1, 2, 4]);
    let mut seen = healthy(&[1, 2, 3]);
    seen.reachable = ids(&[1, 2, 4]);
    seen.gone = ids(&[3]);
    assert!(matches!(
        next_step(&desired, &seen),
        Some(Step::AddLearner { id: 4, .. })
    ));
    seen.learners.insert(4);
    seen.matched.insert(4, 100);
    assert!(matches!(
        next_step(&desired, &seen),
        Some(Step::Promote { .. })
    ));
    seen.learners.clear();
    seen.configs = vec![ids(&[1, 2, 3, 4])];
    assert_eq!(
        next_step(&desired, &seen),
        Some(Step::RemoveVoters {
            voters: ids(&[1, 2, 4]),
            removed: ids(&[3]),
        })
    );
}

#[test]
fn a_joint_config_left_behind_is_finished_first() {
    let mut seen = healthy(&[1, 2, 3, 4, 5]);
    seen.configs = vec![ids(&[1, 2, 3]), ids(&[1, 2, 3, 4, 5])];
    assert_eq!(
        next_step(&peers(&[1, 2, 3]), &seen),
        Some(Step::FinishJoint {
            voters: ids(&[1, 2, 3, 4, 5])
        })
    );
    // Not while one half lacks a majority.
    seen.reachable = ids(&[1, 2]);
    assert_eq!(next_step(&peers(&[1, 2, 3]), &seen), None);
}

#[test]
fn unlisted_learners_are_dropped_once_gone() {
    let desired = peers(&[1, 2, 3]);
    let mut seen = healthy(&[1, 2, 3]);
    seen.learners.insert(4);
    assert_eq!(next_step(&desired, &seen), None);
    seen.gone.insert(4);
    assert_eq!(
        next_step(&desired, &seen),
        Some(Step::RemoveLearners { ids: ids(&[4]) })
    );
}

#[test]
fn a_leader_its_file_dropped_removes_stopped_voters_but_never_itself() {
    // Leader 4 (not in the file any more: being scaled away) with 5 stopped.
    let desired = peers(&[1, 2, 3]);
    let mut seen = healthy(&[1, 2, 3, 4, 5]);
    seen.reachable.remove(&5);
    assert_eq!(next_step(&desired, &seen), None, "5 not gone yet");
    seen.gone.insert(5);
    assert_eq!(
        next_step(&desired, &seen),
        Some(Step::RemoveVoters {
            voters: ids(&[1, 2, 3, 4]),
            removed: ids(&[5]),
        })
    );
    seen.configs = vec![ids(&[1, 2, 3, 4])];
    seen.gone.clear();
    assert_eq!(next_step(&desired, &seen), None, "4 answers: never removed");
}
