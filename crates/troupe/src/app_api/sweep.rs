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
/// (`AppConnection::cancel_abandoned_turns`): what `CancelTurn` promises.
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
    /// Fails every turn past its deadline with `TurnTimedOut`; the runtime
    /// then deactivates the actor through this app.
    pub(super) fn fail_overdue_turns(&self, now: Instant) {
        let overdue: Vec<(u64, TurnDone, Duration)> = {
            let mut pending = self.pending.lock();
            let ids: Vec<u64> = pending
                .iter()
                .filter(|(_, p)| matches!(p, Pending::Turn(_, due, _) if *due <= now))
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter()
                .filter_map(|id| match pending.remove(&id) {
                    Some(Pending::Turn(done, _, limit)) => Some((id, done, limit)),
                    _ => None,
                })
                .collect()
        };
        for (call_id, done, limit) in overdue {
            {
                let mut timed_out = self.timed_out.lock();
                timed_out.ids.insert(call_id);
                timed_out.order.push_back(call_id);
                while timed_out.order.len() > REMEMBERED_TIMEOUTS {
                    if let Some(old) = timed_out.order.pop_front() {
                        timed_out.ids.remove(&old);
                    }
                }
            }
            let actor = done.actor().clone();
            warn!(app = %self.name, actor = %actor, ?limit, "turn timed out; deactivating the actor");
            done.fail(CallError::TurnTimedOut { actor, limit });
        }
    }

    /// Tells the app to stop each running turn whose caller stopped waiting
    /// (once per turn): no one reads its reply, and the actor's next turns
    /// wait behind it.
    pub(super) fn cancel_abandoned_turns(&self) {
        if !self.accepts_cancel {
            return;
        }
        let abandoned: Vec<u64> = self
            .pending
            .lock()
            .iter_mut()
            .filter_map(|(id, pending)| match pending {
                Pending::Turn(done, ..) if done.caller_left() => done.cancelling().then_some(*id),
                _ => None,
            })
            .collect();
        let outbound = self.outbound.lock();
        let Some(tx) = outbound.as_ref() else {
            return;
        };
        for call_id in abandoned {
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
