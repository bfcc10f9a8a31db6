//! Hands the runtime's memory gate a reading of the daemon's resident
//! memory ten times a second, and logs when it starts and stops shedding
//! load (`troupe_runtime::MemoryShedding`). The gate decides; this is the
//! I/O at the edge. At 13,000 keyed calls a second the daemon grew about
//! 3 MB a second under a 256 MiB limit (bench/keyed_memory.sh), so a tenth
//! of a second between readings leaves the threshold's 10% of headroom
//! many times what can grow in between.

use std::time::Duration;

use tokio::task::JoinHandle;
use tracing::{info, warn};
use troupe_runtime::{MemoryTransition, Runtime};

const EVERY: Duration = Duration::from_millis(100);

/// Starts watching when the runtime sheds load at all (under a limit, with
/// a threshold); `None` otherwise. Abort the handle to stop.
pub fn start(runtime: Runtime) -> Option<JoinHandle<()>> {
    let shedding = runtime.config().memory_shedding?;
    crate::process_stats::resident_bytes()?;
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(resident) = crate::process_stats::resident_bytes() else {
                continue;
            };
            match runtime.observe_memory(resident) {
                Some(MemoryTransition::Shedding { resident_bytes }) => warn!(
                    resident_bytes,
                    limit_bytes = shedding.limit_bytes,
                    percent = shedding.percent,
                    "resident memory reached the shedding threshold: refusing new calls with \
                     RESOURCE_EXHAUSTED until it falls five points below (--memory-shed-percent)"
                ),
                Some(MemoryTransition::Resumed { resident_bytes }) => info!(
                    resident_bytes,
                    limit_bytes = shedding.limit_bytes,
                    "resident memory fell back: taking new calls again"
                ),
                None => {}
            }
        }
    }))
}
