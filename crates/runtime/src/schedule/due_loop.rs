//! The scheduler's loop: hands what comes due to the firing workers in due
//! order, loads the next stretch of the due index beside the firings, and
//! starts over when owners change.

use std::cmp::Reverse;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tracing::warn;

use super::{empty_key, Due, Scheduler, HORIZON, MAX_IN_MEMORY};
use crate::error::CallError;
use crate::input::millis;

impl Scheduler {
    /// Owners changed (or, now and then, might have): forget what is in
    /// memory and load again from the start, keeping only reminders of
    /// actors this daemon owns now.
    pub(crate) fn reload(self: &Arc<Self>, owners_changed: bool) {
        {
            let mut q = self.queue.lock();
            q.heap.clear();
            q.live.clear();
            q.cursor = (0, empty_key());
            q.more = true;
            q.window.forget();
        }
        // Another daemon may have paused or resumed the reminders this one
        // owns now: writes wait for the read rather than answer from what
        // was known. Otherwise what is known is current for the actors this
        // daemon owns (their pauses came through it), and the read only
        // brings the count up to date.
        if owners_changed {
            self.forget_paused();
        }
        self.refresh_paused();
        self.wake.notify_one();
    }

    /// Hands what comes due to `due`, in due order, until `stop` completes
    /// (or nobody takes firings any more).
    pub(crate) async fn run(
        self: Arc<Self>,
        due: mpsc::UnboundedSender<Due>,
        stop: impl Future<Output = ()> + Send + 'static,
    ) {
        tokio::pin!(stop);
        self.refresh_paused();
        // A test clock jumps: wake and look again (nothing else would).
        let mut jumps = self.time.jumps();
        // Loads run beside the firings: a load of a few thousand records
        // takes milliseconds, tens while sled merges the nodes of a mass
        // delete, and awaiting it here held every due firing that long.
        let mut loading: Option<Loading> = None;
        let mut load_again_at = 0u64;
        loop {
            if loading.as_ref().is_some_and(|l| l.0.is_finished()) {
                if let Some(mut finished) = loading.take() {
                    let failed = match (&mut finished.0).await {
                        Ok(Ok(())) => None,
                        Ok(Err(e)) => Some(e.to_string()),
                        Err(e) => Some(e.to_string()),
                    };
                    if let Some(error) = failed {
                        warn!(%error, "loading due reminders failed; retrying in a second");
                        load_again_at = self.time.now_ms().saturating_add(1000);
                    }
                }
            }
            let now = self.time.now_ms();
            let (next, needs_load) = {
                let q = self.queue.lock();
                let horizon_edge = q.cursor.0.saturating_sub(HORIZON.as_millis() as u64 / 2);
                // With memory full, a load has no room: nothing to do at
                // the horizon's edge (looking again every millisecond there
                // only spent a worker's time) until firings make room.
                let room = q.live.len() < MAX_IN_MEMORY;
                let needs_load =
                    (q.more && q.live.len() < MAX_IN_MEMORY / 2) || (now >= horizon_edge && room);
                (q.heap.peek().map(|Reverse((d, _))| *d), needs_load)
            };
            if needs_load && loading.is_none() && now >= load_again_at {
                let this = self.clone();
                loading = Some(Loading(tokio::spawn(async move {
                    let loaded = this.load().await;
                    // It may have found earlier work: look again.
                    this.wake.notify_one();
                    loaded
                })));
            }
            match next {
                Some(at) if at <= now => {
                    tokio::select! {
                        handed = self.pop_due(now, &due) => if !handed { return },
                        () = &mut stop => return,
                    }
                }
                _ => {
                    let load_at = {
                        let q = self.queue.lock();
                        if loading.is_some() {
                            // Its end wakes this loop.
                            now.saturating_add(millis(HORIZON))
                        } else if now < load_again_at {
                            load_again_at
                        } else if q.live.len() < MAX_IN_MEMORY {
                            q.cursor.0.saturating_sub(HORIZON.as_millis() as u64 / 2)
                        } else {
                            // Full: only a firing makes room, at `next`.
                            now.saturating_add(millis(HORIZON))
                        }
                    };
                    let until = next.map_or(load_at, |d| d.min(load_at)).max(now + 1);
                    let wait = Duration::from_millis(until - now);
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = self.wake.notified() => {}
                        jumped = jumped(&mut jumps) => if !jumped { jumps = None },
                        () = &mut stop => return,
                    }
                }
            }
        }
    }
}

/// A load in flight, ended when the scheduler's loop ends.
struct Loading(tokio::task::JoinHandle<Result<(), CallError>>);

impl Drop for Loading {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Waits until the time source jumps; `false` once it never will again.
/// Pends forever for a source that does not jump.
async fn jumped(jumps: &mut Option<tokio::sync::watch::Receiver<u64>>) -> bool {
    match jumps {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}
