//! The app's running turns, looked at every sweep: those past their turn
//! timeout fail (and their late answers are then dropped quietly), and those
//! whose callers stopped waiting are cancelled in the app (`CancelTurn`).

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

use prost::Message as _;
use tracing::{debug, warn};
use troupe_proto::v1 as pb;
use troupe_runtime::{CallError, TurnDone};

use super::outbound::Sized;
use super::{AppConnection, Pending};

/// How often, at most, running turns are looked at for callers that left
/// (`AppConnection::sweep_turns`): what `CancelTurn` promises.
pub(super) const CANCEL_SWEEP: Duration = Duration::from_millis(100);

/// How many turns that timed out are remembered, so that their late
/// answers are dropped quietly rather than taken for protocol errors.
const REMEMBERED_TIMEOUTS: usize = 65_536;

/// Call ids of timed-out turns, the oldest forgotten first.
#[derive(Default)]
pub(super) struct TimedOut {
    ids: HashSet<u64>,
    order: VecDeque<u64>,
}

impl AppConnection {
    /// Looks at the running turns once: fails those past their deadline
    /// with `TurnTimedOut` (the runtime then deactivates the actor through
    /// this app), and tells the app to stop each one whose caller stopped
    /// waiting (once per turn; only an app that asked): no one reads its
    /// reply, and the actor's next turns wait behind it.
    pub(super) fn sweep_turns(&self, now: Instant) {
        let (overdue, abandoned) = {
            let mut pending = self.pending.lock();
            let mut overdue = Vec::new();
            let mut abandoned = Vec::new();
            for (id, work) in pending.iter_mut() {
                let Pending::Turn(done, due, _) = work else {
                    continue;
                };
                if *due <= now {
                    overdue.push(*id);
                } else if self.accepts_cancel && done.caller_left() && done.cancelling() {
                    abandoned.push(*id);
                }
            }
            let overdue: Vec<(u64, TurnDone, Duration)> = overdue
                .into_iter()
                .filter_map(|id| match pending.remove(&id) {
                    Some(Pending::Turn(done, _, limit)) => Some((id, done, limit)),
                    _ => None,
                })
                .collect();
            (overdue, abandoned)
        };
        self.cancel_in_app(abandoned);
        for (call_id, done, limit) in overdue {
            self.remember_timed_out(call_id);
            let actor = done.actor().clone();
            warn!(app = %self.name, actor = %actor, ?limit, "turn timed out; deactivating the actor");
            done.fail(CallError::TurnTimedOut { actor, limit });
        }
    }

    /// Remembers `call_id` timed out, forgetting the oldest past
    /// [`REMEMBERED_TIMEOUTS`].
    fn remember_timed_out(&self, call_id: u64) {
        let mut timed_out = self.timed_out.lock();
        timed_out.ids.insert(call_id);
        timed_out.order.push_back(call_id);
        while timed_out.order.len() > REMEMBERED_TIMEOUTS {
            if let Some(old) = timed_out.order.pop_front() {
                timed_out.ids.remove(&old);
            }
        }
    }

    /// Sends `CancelTurn` for each of `call_ids`.
    fn cancel_in_app(&self, call_ids: Vec<u64>) {
        if call_ids.is_empty() {
            return;
        }
        let outbound = self.outbound.lock();
        let Some(tx) = outbound.as_ref() else {
            return;
        };
        for call_id in call_ids {
            debug!(app = %self.name, call_id, "turn's caller left; telling the app to stop it");
            let message = pb::DaemonMessage {
                kind: Some(pb::daemon_message::Kind::Cancel(pb::CancelTurn { call_id })),
            };
            let bytes = message.encoded_len();
            // A closed stream fails the turn with it.
            let _ = tx.send(Ok(Sized { message, bytes }));
        }
    }

    /// Whether `call_id` is a turn that timed out (forgetting it).
    pub(super) fn was_timed_out(&self, call_id: u64) -> bool {
        self.timed_out.lock().ids.remove(&call_id)
    }
}
