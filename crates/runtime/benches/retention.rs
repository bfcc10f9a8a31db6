//! What a type's retention costs an activation: each activation of such a
//! type writes its `$retain` mark as it starts and as it ends, in the
//! reminder store. In process, on sled (the daemon's default store), two
//! types hosted alike, one with a retention: each round activates N actors
//! of a type (one call each, 64 at a time) and deactivates them (admin
//! deactivation, which returns once the end's mark is stored). Rounds
//! alternate between the types, and the table compares each with the type
//! without a retention (the anchor) in the same run: cycles/s and process
//! CPU per cycle.
//!
//! `cargo bench -p troupe-runtime --bench retention -- [--actors N] [--rounds R]`

mod common;

use common::{arg, cpu_time, sled_runtime};
use std::sync::Arc;
use std::time::{Duration, Instant};

use troupe_runtime::{ActorId, Call, FnHost, Payload, Runtime, StateChange, TurnOutcome, TypeSpec};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Calls or deactivations in flight at once.
const CONCURRENCY: usize = 64;

fn runtime(dir: &std::path::Path) -> Result<Runtime, String> {
    let rt = sled_runtime(dir)?;
    let host = FnHost::new("bench", |_actor: &ActorId, _req| TurnOutcome {
        result: Ok(Payload::json("null")),
        changes: vec![StateChange::set("seen", "1")],
    });
    let spec = |name: &str, retention| TypeSpec {
        name: name.into(),
        retention,
        ..TypeSpec::default()
    };
    rt.register_host(
        Arc::new(host),
        vec![
            spec("plain", None),
            spec("kept", Some(Duration::from_secs(30 * 24 * 3_600))),
        ],
    )
    .map_err(|e| e.to_string())?;
    Ok(rt)
}

/// Runs `each` over `ids`, `CONCURRENCY` at a time.
async fn over<F, Fut>(ids: &[ActorId], each: F) -> Result<(), String>
where
    F: Fn(ActorId) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    for chunk in ids.chunks(CONCURRENCY) {
        futures::future::try_join_all(chunk.iter().cloned().map(&each)).await?;
    }
    Ok(())
}

/// One round: activate then deactivate `actors` actors of `ty`. Returns the
/// wall and CPU time it took.
async fn round(
    rt: &Arc<Runtime>,
    ty: &str,
    round: u64,
    actors: u64,
) -> Result<(Duration, Duration), String> {
    let ids: Vec<ActorId> = (0..actors)
        .map(|i| ActorId::new(ty, format!("r{round}-{i}")))
        .collect();
    let (wall, cpu) = (Instant::now(), cpu_time());
    over(&ids, |id| {
        let rt = rt.clone();
        async move {
            rt.invoke(Call::new(id, "touch", Payload::json("null")))
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
    })
    .await?;
    over(&ids, |id| {
        let rt = rt.clone();
        async move {
            rt.deactivate_actor(&id)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
    })
    .await?;
    Ok((wall.elapsed(), cpu_time().saturating_sub(cpu)))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), String> {
    let actors = arg("--actors", 20_000);
    let rounds = arg("--rounds", 3);
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let rt = Arc::new(runtime(dir.path())?);
    // Warm up sled and the allocator on neither measurement.
    round(&rt, "plain", u64::MAX, actors / 10).await?;
    let mut totals = [(Duration::ZERO, Duration::ZERO); 2];
    for r in 0..rounds {
        // Alternate which goes first, so a trend in the machine favours neither.
        let order: [usize; 2] = if r % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let ty = ["plain", "kept"][which];
            let (wall, cpu) = round(&rt, ty, r, actors).await?;
            totals[which].0 += wall;
            totals[which].1 += cpu;
        }
    }
    let cycles = (actors * rounds) as f64;
    let rate = |t: (Duration, Duration)| cycles / t.0.as_secs_f64().max(1e-9);
    let cpu_us = |t: (Duration, Duration)| t.1.as_secs_f64() * 1e6 / cycles;
    println!(
        "{actors} actors x {rounds} rounds per type; one cycle = a call that activates, then admin deactivation"
    );
    println!(
        "{:<34} {:>12} {:>18} {:>16}",
        "type", "cycles/s", "CPU µs per cycle", "CPU vs anchor"
    );
    for (which, label) in ["no retention (anchor)", "retention 30d ($retain marks)"]
        .iter()
        .enumerate()
    {
        let t = totals[which];
        println!(
            "{:<34} {:>12.0} {:>18.1} {:>15.2}x",
            label,
            rate(t),
            cpu_us(t),
            cpu_us(t) / cpu_us(totals[0]).max(1e-9)
        );
    }
    Ok(())
}
