//! Load shedding for memory. Under a memory limit, a daemon whose resident
//! memory nears it refuses new work with RESOURCE_EXHAUSTED until it falls
//! back, instead of being killed by the kernel (which loses the state still
//! waiting for its write-behind flush) or stalling in reclaim at the limit
//! (seen on cgroup v1). Orleans sheds load the same way, from a memory
//! threshold.
//!
//! What is new work: a call from outside any turn (a client's, or one a peer
//! forwards for a client), and a reminder, alarm or timer being set. What
//! is not: calls made by a running turn (they carry its chain; refusing them
//! would fail work already under way), reminder and timer firings, reads,
//! deletes and everything the daemon does itself.
//!
//! Refusing work stops growth; it frees nothing. So when shedding begins,
//! and every ten seconds while it lasts, the daemon also gives memory back,
//! as Orleans deactivates activations under memory pressure: the actors
//! idle longest, and idle for a second at least, are deactivated (their
//! state flushed, their app told, as for `--max-activations`), as large a
//! share of the activations as memory is over the resume point, and the
//! live actors halve the memory that remembers their stored idempotency
//! keys. Ten seconds: the allocator
//! hands freed pages back to the kernel over about that long, so a reading
//! sooner would not show what the last give-back freed.
//!
//! The gate only keeps the readings and decides; `load_shedding` acts on
//! it, and the binary reads the process's memory (I/O) and hands each
//! reading to `Runtime::observe_memory`. Shedding
//! starts at the threshold and ends once memory is five points of the
//! limit below it, so a daemon hovering at the line does not flap.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::error::{CallError, MemoryPressure};

/// When to shed: at `percent` of `limit_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryShedding {
    pub limit_bytes: u64,
    /// 1 to 100.
    pub percent: u8,
}

impl MemoryShedding {
    /// The resident bytes from which new work is refused.
    pub fn shed_at_bytes(&self) -> u64 {
        self.bytes_at(self.percent)
    }

    /// `percent` of the limit, in bytes.
    fn bytes_at(&self, percent: u8) -> u64 {
        (self.limit_bytes / 100).saturating_mul(u64::from(percent))
    }

    /// Shedding ends below this percentage of the limit.
    pub fn resume_percent(&self) -> u8 {
        self.percent.saturating_sub(RESUME_POINTS)
    }
}

/// Points of the limit below the threshold at which shedding ends.
const RESUME_POINTS: u8 = 5;
/// Between two give-backs while shedding lasts.
const GIVE_BACK_EVERY_MS: u64 = 10_000;

/// A change of the gate's state, for the binary to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryTransition {
    /// Resident memory reached the threshold: new work is refused.
    Shedding { resident_bytes: u64 },
    /// It fell below the resume point: new work is taken again.
    Resumed { resident_bytes: u64 },
}

/// The gate's readings, for status and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryGateStatus {
    /// The threshold in percent of the limit; 0: no shedding.
    pub shed_percent: u8,
    pub shed_at_bytes: u64,
    /// Shedding ends below this percentage of the limit.
    pub resume_percent: u8,
    /// Refusing new work now.
    pub shedding: bool,
    /// Since start: requests refused, times shedding began, and actors
    /// deactivated to give memory back.
    pub refused: u64,
    pub episodes: u64,
    pub deactivated: u64,
}

/// What a reading calls for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Observed {
    pub(crate) transition: Option<MemoryTransition>,
    /// Give memory back: this share of the activations (0 to 1).
    pub(crate) give_back: Option<f64>,
}

#[derive(Debug, Default)]
pub(crate) struct MemoryGate {
    setting: Option<MemoryShedding>,
    shed_at: u64,
    resume_below: u64,
    shedding: AtomicBool,
    last_resident: AtomicU64,
    refused: AtomicU64,
    episodes: AtomicU64,
    deactivated: AtomicU64,
    /// When memory was last given back (`now_ms` of `observe`).
    gave_back_ms: AtomicU64,
}

impl MemoryGate {
    pub(crate) fn new(setting: Option<MemoryShedding>) -> Self {
        let Some(s) = setting else {
            return Self::default();
        };
        Self {
            setting,
            shed_at: s.shed_at_bytes(),
            resume_below: s.bytes_at(s.resume_percent()),
            ..Self::default()
        }
    }

    /// Takes a reading of resident memory at `now_ms` (any monotonic
    /// milliseconds); says when shedding begins or ends and when to give
    /// memory back.
    pub(crate) fn observe(&self, resident_bytes: u64, now_ms: u64) -> Observed {
        let mut observed = Observed {
            transition: None,
            give_back: None,
        };
        if self.setting.is_none() {
            return observed;
        }
        self.last_resident.store(resident_bytes, Ordering::Relaxed);
        let was = self.shedding.load(Ordering::Relaxed);
        if !was && resident_bytes >= self.shed_at {
            self.shedding.store(true, Ordering::Relaxed);
            self.episodes.fetch_add(1, Ordering::Relaxed);
            observed.transition = Some(MemoryTransition::Shedding { resident_bytes });
        } else if was && resident_bytes < self.resume_below {
            self.shedding.store(false, Ordering::Relaxed);
            observed.transition = Some(MemoryTransition::Resumed { resident_bytes });
            return observed;
        } else if !was {
            return observed;
        }
        let last = self.gave_back_ms.load(Ordering::Relaxed);
        if observed.transition.is_some() || now_ms.saturating_sub(last) >= GIVE_BACK_EVERY_MS {
            self.gave_back_ms.store(now_ms, Ordering::Relaxed);
            let over = resident_bytes.saturating_sub(self.resume_below);
            observed.give_back = Some(over as f64 / resident_bytes.max(1) as f64);
        }
        observed
    }

    /// Refuses new work while shedding. One load when not.
    pub(crate) fn admit(&self) -> Result<(), CallError> {
        if !self.shedding.load(Ordering::Relaxed) {
            return Ok(());
        }
        let Some(setting) = self.setting else {
            return Ok(());
        };
        self.refused.fetch_add(1, Ordering::Relaxed);
        Err(CallError::MemoryPressure(MemoryPressure {
            resident_bytes: self.last_resident.load(Ordering::Relaxed),
            limit_bytes: setting.limit_bytes,
            percent: setting.percent,
            resume_percent: setting.resume_percent(),
        }))
    }

    /// Counts actors deactivated to give memory back.
    pub(crate) fn deactivated(&self, actors: usize) {
        self.deactivated.fetch_add(actors as u64, Ordering::Relaxed);
    }

    pub(crate) fn status(&self) -> MemoryGateStatus {
        MemoryGateStatus {
            shed_percent: self.setting.map_or(0, |s| s.percent),
            shed_at_bytes: self.shed_at,
            resume_percent: self.setting.map_or(0, |s| s.resume_percent()),
            shedding: self.shedding.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            episodes: self.episodes.load(Ordering::Relaxed),
            deactivated: self.deactivated.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn gate(percent: u8) -> MemoryGate {
        MemoryGate::new(Some(MemoryShedding {
            limit_bytes: 100 * MIB,
            percent,
        }))
    }

    fn transition(gate: &MemoryGate, resident: u64) -> Option<MemoryTransition> {
        gate.observe(resident, 0).transition
    }

    #[test]
    fn sheds_from_the_threshold_until_five_points_below_it() -> Result<(), String> {
        let gate = gate(90);
        assert_eq!(transition(&gate, 89 * MIB), None);
        gate.admit().map_err(|e| e.to_string())?;
        assert_eq!(
            transition(&gate, 90 * MIB),
            Some(MemoryTransition::Shedding {
                resident_bytes: 90 * MIB
            })
        );
        let Err(CallError::MemoryPressure(p)) = gate.admit() else {
            return Err("a call was admitted at the threshold".into());
        };
        assert_eq!((p.percent, p.resume_percent), (90, 85));
        assert_eq!(p.resident_bytes, 90 * MIB);
        // Between the resume point and the threshold: still shedding.
        assert_eq!(transition(&gate, 86 * MIB), None);
        assert!(gate.admit().is_err());
        assert_eq!(
            transition(&gate, 84 * MIB),
            Some(MemoryTransition::Resumed {
                resident_bytes: 84 * MIB
            })
        );
        gate.admit().map_err(|e| e.to_string())?;
        // And up again: a second episode.
        assert_eq!(transition(&gate, 87 * MIB), None);
        assert!(transition(&gate, 95 * MIB).is_some());
        let status = gate.status();
        assert_eq!(
            (status.shedding, status.refused, status.episodes),
            (true, 2, 2)
        );
        assert_eq!(status.shed_at_bytes, 90 * MIB);
        Ok(())
    }

    #[test]
    fn memory_is_given_back_as_shedding_begins_and_every_ten_seconds_while_it_lasts() {
        let gate = gate(90);
        assert_eq!(gate.observe(80 * MIB, 1_000).give_back, None);
        // 100 MiB resident, the resume point at 85: 15% over it.
        let first = gate.observe(100 * MIB, 2_000).give_back.unwrap_or(0.0);
        assert!((first - 0.15).abs() < 1e-9, "{first}");
        assert_eq!(gate.observe(100 * MIB, 11_999).give_back, None);
        assert!(gate.observe(95 * MIB, 12_000).give_back.is_some());
        // Back under the resume point: nothing to give.
        let resumed = gate.observe(80 * MIB, 30_000);
        assert!(resumed.transition.is_some());
        assert_eq!(resumed.give_back, None);
        // A new episode gives back at once, however soon.
        assert!(gate.observe(91 * MIB, 30_100).give_back.is_some());
    }

    #[test]
    fn without_a_limit_nothing_is_shed() {
        let gate = MemoryGate::new(None);
        assert_eq!(
            gate.observe(u64::MAX, 0),
            Observed {
                transition: None,
                give_back: None
            }
        );
        assert!(gate.admit().is_ok());
        assert_eq!(gate.status(), MemoryGateStatus::default());
    }

    #[test]
    fn a_low_threshold_resumes_at_zero_at_worst() -> Result<(), String> {
        let gate = gate(3);
        assert!(transition(&gate, 3 * MIB).is_some());
        // The resume point saturates at 0: nothing is below it.
        assert_eq!(transition(&gate, 0), None);
        let Err(CallError::MemoryPressure(p)) = gate.admit() else {
            return Err("admitted while shedding".into());
        };
        assert_eq!(p.resume_percent, 0);
        Ok(())
    }
}
