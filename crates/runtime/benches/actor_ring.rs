//! Ring benchmark through the real dispatch path with an in-process host.
//!
//! N actors in a ring; each starts one token that is passed to its neighbour
//! M times (N × M messages in all, N tokens in flight). Prints messages/s and
//! runtime memory per active actor, against syndicate-java (3.15 M msg/s on
//! one core) and Akka (~300–430 bytes per actor).
//!
//! `cargo bench -p troupe-runtime --bench actor_ring -- [--actors N] [--hops M] [--workers W]`
//! With one worker it runs on a current-thread tokio runtime: one core.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use troupe_placement::SingleNode;
use troupe_runtime::{
    ActorId, ActorRef, Call, ContentType, FnHost, Payload, Runtime, RuntimeConfig, TurnOutcome,
    TypeSpec,
};
use troupe_storage::{MemoryReminders, MemoryStore};

/// Counts live heap bytes so the per-actor figure is what actors really
/// hold, not what the allocator kept from transient peaks.
struct Counting;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only adds counting.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new_size, Ordering::Relaxed);
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const SYNDICATE_MSGS_PER_SEC: f64 = 3.15e6;
const AKKA_BYTES_PER_ACTOR: f64 = 430.0;

struct Args {
    actors: usize,
    hops: u32,
    workers: usize,
    /// Address every message by id (directory lookup per message) instead
    /// of through `ActorRef` handles.
    by_id: bool,
}

fn parse_args() -> Args {
    let mut args = Args {
        actors: 1_000_000,
        hops: 200,
        workers: 1,
        by_id: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().and_then(|v| v.parse::<usize>().ok());
        match flag.as_str() {
            "--actors" => args.actors = value().unwrap_or(args.actors),
            "--hops" => args.hops = value().map_or(args.hops, |v| v as u32),
            "--workers" => args.workers = value().unwrap_or(args.workers).max(1),
            "--by-id" => args.by_id = true,
            _ => {} // cargo bench passes --bench; ignore what we do not know
        }
    }
    args
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// A token: hops left and the index of the actor it is addressed to (the
/// route travels with the message, as in a real ring).
fn token(hops: u32, to: u32) -> Payload {
    let mut data = [0u8; 8];
    data[..4].copy_from_slice(&hops.to_le_bytes());
    data[4..].copy_from_slice(&to.to_le_bytes());
    Payload {
        data: Bytes::copy_from_slice(&data),
        content_type: ContentType::Bytes,
    }
}

fn read_token(p: &Payload) -> (u32, u32) {
    let d = p.data.as_ref();
    let word = |r: std::ops::Range<usize>| {
        d.get(r)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map_or(0, u32::from_le_bytes)
    };
    (word(0..4), word(4..8))
}

fn main() {
    let args = parse_args();
    let runtime = if args.workers == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.workers)
            .enable_all()
            .build()
    };
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start tokio: {e}");
            std::process::exit(1);
        }
    };
    runtime.block_on(run(args));
}

async fn run(args: Args) {
    let n = args.actors;
    let ids: Arc<std::sync::OnceLock<Vec<ActorId>>> = Arc::default();
    let refs: Arc<std::sync::OnceLock<Vec<ActorRef>>> = Arc::default();
    let by_id = args.by_id;
    let config = RuntimeConfig {
        workers: args.workers,
        max_pending_calls: n * 2 + 16,
        default_max_mailbox: 64,
        default_idle_timeout: Duration::from_secs(3600),
        flush_interval: Duration::from_secs(3600),
        ..RuntimeConfig::default()
    };
    let store = Arc::new(MemoryStore::new());
    let rt = match Runtime::create(
        config,
        store,
        Arc::new(MemoryReminders::new()),
        Arc::new(SingleNode),
    ) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{e}");
            return;
        }
    };
    rt.start();

    let finished_tokens = Arc::new(AtomicU64::new(0));
    let all_done = Arc::new(tokio::sync::Notify::new());
    let method: Arc<str> = Arc::from("pass");
    let host = {
        let (rt, ids, refs, method) = (rt.clone(), ids.clone(), refs.clone(), method.clone());
        let (finished, all_done) = (finished_tokens.clone(), all_done.clone());
        let target = n as u64;
        FnHost::new("ring", move |_actor: &ActorId, req| {
            let (hops, me) = read_token(&req.payload);
            if hops > 0 {
                let ids = ids.get().map_or(&[][..], Vec::as_slice);
                let next = (me as usize + 1) % ids.len().max(1);
                let Some(next_id) = ids.get(next) else {
                    return TurnOutcome {
                        result: Ok(Payload::default()),
                        changes: Vec::new(),
                    };
                };
                let payload = token(hops - 1, next as u32);
                let sent = match refs.get().and_then(|r| r.get(next)) {
                    Some(actor) if !by_id => actor.tell(method.clone(), payload),
                    _ => rt.tell(Call::new(next_id.clone(), method.clone(), payload)),
                };
                if let Err(e) = sent {
                    eprintln!("tell failed: {e}");
                }
            } else if finished.fetch_add(1, Ordering::Relaxed) + 1 == target {
                all_done.notify_one();
            }
            TurnOutcome {
                result: Ok(Payload::default()),
                changes: Vec::new(),
            }
        })
    };
    let registration = match rt.register_host(
        Arc::new(host),
        vec![TypeSpec {
            name: "ring".into(),
            ..TypeSpec::default()
        }],
    ) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return;
        }
    };
    let heap_start = LIVE_BYTES.load(Ordering::Relaxed);
    // The registry's copy of the type name, as an in-process host keeps it:
    // every id then shares the string the directory compares against.
    let ring = registration.types[0].name.clone();
    let built: Vec<ActorId> = (0..n)
        .map(|i| ActorId {
            ty: ring.clone(),
            id: Arc::from(i.to_string()),
        })
        .collect();
    // The id strings are part of an actor's cost; the Vec holding them is the benchmark's.
    let id_bytes =
        LIVE_BYTES.load(Ordering::Relaxed) - heap_start - n * std::mem::size_of::<ActorId>();
    let _ = ids.set(built);
    let ids = ids.get().map_or(&[][..], Vec::as_slice);
    if !by_id {
        let handles: Result<Vec<ActorRef>, _> =
            ids.iter().map(|id| rt.actor_ref(id.clone())).collect();
        match handles {
            Ok(h) => {
                let _ = refs.set(h);
            }
            Err(e) => {
                eprintln!("{e}");
                return;
            }
        }
    }

    // Phase 1: activate every actor with one message that goes nowhere.
    let rss_before = rss_bytes();
    let heap_before = LIVE_BYTES.load(Ordering::Relaxed);
    let started = Instant::now();
    // In chunks, so the figure is what active actors hold, not the peak of a
    // million activations queued at once.
    const CHUNK: usize = 10_000;
    for (c, chunk) in ids.chunks(CHUNK).enumerate() {
        for (i, id) in chunk.iter().enumerate() {
            let index = (c * CHUNK + i) as u32;
            if let Err(e) = rt.tell(Call::new(id.clone(), method.clone(), token(0, index))) {
                eprintln!("activation tell failed: {e}");
                return;
            }
        }
        while finished_tokens.load(Ordering::Relaxed) < (c * CHUNK + chunk.len()) as u64 {
            tokio::task::yield_now().await;
        }
    }
    let activation_secs = started.elapsed().as_secs_f64();
    let rss_active = rss_bytes();
    let rss_per_actor = rss_active.saturating_sub(rss_before) as f64 / n as f64;
    let heap_per_actor = (LIVE_BYTES
        .load(Ordering::Relaxed)
        .saturating_sub(heap_before)
        + id_bytes) as f64
        / n as f64;

    // Phase 2: every actor starts a token that travels `hops` times.
    finished_tokens.store(0, Ordering::Relaxed);
    let started = Instant::now();
    for (i, id) in ids.iter().enumerate() {
        if let Err(e) = rt.tell(Call::new(
            id.clone(),
            method.clone(),
            token(args.hops - 1, i as u32),
        )) {
            eprintln!("tell failed: {e}");
            return;
        }
    }
    // A permit may be left from phase 1; the counter is the truth.
    while finished_tokens.load(Ordering::Relaxed) < n as u64 {
        all_done.notified().await;
    }
    let secs = started.elapsed().as_secs_f64();
    // Every token makes `hops` turns; counting them as they happen would
    // put an atomic operation on every message.
    let messages = n as u64 * u64::from(args.hops);
    let rate = messages as f64 / secs;

    println!();
    println!(
        "ring: {n} actors x {} hops, {} worker(s){}, messages addressed {}",
        args.hops,
        args.workers,
        if args.workers == 1 { " (one core)" } else { "" },
        if args.by_id {
            "by id (directory lookup each)"
        } else {
            "through ActorRef handles"
        }
    );
    println!(
        "{:<34} {:>16} {:>16} {:>8}",
        "metric", "troupe", "anchor", "ratio"
    );
    println!(
        "{:<34} {:>16.0} {:>16.0} {:>7.2}x",
        "messages/s",
        rate,
        SYNDICATE_MSGS_PER_SEC,
        rate / SYNDICATE_MSGS_PER_SEC
    );
    println!(
        "{:<34} {:>16.0} {:>16.0} {:>7.2}x",
        "live heap bytes per active actor",
        heap_per_actor,
        AKKA_BYTES_PER_ACTOR,
        AKKA_BYTES_PER_ACTOR / heap_per_actor
    );
    println!(
        "{:<34} {:>16.0} {:>16.0} {:>7.2}x",
        "RSS delta per active actor",
        rss_per_actor,
        AKKA_BYTES_PER_ACTOR,
        AKKA_BYTES_PER_ACTOR / rss_per_actor
    );
    println!("{:<34} {:>16}", "messages", messages);
    println!("{:<34} {:>16.2}", "ring time (s)", secs);
    println!(
        "{:<34} {:>16.0}",
        "activations/s",
        n as f64 / activation_secs
    );
    println!("(anchors: syndicate-java 3.15 M msg/s on one core; Akka ~300-430 bytes/actor; ratio > 1 is better)");
}
