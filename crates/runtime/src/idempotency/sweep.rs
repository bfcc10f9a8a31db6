//! Expiring call records past the retention window: in the store, every
//! actor's (a bounded delete per round, repeated while it fills up), and in
//! memory, the live actors'.

use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, warn};

use crate::shared::Shared;
use crate::shutdown::Stage;

/// Records deleted per store call; a full round asks again at once.
const BATCH: usize = 10_000;

impl Shared {
    /// Runs until the runtime stops: one sweep per `every`.
    pub(crate) async fn sweep_records(self: Arc<Self>, every: Duration) {
        let stopping = self.shutdown.reached(Stage::Stopping);
        tokio::pin!(stopping);
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                () = &mut stopping => return,
            }
            let now = crate::clock::unix_now_ms();
            self.records.prune(now);
            // Activations load keys without a flush: bound those too.
            self.flusher.shed_records();
            let cutoff = self.records.cutoff(now);
            // Bounded: at most this many rounds per sweep, the rest next time.
            for _ in 0..100 {
                match self.flusher.store().expire_records(cutoff, BATCH).await {
                    Ok(n) => {
                        debug!(expired = n, "call records past retention deleted");
                        if n < BATCH as u64 {
                            break;
                        }
                    }
                    Err(e) => {
                        warn!(error = %e, "cannot expire old call records; trying again at the next sweep");
                        break;
                    }
                }
            }
        }
    }
}
