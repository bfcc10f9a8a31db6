//! The daemon process's own figures — memory, CPU, threads, file
//! descriptors — as `/metrics` families under the names every Prometheus
//! client library's process collector uses (`process_*`), so the dashboards
//! and alerts written for those work unchanged; and the memory limit the
//! daemon runs under (`troupe_memory_limit_bytes`), to alert before a
//! sidecar is killed for memory. `troupe status` shows the resident memory
//! against the limit. Read from `/proc` at each scrape (Linux; elsewhere
//! the families are absent).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

/// One reading of the process's figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessStats {
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    /// User and system CPU since the process started.
    pub cpu_seconds: f64,
    pub threads: u64,
    pub open_fds: u64,
    /// The soft limit on open files; `None`: unlimited.
    pub max_fds: Option<u64>,
    /// When the process started, in seconds since the Unix epoch.
    pub start_time_seconds: f64,
}

/// The process's figures now; `None` where `/proc` cannot tell them.
#[cfg(target_os = "linux")]
pub fn read() -> Option<ProcessStats> {
    use procfs::process::{LimitValue, Process};

    let process = Process::myself().ok()?;
    let stat = process.stat().ok()?;
    let ticks = procfs::ticks_per_second().max(1) as f64;
    let started_after_boot = stat.starttime as f64 / ticks;
    let boot = procfs::boot_time_secs().ok()? as f64;
    Some(ProcessStats {
        resident_bytes: stat.rss.saturating_mul(procfs::page_size()),
        virtual_bytes: stat.vsize,
        cpu_seconds: stat.utime.saturating_add(stat.stime) as f64 / ticks,
        threads: u64::try_from(stat.num_threads).unwrap_or(0),
        open_fds: process
            .fd_count()
            .ok()
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0),
        max_fds: process
            .limits()
            .ok()
            .and_then(|l| match l.max_open_files.soft_limit {
                LimitValue::Value(n) => Some(n),
                LimitValue::Unlimited => None,
            }),
        start_time_seconds: boot + started_after_boot,
    })
}

/// No `/proc` to read.
#[cfg(not(target_os = "linux"))]
pub fn read() -> Option<ProcessStats> {
    None
}

/// The process's resident memory now: what `troupe status` shows, without
/// the rest of [`read`] (its file descriptors are walked, not counted).
#[cfg(target_os = "linux")]
pub fn resident_bytes() -> Option<u64> {
    let stat = procfs::process::Process::myself().ok()?.stat().ok()?;
    Some(stat.rss.saturating_mul(procfs::page_size()))
}

#[cfg(not(target_os = "linux"))]
pub fn resident_bytes() -> Option<u64> {
    None
}

/// Appends the process families (from `stats`, when read) and the memory
/// limit (when there is one) to `out`, OpenMetrics text ending in `# EOF`.
pub fn encode(
    stats: Option<&ProcessStats>,
    memory_limit: Option<u64>,
    out: &mut String,
) -> std::fmt::Result {
    let gauge = |n: u64| {
        let g = Gauge::<i64>::default();
        g.set(i64::try_from(n).unwrap_or(i64::MAX));
        g
    };
    let float = |v: f64| {
        let g = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        g.set(v);
        g
    };
    let mut process = Registry::with_prefix("process");
    if let Some(s) = stats {
        process.register_with_unit(
            "resident_memory",
            "Resident memory size",
            Unit::Bytes,
            gauge(s.resident_bytes),
        );
        process.register_with_unit(
            "virtual_memory",
            "Virtual memory size",
            Unit::Bytes,
            gauge(s.virtual_bytes),
        );
        let cpu = Counter::<f64, std::sync::atomic::AtomicU64>::default();
        cpu.inc_by(s.cpu_seconds);
        process.register_with_unit(
            "cpu",
            "Total user and system CPU time spent",
            Unit::Seconds,
            cpu,
        );
        process.register("threads", "Threads of the process", gauge(s.threads));
        process.register("open_fds", "Open file descriptors", gauge(s.open_fds));
        if let Some(max) = s.max_fds {
            process.register("max_fds", "The limit on open file descriptors", gauge(max));
        }
        process.register_with_unit(
            "start_time",
            "Start time of the process since the Unix epoch",
            Unit::Seconds,
            float(s.start_time_seconds),
        );
    }
    let mut troupe = Registry::with_prefix("troupe");
    if let Some(limit) = memory_limit {
        troupe.register_with_unit(
            "memory_limit",
            "The memory limit the daemon runs under (its cgroup's), which the memory bounds' defaults follow",
            Unit::Bytes,
            gauge(limit),
        );
    }
    prometheus_client::encoding::text::encode_registry(out, &process)?;
    prometheus_client::encoding::text::encode_registry(out, &troupe)?;
    prometheus_client::encoding::text::encode_eof(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn the_process_reads_its_own_figures() {
        let Some(s) = read() else {
            panic!("no figures from /proc/self");
        };
        assert!(s.resident_bytes > 0, "{s:?}");
        assert!(resident_bytes().is_some_and(|r| r > 0));
        assert!(s.virtual_bytes >= s.resident_bytes, "{s:?}");
        assert!(s.threads >= 1 && s.open_fds >= 1, "{s:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        // Started within the last day, and not in the future (ticks round).
        assert!(
            s.start_time_seconds <= now + 1.0 && s.start_time_seconds > now - 86_400.0,
            "{s:?}, now {now}"
        );
    }

    #[test]
    fn families_carry_the_names_process_collectors_use() -> std::fmt::Result {
        let stats = ProcessStats {
            resident_bytes: 85 << 20,
            virtual_bytes: 1 << 30,
            cpu_seconds: 12.5,
            threads: 7,
            open_fds: 40,
            max_fds: Some(1024),
            start_time_seconds: 1_796_000_000.0,
        };
        let mut out = String::new();
        encode(Some(&stats), Some(256 << 20), &mut out)?;
        for line in [
            "process_resident_memory_bytes 89128960\n",
            "process_virtual_memory_bytes 1073741824\n",
            "process_cpu_seconds_total 12.5\n",
            "process_threads 7\n",
            "process_open_fds 40\n",
            "process_max_fds 1024\n",
            "process_start_time_seconds 1796000000.0\n",
            "troupe_memory_limit_bytes 268435456\n",
        ] {
            assert!(out.contains(line), "no {line:?} in\n{out}");
        }
        assert!(out.ends_with("# EOF\n"), "{out}");
        let mut none = String::new();
        encode(None, None, &mut none)?;
        assert_eq!(none, "# EOF\n");
        Ok(())
    }
}
