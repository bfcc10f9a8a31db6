//! The store's size and its backups as OpenMetrics families, so that an
//! operator can alert on a data directory that grows or on backups that
//! stopped succeeding (`troupe backup` run by cron, say).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

/// What this daemon's backups did since it started; shared by the admin API,
/// which counts them, and the metrics endpoint, which shows them.
#[derive(Debug, Clone, Default)]
pub struct StoreMetrics(Arc<Counts>);

#[derive(Debug, Default)]
struct Counts {
    succeeded: AtomicU64,
    failed: AtomicU64,
    /// Of the last backup that succeeded (0: none yet).
    last_success_unix_ms: AtomicU64,
    last_pause_us: AtomicU64,
    last_bytes: AtomicU64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: &'static str,
}

impl StoreMetrics {
    /// A backup of `bytes` that held the store's writes for `paused` in all.
    pub fn backed_up(&self, paused: Duration, bytes: u64) {
        let c = &self.0;
        c.succeeded.fetch_add(1, Ordering::Relaxed);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        c.last_success_unix_ms.store(now, Ordering::Relaxed);
        let pause = u64::try_from(paused.as_micros()).unwrap_or(u64::MAX);
        c.last_pause_us.store(pause, Ordering::Relaxed);
        c.last_bytes.store(bytes, Ordering::Relaxed);
    }

    /// A backup asked for and not delivered (refused, or failed).
    pub fn backup_failed(&self) {
        self.0.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Appends the families to `out`, OpenMetrics text ending in `# EOF`;
    /// `store_bytes` from `StateStore::size_on_disk` (left out when
    /// unknown).
    pub fn encode(&self, store_bytes: Option<u64>, out: &mut String) -> std::fmt::Result {
        let c = &self.0;
        let mut registry = Registry::with_prefix("troupe");
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        if let Some(bytes) = store_bytes {
            let size = Gauge::<i64>::default();
            size.set(gauge(bytes));
            registry.register_with_unit(
                "store_size",
                "What the state store takes on disk (sled: its files under --data-dir)",
                Unit::Bytes,
                size,
            );
        }
        let backups = Family::<Outcome, Counter>::default();
        backups
            .get_or_create(&Outcome { outcome: "ok" })
            .inc_by(c.succeeded.load(Ordering::Relaxed));
        backups
            .get_or_create(&Outcome { outcome: "failed" })
            .inc_by(c.failed.load(Ordering::Relaxed));
        registry.register(
            "backups",
            "Backups of the store asked of this daemon (troupe backup), by outcome",
            backups,
        );
        let last_success = Gauge::<f64, AtomicU64>::default();
        last_success.set(c.last_success_unix_ms.load(Ordering::Relaxed) as f64 / 1000.0);
        registry.register_with_unit(
            "backup_last_success_timestamp",
            "When the last backup that succeeded finished, in unix seconds (0: none since start)",
            Unit::Seconds,
            last_success,
        );
        let pause = Gauge::<f64, AtomicU64>::default();
        pause.set(c.last_pause_us.load(Ordering::Relaxed) as f64 / 1e6);
        registry.register_with_unit(
            "backup_last_writes_paused",
            "How long the last backup that succeeded held the store's writes (to start and end its log of the writes made while it read)",
            Unit::Seconds,
            pause,
        );
        let size = Gauge::<i64>::default();
        size.set(gauge(c.last_bytes.load(Ordering::Relaxed)));
        registry.register_with_unit(
            "backup_last_size",
            "The size of the last backup that succeeded",
            Unit::Bytes,
            size,
        );
        prometheus_client::encoding::text::encode(out, &registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_families_follow_the_backups() -> std::fmt::Result {
        let metrics = StoreMetrics::default();
        let mut before = String::new();
        metrics.encode(None, &mut before)?;
        assert!(
            before.contains("troupe_backups_total{outcome=\"ok\"} 0"),
            "{before}"
        );
        assert!(!before.contains("troupe_store_size_bytes"), "{before}");
        assert!(
            before.contains("troupe_backup_last_success_timestamp_seconds 0.0"),
            "{before}"
        );

        metrics.backed_up(Duration::from_millis(250), 4096);
        metrics.backup_failed();
        let mut after = String::new();
        metrics.encode(Some(12_345), &mut after)?;
        for line in [
            "troupe_store_size_bytes 12345",
            "troupe_backups_total{outcome=\"ok\"} 1",
            "troupe_backups_total{outcome=\"failed\"} 1",
            "troupe_backup_last_writes_paused_seconds 0.25",
            "troupe_backup_last_size_bytes 4096",
        ] {
            assert!(after.contains(line), "{line} missing from:\n{after}");
        }
        assert!(!after.contains("troupe_backup_last_success_timestamp_seconds 0.0"));
        assert!(after.ends_with("# EOF\n"), "{after}");
        Ok(())
    }
}
