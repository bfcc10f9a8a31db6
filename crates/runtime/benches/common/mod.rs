//! What the runtime's in-process benchmarks share; each uses some of it.
#![allow(dead_code)]

use std::time::Duration;

/// The number after `name` on the command line, or `default`.
pub fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// User plus system CPU time of this process.
pub fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis; utime and stime are
    // the 14th and 15th of the whole line, in clock ticks (100 per second).
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: u64 = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|t| t.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks.saturating_mul(10))
}

/// A started single-node runtime on sled (the daemon's default store) in
/// `dir`, with room for every call a benchmark has in flight and actors
/// kept active for the run.
pub fn sled_runtime(dir: &std::path::Path) -> Result<troupe_runtime::Runtime, String> {
    use std::sync::Arc;
    let sled = troupe_storage_sled::SledStore::open(dir).map_err(|e| e.to_string())?;
    let reminders = troupe_storage_sled::SledReminders::open(&sled).map_err(|e| e.to_string())?;
    let config = troupe_runtime::RuntimeConfig {
        max_pending_calls: 1_000_000,
        default_idle_timeout: Duration::from_secs(3_600),
        ..troupe_runtime::RuntimeConfig::default()
    };
    let rt = troupe_runtime::Runtime::create(
        config,
        Arc::new(sled),
        Arc::new(reminders),
        Arc::new(troupe_placement::SingleNode),
    )
    .map_err(|e| e.to_string())?;
    rt.start();
    Ok(rt)
}

/// `calls` turns of `method` on each of `ids`, `concurrency` in flight,
/// then a flush (the turns' writes are part of their cost). Returns the
/// wall and CPU time they took.
pub async fn turns(
    rt: &std::sync::Arc<troupe_runtime::Runtime>,
    ids: &[troupe_runtime::ActorId],
    method: &str,
    calls: u64,
    concurrency: usize,
) -> Result<(Duration, Duration), String> {
    use troupe_runtime::{Call, Payload};
    let (wall, cpu) = (std::time::Instant::now(), cpu_time());
    for _ in 0..calls {
        for chunk in ids.chunks(concurrency) {
            let each = chunk.iter().map(|id| {
                let rt = rt.clone();
                let call = Call::new(id.clone(), method, Payload::json("null"));
                async move { rt.invoke(call).await.map(drop).map_err(|e| e.to_string()) }
            });
            futures::future::try_join_all(each).await?;
        }
    }
    rt.flush().await.map_err(|e| e.to_string())?;
    Ok((wall.elapsed(), cpu_time().saturating_sub(cpu)))
}

/// [`sled_runtime`] with `host` serving `types`, each with default options.
pub fn sled_runtime_hosting(
    dir: &std::path::Path,
    host: std::sync::Arc<dyn troupe_runtime::ActorHost>,
    types: &[&str],
) -> Result<troupe_runtime::Runtime, String> {
    let rt = sled_runtime(dir)?;
    let specs = types
        .iter()
        .map(|name| troupe_runtime::TypeSpec {
            name: (*name).into(),
            ..troupe_runtime::TypeSpec::default()
        })
        .collect();
    rt.register_host(host, specs).map_err(|e| e.to_string())?;
    Ok(rt)
}

/// Actors `a0`..`a{n-1}` of type `ty`.
pub fn actor_ids(ty: &str, n: u64) -> Vec<troupe_runtime::ActorId> {
    (0..n)
        .map(|i| troupe_runtime::ActorId::new(ty, format!("a{i}")))
        .collect()
}
