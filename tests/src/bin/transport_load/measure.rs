//! What `run` reports: the processes' and the machine's CPU over the timed
//! phase, latency percentiles, and one JSON line per group of callers.

use std::time::Duration;

use anyhow::Context;

use super::{Group, Measured};

/// utime + stime of `pids` together, in clock ticks; `None` without pids.
pub(crate) fn cpu_ticks(pids: &[u32]) -> anyhow::Result<Option<u64>> {
    if pids.is_empty() {
        return Ok(None);
    }
    let mut total = 0;
    for pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .with_context(|| format!("reading /proc/{pid}/stat"))?;
        // "PID (COMM) STATE PPID ...": fields after the command name, from
        // STATE (field 3); utime and stime are fields 14 and 15.
        let rest = stat
            .rsplit_once(')')
            .map(|(_, r)| r)
            .context("unexpected /proc/PID/stat")?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        for i in [11, 12] {
            total += fields
                .get(i)
                .and_then(|v| v.parse::<u64>().ok())
                .context("unexpected /proc/PID/stat")?;
        }
    }
    Ok(Some(total))
}

/// The machine's (busy, all) clock ticks summed over its CPUs, and how many
/// CPUs: busy is user, system, irq, softirq and steal time, without `nice`d
/// work (a niced build elsewhere yields to this load); all adds idle,
/// iowait and nice.
pub(crate) fn host_ticks() -> anyhow::Result<(u64, u64, usize)> {
    let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let mut lines = stat.lines();
    let total: Vec<u64> = lines
        .next()
        .and_then(|l| l.strip_prefix("cpu "))
        .context("unexpected /proc/stat")?
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    let cpus = lines.filter(|l| l.starts_with("cpu")).count().max(1);
    let at = |i: usize| total.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal (guest is in user)
    let busy = at(0) + at(2) + at(5) + at(6) + at(7);
    let all = busy + at(1) + at(3) + at(4);
    Ok((busy, all, cpus))
}

fn percentile_ms(sorted_us: &[u64], p: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let rank = ((p * sorted_us.len() as f64).ceil() as usize).clamp(1, sorted_us.len());
    sorted_us[rank - 1] as f64 / 1000.0
}

pub(crate) fn report(
    group: &Group,
    pairs: usize,
    payload: usize,
    mut m: Measured,
    cpu: Option<u64>,
    host_busy_cores: Option<f64>,
    warmup: Duration,
) {
    m.latencies_us.sort_unstable();
    let ok = m.latencies_us.len();
    let steady = steady_state(&m, group, warmup);
    let elapsed = match (m.first_start, m.last_end) {
        (Some(a), Some(b)) => (b - a).as_secs_f64(),
        _ => 0.0,
    };
    let errors: serde_json::Map<String, serde_json::Value> = m
        .error_codes
        .into_iter()
        .map(|(code, (n, msg))| (code, serde_json::json!({"count": n, "sample": msg})))
        .collect();
    let line = serde_json::json!({
        "group": group.name,
        "pairs": pairs,
        "payload": payload,
        "ok": ok,
        "errors": m.errors,
        "error_codes": errors,
        "elapsed_s": elapsed,
        "p50_ms": percentile_ms(&m.latencies_us, 0.50),
        "p99_ms": percentile_ms(&m.latencies_us, 0.99),
        // The shape of the distribution, for telling a slow tail from a
        // shifted whole when a p99 is off.
        "p10_ms": percentile_ms(&m.latencies_us, 0.10),
        "p90_ms": percentile_ms(&m.latencies_us, 0.90),
        "max_ms": percentile_ms(&m.latencies_us, 1.0),
        "cpu_ticks": cpu,
        "host_busy_cores": host_busy_cores,
        "steady_ok": steady.map(|(ok, _)| ok),
        "steady_s": steady.map(|(_, window)| window.as_secs_f64()),
    });
    println!("{line}");
}

/// The calls answered in the steady window (from `warmup` after the first
/// call to when the first caller stopped starting calls) and its length;
/// `None` without a warm-up or when that window is under a second.
fn steady_state(m: &Measured, group: &Group, warmup: Duration) -> Option<(usize, Duration)> {
    if warmup.is_zero() {
        return None;
    }
    let from = m.first_start?.checked_add(warmup)?;
    let to = *group.stopped_starting.get()?;
    let window = to.checked_duration_since(from)?;
    if window < Duration::from_secs(1) {
        return None;
    }
    let ok = m
        .answered_at
        .iter()
        .filter(|at| (from..to).contains(*at))
        .count();
    Some((ok, window))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;
    use std::sync::{Arc, OnceLock};
    use std::time::{Duration, Instant};

    use super::*;

    fn group(stopped_starting: Option<Instant>) -> Group {
        let stopped = OnceLock::new();
        if let Some(at) = stopped_starting {
            stopped.get_or_init(|| at);
        }
        Group {
            name: "main",
            actors: Vec::new(),
            payload: bytes::Bytes::new(),
            started: Arc::new(AtomicU64::new(0)),
            messages: 0,
            stopped_starting: Arc::new(stopped),
        }
    }

    #[test]
    fn the_steady_state_leaves_out_the_ramp_and_the_drain() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let m = Measured {
            first_start: Some(start),
            // Two during the warm-up, three in the window, two in the drain.
            answered_at: [500, 900, 1_000, 2_000, 3_999, 4_000, 4_500]
                .into_iter()
                .map(at)
                .collect(),
            ..Measured::default()
        };
        let g = group(Some(at(4_000)));
        assert_eq!(
            steady_state(&m, &g, Duration::from_secs(1)),
            Some((3, Duration::from_secs(3)))
        );
        // No warm-up asked, a window under a second, or callers that never
        // stopped: no steady figure.
        assert_eq!(steady_state(&m, &g, Duration::ZERO), None);
        assert_eq!(steady_state(&m, &g, Duration::from_millis(3_500)), None);
        assert_eq!(steady_state(&m, &group(None), Duration::from_secs(1)), None);
    }
}
