//! The membership's decisions as plain functions and small state machines:
//! lease arithmetic, when to hand off and what to report, whether the
//! daemon is still listed. No I/O, so every rule is tested here.

use std::time::{Duration, Instant};

use tonic::Code;
use troupe_placement::table::Table;

/// The lease a heartbeat acknowledged by placement grants: from its *send*
/// time, minus a margin for clock rate drift (a write or turn that outlives
/// the lease is the stores' and the apps' to refuse: owner epochs, lease
/// deadlines).
/// Placement removes a member only `lease` after it last *received* from it,
/// which is after the send, so this always ends first.
pub fn lease_until(sent: Instant, lease: Duration) -> Instant {
    sent + lease - lease_margin(lease)
}

pub fn lease_margin(lease: Duration) -> Duration {
    lease / 4
}

/// Whether the lease is over at `now` (no lease counts as over).
pub fn lapsed(lease_end: Option<Instant>, now: Instant) -> bool {
    lease_end.is_none_or(|end| end <= now)
}

/// How long one placement request may take: a replica that stopped
/// answering must not hold the heartbeat loop past the point where another
/// replica could still renew the lease.
pub fn request_timeout(lease: Duration, interval: Duration) -> Duration {
    (lease / 3).max(interval).max(Duration::from_millis(100))
}

/// Pause before the next round of join attempts: doubling, capped.
pub fn backoff(round: u32) -> Duration {
    let base = Duration::from_millis(100);
    base.saturating_mul(1u32 << round.min(5))
        .min(Duration::from_secs(2))
}

/// Which pending table this daemon has handed its actors off for.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Drain {
    /// The highest `next.version` fully handed off for; reported in every
    /// heartbeat (placement's drain records are soft state a new leader
    /// learns only from the next heartbeats).
    drained: u64,
    /// A hand-off under way, for this `next.version`.
    running: Option<u64>,
}

impl Drain {
    /// The `drained_version` to report.
    pub fn report(&self) -> u64 {
        self.drained
    }

    /// Whether to start a hand-off for `table`'s pending change now; if so,
    /// it is recorded as running and its version returned. One at a time: a
    /// newer `next` arriving meanwhile is looked at once the running one ends.
    pub fn start(&mut self, table: &Table) -> Option<u64> {
        let next = table.next.as_ref()?.version;
        if self.running.is_some() || next <= self.drained {
            return None;
        }
        self.running = Some(next);
        Some(next)
    }

    /// The hand-off for `version` ended; only a complete one may be reported
    /// (a report makes placement promote, and a promoted table lets the new
    /// owner activate).
    pub fn finished(&mut self, version: u64, complete: bool) {
        if self.running == Some(version) {
            self.running = None;
        }
        if complete {
            self.drained = self.drained.max(version);
        }
    }

    pub fn running(&self) -> Option<u64> {
        self.running
    }
}

/// Where this daemon stands according to a table it received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Listed in `current` or `next`.
    Member,
    /// Listed in neither: removed (lease lapsed), or its leave is complete.
    Gone,
}

pub fn standing(table: &Table, node: &str) -> Standing {
    let listed =
        table.current.contains(node) || table.next.as_ref().is_some_and(|n| n.contains(node));
    if listed {
        Standing::Member
    } else {
        Standing::Gone
    }
}

/// Whether this daemon has dropped out of the tables, across the tables of
/// one membership. A join queued behind a change in flight is in no table
/// yet (placement adds it with the following change), so absence counts only
/// after the daemon was listed once.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Presence {
    listed: bool,
}

impl Presence {
    /// Whether `table` no longer lists a daemon it listed before: its leave
    /// is complete, or placement removed it.
    pub fn gone(&mut self, table: &Table, node: &str) -> bool {
        match standing(table, node) {
            Standing::Member => {
                self.listed = true;
                false
            }
            Standing::Gone => self.listed,
        }
    }
}

/// What a heartbeat's failure means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeatFailure {
    /// Placement does not know this node (removed after its lease lapsed,
    /// or its leave completed).
    NotMember,
    /// This replica could not answer; try the next one.
    TryElsewhere,
}

pub fn beat_failure(code: Code) -> BeatFailure {
    match code {
        Code::NotFound => BeatFailure::NotMember,
        _ => BeatFailure::TryElsewhere,
    }
}

#[cfg(test)]
mod tests {
    use troupe_placement::table::{Member, TableVersion};

    use super::*;

    fn member(node: &str) -> Member {
        Member {
            node: node.into(),
            address: format!("{node}:1"),
            types: vec!["counter".into()],
            leaving: false,
        }
    }

    fn version(v: u64, nodes: &[&str]) -> TableVersion {
        TableVersion {
            version: v,
            members: nodes.iter().map(|n| member(n)).collect(),
        }
    }

    fn table(current: TableVersion, next: Option<TableVersion>) -> Table {
        Table {
            current,
            next,
            waiting_for: vec![],
        }
    }

    #[test]
    fn the_lease_ends_a_margin_before_placement_can_remove_the_member() {
        let sent = Instant::now();
        let lease = Duration::from_secs(3);
        let end = lease_until(sent, lease);
        assert_eq!(end, sent + Duration::from_millis(2250));
        // Placement counts from receipt, which is after the send: whatever the
        // network delay, the daemon's right to serve ends first.
        let received = sent + Duration::from_millis(1);
        assert!(end < received + lease);
        assert_eq!(lease_margin(lease), Duration::from_millis(750));
    }

    #[test]
    fn a_lease_is_over_at_its_end_and_when_there_is_none() {
        let now = Instant::now();
        assert!(lapsed(None, now));
        assert!(lapsed(Some(now), now));
        assert!(!lapsed(Some(now + Duration::from_millis(1)), now));
        assert!(lapsed(Some(now), now + Duration::from_millis(1)));
    }

    #[test]
    fn requests_are_bounded_below_the_lease_and_joins_back_off() {
        let t = request_timeout(Duration::from_secs(3), Duration::from_millis(500));
        assert_eq!(t, Duration::from_secs(1));
        assert_eq!(
            request_timeout(Duration::from_millis(90), Duration::from_millis(10)),
            Duration::from_millis(100)
        );
        assert_eq!(backoff(0), Duration::from_millis(100));
        assert_eq!(backoff(1), Duration::from_millis(200));
        assert_eq!(backoff(4), Duration::from_millis(1600));
        assert_eq!(backoff(5), Duration::from_secs(2));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(2));
    }

    #[test]
    fn a_pending_table_starts_one_hand_off_and_is_reported_only_when_complete() {
        let mut drain = Drain::default();
        let stable = table(version(1, &["a"]), None);
        assert_eq!(drain.start(&stable), None);
        assert_eq!(drain.report(), 0);

        let pending = table(version(1, &["a"]), Some(version(2, &["a", "b"])));
        assert_eq!(drain.start(&pending), Some(2));
        // Running: not again, and nothing reported yet.
        assert_eq!(drain.start(&pending), None);
        assert_eq!(drain.report(), 0);
        // An incomplete hand-off (grace period over) is retried, not reported.
        drain.finished(2, false);
        assert_eq!(drain.report(), 0);
        assert_eq!(drain.start(&pending), Some(2));
        drain.finished(2, true);
        assert_eq!(drain.report(), 2);
        assert_eq!(drain.running(), None);
        // Done for version 2: the same table starts nothing, a later one does.
        assert_eq!(drain.start(&pending), None);
        let later = table(version(2, &["a", "b"]), Some(version(3, &["b"])));
        assert_eq!(drain.start(&later), Some(3));
        // A newer change arriving while one runs waits for it.
        let newer = table(version(3, &["b"]), Some(version(4, &["b", "c"])));
        assert_eq!(drain.start(&newer), None);
        drain.finished(3, true);
        assert_eq!(drain.start(&newer), Some(4));
        // A stale completion changes nothing it should not.
        drain.finished(2, true);
        assert_eq!((drain.report(), drain.running()), (3, Some(4)));
    }

    #[test]
    fn standing_follows_both_tables() {
        // Joining: only in `next`.
        let joining = table(version(1, &["a"]), Some(version(2, &["a", "b"])));
        assert_eq!(standing(&joining, "b"), Standing::Member);
        // Leaving: only in `current`.
        let leaving = table(version(2, &["a", "b"]), Some(version(3, &["a"])));
        assert_eq!(standing(&leaving, "b"), Standing::Member);
        // Promoted without it: gone.
        let left = table(version(3, &["a"]), None);
        assert_eq!(standing(&left, "b"), Standing::Gone);
        assert_eq!(standing(&left, "a"), Standing::Member);
    }

    #[test]
    fn a_queued_join_is_not_taken_for_a_removal() {
        let mut presence = Presence::default();
        // "c" joined while a change was in flight: in neither table yet.
        let busy = table(version(1, &["a"]), Some(version(2, &["a", "b"])));
        assert!(!presence.gone(&busy, "c"));
        let queued = table(version(2, &["a", "b"]), Some(version(3, &["a", "b", "c"])));
        assert!(!presence.gone(&queued, "c"));
        let settled = table(version(3, &["a", "b", "c"]), None);
        assert!(!presence.gone(&settled, "c"));
        // Listed once, then absent: removed (or left).
        let without = table(version(4, &["a", "b"]), None);
        assert!(presence.gone(&without, "c"));
    }

    #[test]
    fn only_not_found_means_the_member_was_dropped() {
        assert_eq!(beat_failure(Code::NotFound), BeatFailure::NotMember);
        for code in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::Internal,
            Code::Unknown,
        ] {
            assert_eq!(beat_failure(code), BeatFailure::TryElsewhere, "{code:?}");
        }
    }
}
