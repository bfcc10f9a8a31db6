//! Hands the runtime's memory gate a reading of the daemon's resident
//! memory ten times a second, and logs when it starts and stops shedding
//! load (`troupe_runtime::MemoryShedding`). The gate decides; this is the
//! I/O at the edge. At 13,000 keyed calls a second the daemon grew about
//! 3 MB a second under a 256 MiB limit (bench/keyed_memory.sh), so a tenth
//! of a second between readings leaves the threshold's 10% of headroom
//! many times what can grow in between.
//!
//! At start it warns when the threshold leaves less than the daemon takes
//! idle: such a daemon refuses calls at light load.

use std::time::Duration;

use tokio::task::JoinHandle;
use tracing::{info, warn};
use troupe_runtime::{MemoryShedding, MemoryTransition, Runtime};

use crate::cli::render::bytes;

const EVERY: Duration = Duration::from_millis(100);
/// What a daemon keeps resident idle with an app attached and actors
/// active: 20 to 40 MB measured (release build, sled); about 15 MB alone.
const IDLE_RESIDENT_BYTES: u64 = 40 << 20;
/// The smallest limit the warning suggests: its 80% (the default
/// threshold) leaves room above an idle daemon.
const SUGGESTED_LIMIT_MIB: u64 = 64;

/// The threshold in bytes when it is below what the daemon takes idle.
fn sheds_near_idle(shedding: &MemoryShedding) -> Option<u64> {
    let at = shedding.shed_at_bytes();
    (at < IDLE_RESIDENT_BYTES).then_some(at)
}

/// Starts watching when the runtime sheds load at all (under a limit, with
/// a threshold); `None` otherwise. Abort the handle to stop.
pub fn start(runtime: Runtime) -> Option<JoinHandle<()>> {
    let shedding = runtime.config().memory_shedding?;
    if let Some(shed_at) = sheds_near_idle(&shedding) {
        warn!(
            limit_bytes = shedding.limit_bytes,
            shed_at_bytes = shed_at,
            percent = shedding.percent,
            "the memory limit leaves less room than the daemon takes idle: it refuses new calls \
             from {} resident ({}% of its {} limit), and with an app attached it \
             takes 20 to 40 MB idle, so it may refuse calls at light load; give it a memory \
             limit of at least {SUGGESTED_LIMIT_MIB} MiB, or a higher --memory-shed-percent",
            bytes(shed_at),
            shedding.percent,
            bytes(shedding.limit_bytes),
        );
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_threshold_below_an_idle_daemon_is_told() {
        let at = |limit_mib: u64, percent: u8| {
            sheds_near_idle(&MemoryShedding {
                limit_bytes: limit_mib * MIB,
                percent,
            })
        };
        assert_eq!(at(256, 80), None);
        assert_eq!(at(64, 80), None, "the limit the warning suggests");
        assert_eq!(at(48, 80), Some(48 * MIB / 100 * 80));
        assert_eq!(at(256, 1), Some(256 * MIB / 100));
        assert_eq!(at(50, 80), None, "exactly 40 MiB");
        assert_eq!(at(49, 80), Some(49 * MIB / 100 * 80), "just under it");
    }
}
