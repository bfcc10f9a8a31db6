//! What keys that expire cost a turn. In process, on sled (the daemon's
//! default store, so the flushes of the time keys count), one runtime
//! hosting three types alike: `plain`, whose actors hold one key, `big`,
//! whose actors hold 1,000 keys that never expire, and `full`, whose actors
//! hold 1,000 keys that expire. Each round makes every actor of a type take
//! `--calls` turns (64 in flight) that set one key, either without a ttl or
//! with one (renewing it each turn). Cases alternate, and the table compares
//! each with the case of the same state size without a ttl and without keys
//! that expire (its anchor) in the same run: turns/s and process CPU per
//! turn.
//!
//! `cargo bench -p troupe-runtime --bench expiry -- [--actors N] [--calls C] [--rounds R]`

mod common;

use common::{actor_ids, arg, sled_runtime_hosting, turns};
use std::sync::Arc;
use std::time::Duration;

use troupe_runtime::{ActorId, FnHost, Payload, Runtime, StateChange, TurnOutcome};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Calls in flight at once.
const CONCURRENCY: usize = 64;

/// Keys that expire a `full` actor holds.
const HELD: usize = 1_000;

const HOUR: Duration = Duration::from_secs(3_600);

fn turn(method: &str) -> Vec<StateChange> {
    match method {
        "set" => vec![StateChange::set("v", "1")],
        "set_ttl" => vec![StateChange::set_expiring("v", "1", HOUR)],
        "fill" => (0..HELD)
            .map(|i| StateChange::set_expiring(format!("k{i}"), "1", 2 * HOUR))
            .collect(),
        "fill_plain" => (0..HELD)
            .map(|i| StateChange::set(format!("k{i}"), "1"))
            .collect(),
        _ => Vec::new(),
    }
}

fn runtime(dir: &std::path::Path) -> Result<Runtime, String> {
    let host = FnHost::new("bench", |_actor: &ActorId, req| TurnOutcome {
        result: Ok(Payload::json("null")),
        changes: turn(&req.name),
    });
    sled_runtime_hosting(dir, Arc::new(host), &["plain", "big", "full"])
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), String> {
    let actors = arg("--actors", 256);
    let calls = arg("--calls", 40);
    let rounds = arg("--rounds", 3);
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let rt = Arc::new(runtime(dir.path())?);
    let ids = |ty: &str| actor_ids(ty, actors);
    let (plain, big, full) = (ids("plain"), ids("big"), ids("full"));
    turns(&rt, &big, "fill_plain", 1, CONCURRENCY).await?;
    turns(&rt, &full, "fill", 1, CONCURRENCY).await?;
    // Warm up sled and the allocator on no measurement.
    turns(&rt, &plain, "set", 2, CONCURRENCY).await?;
    // (label, actors, method, index of its anchor)
    let cases: [(&str, &[ActorId], &str, usize); 5] = [
        ("1 key, set without ttl (anchor)", &plain, "set", 0),
        ("1 key, set with ttl", &plain, "set_ttl", 0),
        ("1,000 keys, set without ttl (anchor)", &big, "set", 2),
        ("1,000 keys that expire, set without ttl", &full, "set", 2),
        ("1,000 keys that expire, set with ttl", &full, "set_ttl", 2),
    ];
    let mut totals = [(Duration::ZERO, Duration::ZERO); 5];
    for r in 0..rounds {
        // Rotate which goes first, so a trend in the machine favours none.
        for i in 0..cases.len() {
            let which = (i + r as usize) % cases.len();
            let (_, ids, method, _) = cases[which];
            let (wall, cpu) = turns(&rt, ids, method, calls, CONCURRENCY).await?;
            totals[which].0 += wall;
            totals[which].1 += cpu;
        }
    }
    let n = (actors * calls * rounds) as f64;
    let rate = |t: (Duration, Duration)| n / t.0.as_secs_f64().max(1e-9);
    let cpu_us = |t: (Duration, Duration)| t.1.as_secs_f64() * 1e6 / n;
    println!("{actors} actors per case x {calls} turns x {rounds} rounds; each turn sets one key; flushed each round");
    println!(
        "{:<44} {:>10} {:>16} {:>14}",
        "case", "turns/s", "CPU µs per turn", "CPU vs anchor"
    );
    for (which, (label, _, _, anchor)) in cases.iter().enumerate() {
        let t = totals[which];
        println!(
            "{:<44} {:>10.0} {:>16.1} {:>13.2}x",
            label,
            rate(t),
            cpu_us(t),
            cpu_us(t) / cpu_us(totals[*anchor]).max(1e-9)
        );
    }
    Ok(())
}
