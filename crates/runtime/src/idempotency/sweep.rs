//! Expiring call records past the retention window: in the store, every
//! actor's (a bounded delete per round, repeated while it fills up), and in
//! memory, the live actors'.

use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, warn};

use crate::shared::Shared;
use crate::shutdown::Stage;

/// Records deleted per store call; a full round asks again at once. On
/// sled each delete pages in the leaf that holds its record, and a batch's
/// pages stay in memory until it is applied: with batches of 10,000, a
/// daemon in a 192 MiB cgroup deleting SDK calls' records (2,000 calls/s,
/// kept 70 s; `RATE=2000 KEY_RETENTION_MS=70000 LIMIT_MB=192 ROUNDS=6
/// bench/keyed_memory.sh`, two runs each) peaked at 162–175 MB resident
/// and refused calls from its 200,000th; with batches of 1,000 it peaked
/// at 130–138 MB and refused none in 600,000.
const BATCH: usize = 1_000;
/// Store calls per sweep at most, the rest next time: a million records.
const ROUNDS: usize = 1_000;

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
            for _ in 0..ROUNDS {
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
