//! Deactivations in waves: at most [`IN_FLIGHT`] actors are being
//! deactivated at once; the rest wait their turn, in order. A sweep that
//! finds 200k actors idle (they were all activated by one burst), or a
//! shutdown, would otherwise ask the app for 200k deactivations in one go,
//! and the answers, each a few bytes, come back as a flood the app stream
//! has to buffer before the daemon reads them.

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::activation::{Activation, Status};
use crate::types::DeactivateReason;

/// Deactivations under way at once, across the daemon. Their answers then
/// fit what HTTP/2 buffers for a reader that falls behind, with room.
pub(crate) const IN_FLIGHT: usize = 1024;

#[derive(Debug, Default)]
pub(crate) struct Waves {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    in_flight: usize,
    waiting: VecDeque<(Arc<Activation>, DeactivateReason)>,
}

impl Waves {
    /// Whether `act` may start deactivating now (it then holds a place
    /// until [`Waves::finished`]); if not, it waits in the queue.
    pub(crate) fn admit(&self, act: &Arc<Activation>, reason: DeactivateReason) -> bool {
        let mut state = self.state.lock();
        if state.in_flight < IN_FLIGHT {
            state.in_flight += 1;
            true
        } else {
            state.waiting.push_back((act.clone(), reason));
            false
        }
    }

    /// A deactivation that held a place ended: the next one to start,
    /// which takes the place over. Activations dropped meanwhile (fenced)
    /// are skipped.
    pub(crate) fn finished(&self) -> Option<(Arc<Activation>, DeactivateReason)> {
        let mut state = self.state.lock();
        while let Some((act, reason)) = state.waiting.pop_front() {
            if act.inner.lock().status != Status::Gone {
                return Some((act, reason));
            }
        }
        state.in_flight = state.in_flight.saturating_sub(1);
        // The queue of a burst is not kept once it is worked off.
        if state.waiting.capacity() > IN_FLIGHT {
            state.waiting.shrink_to_fit();
        }
        None
    }

    /// Deactivations under way or waiting: activations on their way out.
    pub(crate) fn pending(&self) -> usize {
        let state = self.state.lock();
        state.in_flight.saturating_add(state.waiting.len())
    }

    /// Deactivations waiting for a place.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.state.lock().waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ActorId;

    fn act(i: usize) -> Arc<Activation> {
        Arc::new(Activation::new(ActorId::new("t", i.to_string()), 0))
    }

    #[test]
    fn at_most_in_flight_start_and_each_end_starts_the_next_in_order() {
        let waves = Waves::default();
        let acts: Vec<_> = (0..IN_FLIGHT + 2).map(act).collect();
        let started = acts
            .iter()
            .filter(|a| waves.admit(a, DeactivateReason::Idle))
            .count();
        assert_eq!(started, IN_FLIGHT);
        assert_eq!(waves.waiting(), 2);
        // A waiting one that was dropped meanwhile is skipped.
        acts[IN_FLIGHT].inner.lock().status = Status::Gone;
        let next = waves.finished().map(|(a, _)| a.id.clone());
        assert_eq!(next, Some(acts[IN_FLIGHT + 1].id.clone()));
        assert_eq!(waves.finished().map(|(a, _)| a.id.clone()), None);
        assert_eq!(waves.waiting(), 0);
    }
}
