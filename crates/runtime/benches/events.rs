//! What publishing events costs a turn, and how soon a watcher has them.
//! In process, on sled, one runtime hosting five types alike: each turn
//! sets one key; `quiet`, `watched`, `fleet` and `tenants` turns also
//! publish one event. Nobody watches `quiet` actors (the common case:
//! events go nowhere); each `watched` actor has a watcher polling the way
//! `ActorClient.Watch` does; one watcher polls all of `fleet` the way
//! `ActorClient.WatchType` polls each daemon; one polls the `tenants`
//! whose id starts with `a25` (7 of 256), as a type watch with an id
//! prefix does, so the others' events are left out where they are held.
//! Cases alternate; the table gives turns/s and process CPU per turn (the
//! watchers' included) against the turn that publishes nothing, in the
//! same run, and the time from a turn's end to its watcher having the event.
//!
//! `cargo bench -p troupe-runtime --bench events -- [--actors N] [--calls C] [--rounds R]`

mod common;

use common::{actor_ids, arg, sled_runtime_hosting, turns};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use troupe_placement::Owner;
use troupe_runtime::{
    ActivateDone, ActivateRequest, ActorHost, ActorId, ActorRequest, ActorResponse, DeactivateDone,
    DeactivateRequest, Payload, RequestContext, Runtime, StateChange, TurnDone, TurnOutcome,
    TurnRequest, TypeFrom, WatchedEvent, WatchedType,
};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Calls in flight at once.
const CONCURRENCY: usize = 64;

/// The events carry when they were published, in ns since this instant.
fn epoch() -> Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    *START.get_or_init(Instant::now)
}

#[derive(Debug)]
struct Publisher;

impl ActorHost for Publisher {
    fn name(&self) -> &str {
        "bench"
    }

    fn activate(&self, _request: ActivateRequest, done: ActivateDone) {
        done.finish(Ok(Vec::new()));
    }

    fn turn(&self, request: TurnRequest, mut done: TurnDone) {
        match &*request.name {
            // When it was published, for the watcher to time.
            "publish" => {
                let now = epoch().elapsed().as_nanos().to_string();
                done.publish(vec![Payload::json(now)]);
            }
            // No watcher reads it: no clock read or formatting to count.
            "publish_unread" => done.publish(vec![Payload::json("1")]),
            _ => {}
        }
        done.finish(TurnOutcome {
            result: Ok(Payload::json("null")),
            changes: vec![StateChange::set("v", "1")],
        });
    }

    fn deactivate(&self, _request: DeactivateRequest, done: DeactivateDone) {
        done.finish(Vec::new());
    }
}

/// Polls the events of the actors `watched` names until `stop`, recording
/// each one's delay.
async fn watch_type(
    rt: Arc<Runtime>,
    watched: WatchedType,
    delays: Arc<Mutex<Vec<Duration>>>,
    stop: Arc<tokio::sync::Notify>,
) {
    let mut from = TypeFrom::Now;
    loop {
        let poll = rt.poll_type_events(&Owner::Local, &watched, &from, Duration::from_secs(10));
        let answer = tokio::select! {
            answer = poll => answer,
            () = stop.notified() => return,
        };
        let Ok(polled) = answer else {
            return;
        };
        record(&delays, &polled.events);
        from = TypeFrom::After(vec![polled.cursor]);
    }
}

/// Each event's time from its turn's end (its payload) to now.
fn record(delays: &Mutex<Vec<Duration>>, events: &[WatchedEvent]) {
    let now = epoch().elapsed();
    if let Ok(mut delays) = delays.lock() {
        for event in events {
            let sent: u64 = std::str::from_utf8(&event.payload.data)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            delays.push(now.saturating_sub(Duration::from_nanos(sent)));
        }
    }
}

/// Polls `actor`'s events until `stop`, recording each one's delay.
async fn watch(
    rt: Arc<Runtime>,
    actor: ActorId,
    delays: Arc<Mutex<Vec<Duration>>>,
    stop: Arc<tokio::sync::Notify>,
) {
    let mut after = None;
    loop {
        let poll = rt.request(
            ActorRequest::PollEvents {
                actor: actor.clone(),
                after,
                wait: Duration::from_secs(10),
            },
            RequestContext::default(),
        );
        let answer = tokio::select! {
            answer = poll => answer,
            () = stop.notified() => return,
        };
        let Ok(ActorResponse::Events(polled)) = answer else {
            return;
        };
        record(&delays, &polled.events);
        after = Some(polled.cursor);
    }
}

fn sorted(delays: &Mutex<Vec<Duration>>) -> Result<Vec<Duration>, String> {
    let mut delays = delays.lock().map_err(|e| e.to_string())?.clone();
    delays.sort();
    Ok(delays)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), String> {
    let actors = arg("--actors", 256);
    let calls = arg("--calls", 40);
    let rounds = arg("--rounds", 3);
    epoch();
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let rt = Arc::new(sled_runtime_hosting(
        dir.path(),
        Arc::new(Publisher),
        &["plain", "quiet", "watched", "fleet", "tenants"],
    )?);
    let ids = |ty: &str| actor_ids(ty, actors);
    let (plain, quiet, watched, fleet) = (ids("plain"), ids("quiet"), ids("watched"), ids("fleet"));
    let tenants = ids("tenants");
    // A selective prefix: with 256 actors, a25 and a250..a255.
    let prefix = "a25";
    let in_prefix = tenants.iter().filter(|a| a.id.starts_with(prefix)).count();
    let delays = Arc::new(Mutex::new(Vec::new()));
    let type_delays = Arc::new(Mutex::new(Vec::new()));
    let prefix_delays = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(tokio::sync::Notify::new());
    let mut watchers: Vec<_> = watched
        .iter()
        .map(|id| tokio::spawn(watch(rt.clone(), id.clone(), delays.clone(), stop.clone())))
        .collect();
    watchers.push(tokio::spawn(watch_type(
        rt.clone(),
        WatchedType::all("fleet"),
        type_delays.clone(),
        stop.clone(),
    )));
    let tenant = WatchedType {
        ty: Arc::from("tenants"),
        id_prefix: Arc::from(prefix),
    };
    watchers.push(tokio::spawn(watch_type(
        rt.clone(),
        tenant,
        prefix_delays.clone(),
        stop.clone(),
    )));
    // Warm up every actor, sled and the allocator on no measurement.
    for ids in [&plain, &quiet, &watched, &fleet, &tenants] {
        turns(&rt, ids, "set", 2, CONCURRENCY).await?;
    }
    let of_prefix = format!("1 event, a type watch of {in_prefix} ids");
    let cases: [(&str, &[ActorId], &str); 5] = [
        ("no event (anchor)", &plain, "set"),
        ("1 event, nobody watching", &quiet, "publish_unread"),
        ("1 event, a watcher per actor", &watched, "publish"),
        ("1 event, one watcher of the type", &fleet, "publish"),
        (&of_prefix, &tenants, "publish"),
    ];
    let mut totals = [(Duration::ZERO, Duration::ZERO); 5];
    for r in 0..rounds {
        for i in 0..cases.len() {
            let which = (i + r as usize) % cases.len();
            let (_, ids, method) = cases[which];
            let (wall, cpu) = turns(&rt, ids, method, calls, CONCURRENCY).await?;
            totals[which].0 += wall;
            totals[which].1 += cpu;
        }
    }
    stop.notify_waiters();
    for w in watchers {
        let _ = w.await;
    }
    let delays = sorted(&delays)?;
    let type_delays = sorted(&type_delays)?;
    let prefix_delays = sorted(&prefix_delays)?;
    let n = (actors * calls * rounds) as f64;
    let rate = |t: (Duration, Duration)| n / t.0.as_secs_f64().max(1e-9);
    let cpu_us = |t: (Duration, Duration)| t.1.as_secs_f64() * 1e6 / n;
    println!("{actors} actors per case x {calls} turns x {rounds} rounds; each turn sets one key");
    println!(
        "{:<32} {:>10} {:>16} {:>14}",
        "case", "turns/s", "CPU µs per turn", "CPU vs anchor"
    );
    for (which, (label, _, _)) in cases.iter().enumerate() {
        let t = totals[which];
        println!(
            "{:<32} {:>10.0} {:>16.1} {:>13.2}x",
            label,
            rate(t),
            cpu_us(t),
            cpu_us(t) / cpu_us(totals[0]).max(1e-9)
        );
    }
    let all = actors * calls * rounds;
    let of_prefix_count = in_prefix as u64 * calls * rounds;
    for (label, delays, sent) in [
        ("a watcher per actor", &delays, all),
        ("one type watcher", &type_delays, all),
        (
            "a type watch of an id prefix",
            &prefix_delays,
            of_prefix_count,
        ),
    ] {
        println!(
            "{label}: events received {} of {}; turn end to watcher: p50 {:?}, p99 {:?}, max {:?}",
            delays.len(),
            sent,
            percentile(delays, 0.50),
            percentile(delays, 0.99),
            delays.last().copied().unwrap_or_default()
        );
    }
    Ok(())
}
