//! One million durable reminders through the real scheduler, in process,
//! stored in sled (the daemon's default store).
//!
//! Phases: register 1M reminders (concurrently, so group commit batches them),
//! restart (new runtime on the same store), then let them fire, due across a
//! window so that demand is ~50k firings/s. Prints registrations/s, memory,
//! firings/s sustained, lateness p50/p99 and time from restart to the first
//! firing, against Dapr 1.17 (667 registrations/s, 15,463 firings/s).
//!
//! `cargo bench -p troupe-runtime --bench reminders -- [--reminders N] [--window-secs S]
//! [--state-on-sled] [--calendar]`
//!
//! State is kept in memory unless `--state-on-sled`: then it lives in the
//! same sled database as the reminders, as in the daemon, and each firing
//! writes one key of its actor's state, so the write-behind flushes compete
//! with the reminders for sled (whose batches take a process-wide lock).
//!
//! `--calendar` sets every reminder alike, as apps set a daily digest for
//! each user: the cron pattern `0 * * * * *` (each minute), once, with a
//! jitter of the window. Jitter alone spreads them: without it all would be
//! due in one instant. Each firing's due time is the minute plus the delay
//! the reminder's jitter chose (`troupe_runtime::jitter_delay`).

mod common;

use common::arg;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use troupe_placement::SingleNode;
use troupe_runtime::{jitter_delay, CronSchedule};
use troupe_runtime::{
    ActorId, ContentType, FnHost, MissedFirings, Payload, ReminderSpec, RetryPolicy, Runtime,
    RuntimeConfig, StateChange, TurnKind, TurnOutcome, TypeSpec,
};
use troupe_storage::MemoryStore;
use troupe_storage_sled::{SledReminders, SledStore};

/// The daemon's allocator and settings (crates/troupe/src/main.rs), so that
/// the time and the RSS measured here are the daemon's: glibc's malloc spent
/// a quarter of this bench's CPU in its free lists and held on to what
/// firings freed.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

// jemalloc reads this symbol by name, before the first allocation.
#[allow(non_upper_case_globals, unsafe_code)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8] =
    b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,oversize_threshold:0\0";

const DAPR_REGISTRATIONS: f64 = 667.0;
const DAPR_FIRINGS: f64 = 15_463.0;

/// Whether `--state-on-sled` was given.
fn state_on_sled() -> bool {
    std::env::args().any(|a| a == "--state-on-sled")
}

/// With `--calendar`: the jitter every reminder is set with (the window).
fn calendar_jitter() -> Option<Duration> {
    std::env::args()
        .any(|a| a == "--calendar")
        .then(|| Duration::from_secs(arg("--window-secs", 20)))
}

fn rss_mb() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0.0);
    pages * 4096.0 / 1e6
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Firing observations: lateness of each firing (ms) and when the first came.
#[derive(Default)]
struct Seen {
    lateness_ms: Mutex<Vec<u32>>,
    fired: AtomicU64,
    first_at: Mutex<Option<Instant>>,
    last_at: Mutex<Option<Instant>>,
}

fn runtime(dir: &std::path::Path, seen: Arc<Seen>) -> Result<Runtime, String> {
    let sled = SledStore::open(dir).map_err(|e| e.to_string())?;
    let reminders = SledReminders::open(&sled).map_err(|e| e.to_string())?;
    let config = RuntimeConfig {
        max_pending_calls: 2_000_000,
        default_idle_timeout: Duration::from_secs(3600),
        ..RuntimeConfig::default()
    };
    let writes_state = state_on_sled();
    let state: Arc<dyn troupe_storage::StateStore> = if writes_state {
        Arc::new(sled.clone())
    } else {
        Arc::new(MemoryStore::new())
    };
    let rt = Runtime::create(config, state, Arc::new(reminders), Arc::new(SingleNode))
        .map_err(|e| e.to_string())?;
    rt.start();
    let jitter = calendar_jitter();
    let host = FnHost::new("bench", move |actor: &ActorId, req| {
        if req.kind == TurnKind::Reminder {
            // The payload carries the due time (a calendar reminder's: of its
            // match): lateness measured at the actor.
            let mut due =
                <[u8; 8]>::try_from(req.payload.data.as_ref()).map_or(0, u64::from_le_bytes);
            if let Some(jitter) = jitter {
                let delay = jitter_delay(actor, &req.name, jitter);
                due += delay.as_millis() as u64;
            }
            let late = unix_ms().saturating_sub(due);
            seen.lateness_ms
                .lock()
                .push(late.min(u64::from(u32::MAX)) as u32);
            seen.fired.fetch_add(1, Ordering::Relaxed);
            let now = Instant::now();
            seen.first_at.lock().get_or_insert(now);
            *seen.last_at.lock() = Some(now);
        }
        let changes = if writes_state && req.kind == TurnKind::Reminder {
            vec![StateChange::set("fired", req.payload.data.clone())]
        } else {
            Vec::new()
        };
        TurnOutcome {
            result: Ok(Payload::default()),
            changes,
        }
    });
    rt.register_host(
        Arc::new(host),
        vec![TypeSpec {
            name: "timer".into(),
            ..TypeSpec::default()
        }],
    )
    .map_err(|e| e.to_string())?;
    Ok(rt)
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let n = arg("--reminders", 1_000_000);
    let window_ms = arg("--window-secs", 20) * 1000;
    let actors = 100_000u64;
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => return eprintln!("temp dir: {e}"),
    };
    let seen = Arc::new(Seen::default());

    // Phase 1: registration. Due times start after registration is expected
    // to end (at the goal rate, with margin) and spread over the window.
    let mut fire_from = unix_ms() + n * 1000 / 40_000 + 15_000;
    let jitter = calendar_jitter();
    if jitter.is_some() {
        // The match: the first whole minute from then.
        fire_from = fire_from.div_ceil(60_000) * 60_000;
    }
    let (registration_secs, rss_after_registration) = {
        let tokio = match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
        {
            Ok(t) => t,
            Err(e) => return eprintln!("tokio: {e}"),
        };
        let result = tokio.block_on(async {
            let rt = runtime(dir.path(), seen.clone())?;
            let started = Instant::now();
            let tasks = 512u64;
            let mut handles = Vec::new();
            for t in 0..tasks {
                let rt = rt.clone();
                handles.push(tokio::spawn(async move {
                    let mut i = t;
                    while i < n {
                        let (due, cron) = match jitter {
                            None => (fire_from + i * window_ms / n, None),
                            Some(_) => (
                                fire_from,
                                Some(CronSchedule {
                                    pattern: "0 * * * * *".into(),
                                    time_zone: String::new(),
                                }),
                            ),
                        };
                        let spec = ReminderSpec {
                            actor: ActorId::new("timer", (i % actors).to_string()),
                            name: format!("r{i}"),
                            due_unix_ms: due,
                            period: None,
                            cron,
                            jitter,
                            repeat: jitter.map(|_| 1),
                            until_unix_ms: None,
                            payload: Payload {
                                data: Bytes::copy_from_slice(&due.to_le_bytes()),
                                content_type: ContentType::Bytes,
                            },
                            retry: RetryPolicy::default(),
                            missed: MissedFirings::FireOnce,
                        };
                        rt.set_reminder(spec).await.map_err(|e| e.to_string())?;
                        i += tasks;
                    }
                    Ok::<(), String>(())
                }));
            }
            for h in handles {
                h.await.map_err(|e| e.to_string())??;
            }
            let secs = started.elapsed().as_secs_f64();
            let count = rt.reminder_count().await.map_err(|e| e.to_string())?;
            if count != n {
                return Err(format!("{count} reminders stored, expected {n}"));
            }
            Ok::<_, String>((secs, rss_mb()))
        });
        match result {
            Ok(r) => r,
            Err(e) => return eprintln!("registration failed: {e}"),
        }
        // Dropping the tokio runtime ends every task: the "daemon" is down.
    };
    if unix_ms() >= fire_from {
        eprintln!("warning: registration ran into the firing window; lateness includes that");
    }

    // Phase 2: restart on the same store, then fire.
    let tokio = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(t) => t,
        Err(e) => return eprintln!("tokio: {e}"),
    };
    let result = tokio.block_on(async {
        let restarted = Instant::now();
        let rt = runtime(dir.path(), seen.clone())?;
        let reopen_ms = restarted.elapsed().as_secs_f64() * 1000.0;
        let deadline = Instant::now()
            + Duration::from_millis(fire_from.saturating_sub(unix_ms()) + window_ms + 120_000);
        while seen.fired.load(Ordering::Relaxed) < n && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let rss = rss_mb();
        drop(rt);
        Ok::<_, String>((reopen_ms, rss))
    });
    let (reopen_ms, rss_after_firing) = match result {
        Ok(r) => r,
        Err(e) => return eprintln!("firing phase failed: {e}"),
    };

    let fired = seen.fired.load(Ordering::Relaxed);
    let mut late = seen.lateness_ms.lock().clone();
    // Firings are recorded in the order they happened.
    let first_after_restart = late.first().copied().unwrap_or(0);
    late.sort_unstable();
    let span = match (*seen.first_at.lock(), *seen.last_at.lock()) {
        (Some(a), Some(b)) => (b - a).as_secs_f64().max(0.001),
        _ => 0.001,
    };
    let reg_rate = n as f64 / registration_secs;
    let fire_rate = fired as f64 / span;
    let demand = n as f64 / (window_ms as f64 / 1000.0);
    println!();
    let state = if state_on_sled() {
        "state in the same sled database, one key written per firing"
    } else {
        "state in memory"
    };
    let kind = match jitter {
        None => "one-shot, due spread over the window".to_owned(),
        Some(j) => format!("all alike: cron 0 * * * * *, once, jitter {}s", j.as_secs()),
    };
    println!(
        "reminders: {n} registered on {actors} actors ({kind}), sled store, {state}, 2 worker threads"
    );
    println!(
        "{:<40} {:>14} {:>12} {:>8}",
        "metric", "troupe", "Dapr 1.17", "ratio"
    );
    println!(
        "{:<40} {:>14.0} {:>12.0} {:>7.1}x",
        "registrations/s",
        reg_rate,
        DAPR_REGISTRATIONS,
        reg_rate / DAPR_REGISTRATIONS
    );
    println!(
        "{:<40} {:>14.0} {:>12.0} {:>7.1}x",
        "firings/s sustained",
        fire_rate,
        DAPR_FIRINGS,
        fire_rate / DAPR_FIRINGS
    );
    println!(
        "{:<40} {:>14}",
        "firings (of registered)",
        format!("{fired}/{n}")
    );
    println!("{:<40} {:>14.0}", "firing demand (due per second)", demand);
    println!(
        "{:<40} {:>14}",
        "lateness p50 (ms)",
        percentile(&late, 0.50)
    );
    println!(
        "{:<40} {:>14}",
        "lateness p99 (ms)",
        percentile(&late, 0.99)
    );
    // The tail past p99: one stall of the scheduler (a table growing under
    // its lock) shows here first.
    println!(
        "{:<40} {:>14}",
        "lateness p99.9 (ms)",
        percentile(&late, 0.999)
    );
    println!(
        "{:<40} {:>14}",
        "lateness max (ms)",
        late.last().copied().unwrap_or(0)
    );
    println!(
        "{:<40} {:>14.0}",
        "process RSS after registration (MB)", rss_after_registration
    );
    println!(
        "{:<40} {:>14.0}",
        "process RSS after firing (MB)", rss_after_firing
    );
    println!(
        "{:<40} {:>14.1}",
        "restart: store re-opened, runtime up (ms)", reopen_ms
    );
    println!(
        "{:<40} {:>14}",
        "restart: first firing, ms after its due", first_after_restart
    );
    println!("(goals: >= 50,000 registrations/s and firings/s on 2 cores, p99 lateness <= 20 ms)");
}
