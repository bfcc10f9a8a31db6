//! How long a backup takes and holds the store's writes (`troupe backup`),
//! how long the writes of a flusher running meanwhile wait, and how long a
//! restore takes, against copying the store's files (what a backup costs a
//! daemon that is stopped for it: the anchor).
//!
//! `cargo bench -p troupe-storage-sled --bench backup -- [--actors N]
//! [--value-bytes B] [--rounds R]`
//!
//! Each actor gets two keys of B bytes, as a turn of the tests' `incr_pair`
//! writes them, in batches of 1,000 actors. While each backup runs, one
//! task writes one actor after another (a flush of single-actor turns)
//! and the bench keeps the longest any of those writes took. The store keeps sled's default
//! cache of the daemon (256 MiB), so a store larger than that is read back
//! from disk, as a daemon's would be.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use troupe_storage::{ActorWrite, StateStore, StoreError};
use troupe_storage_sled::SledStore;

/// The daemon's allocator and settings (crates/troupe/src/main.rs), which
/// `troupe backup` and `troupe restore` run with: under glibc's malloc a
/// restore spent a fifth of its time on the allocator's lock.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

// jemalloc reads this symbol by name, before the first allocation.
#[allow(non_upper_case_globals, unsafe_code)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8] =
    b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,oversize_threshold:0\0";

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Copies the files under `from` to `to`, as `cp -r` would.
fn copy_dir(from: &Path, to: &Path) -> std::io::Result<u64> {
    std::fs::create_dir_all(to)?;
    let mut bytes = 0;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            bytes += copy_dir(&entry.path(), &target)?;
        } else {
            bytes += std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(bytes)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

fn counter(i: u64, value: &Bytes) -> ActorWrite {
    ActorWrite {
        actor_type: "counter".into(),
        actor_id: format!("actor-{i}"),
        epoch: None,
        changes: vec![
            ("count".into(), Some(value.clone())),
            ("copy".into(), Some(value.clone())),
        ],
        inbox: Vec::new(),
        records: Vec::new(),
    }
}

/// Writes one actor after another until `stop`: how many, and the longest
/// one took.
async fn write_meanwhile(
    store: SledStore,
    value: Bytes,
    actors: u64,
    stop: Arc<AtomicBool>,
) -> Result<(u64, Duration), StoreError> {
    let (mut writes, mut longest) = (0u64, Duration::ZERO);
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let actor = writes.wrapping_mul(7_919) % actors.max(1);
        store.write_batch(&[counter(actor, &value)]).await?;
        longest = longest.max(started.elapsed());
        writes += 1;
    }
    Ok((writes, longest))
}

fn main() {
    if let Err(e) = run() {
        eprintln!("backup bench failed: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let actors = arg("--actors", 200_000);
    let value_bytes = arg("--value-bytes", 200);
    let rounds = arg("--rounds", 3).max(1);
    let value = Bytes::from(vec![b'x'; usize::try_from(value_bytes)?]);
    let root = tempfile::tempdir()?;
    let data = root.path().join("data");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let store = SledStore::open(&data)?;
    let fill = Instant::now();
    rt.block_on(async {
        let mut next = 0;
        while next < actors {
            let end = (next + 1_000).min(actors);
            let writes: Vec<ActorWrite> = (next..end).map(|i| counter(i, &value)).collect();
            store.write_batch(&writes).await?;
            next = end;
        }
        Ok::<_, troupe_storage::StoreError>(())
    })?;
    eprintln!("filled {actors} actors in {:?}", fill.elapsed());

    let (mut backups, mut copies, mut held, mut waits) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut file_bytes, mut dir_bytes, mut entries, mut meanwhile) = (0, 0, 0, 0);
    for round in 0..rounds {
        let file = root.path().join(format!("backup-{round}"));
        let stop = Arc::new(AtomicBool::new(false));
        let writer = rt.spawn(write_meanwhile(
            store.clone(),
            value.clone(),
            actors,
            stop.clone(),
        ));
        let started = Instant::now();
        let taken = store.backup_to(&file);
        backups.push(started.elapsed());
        stop.store(true, Ordering::Relaxed);
        let (writes, longest) = rt.block_on(writer)??;
        let taken = taken?;
        held.push(taken.writes_held);
        waits.push(longest);
        meanwhile = writes;
        (file_bytes, entries) = (taken.summary.bytes, taken.summary.entries);
        std::fs::remove_file(&file)?;

        let copy = root.path().join(format!("copy-{round}"));
        let started = Instant::now();
        dir_bytes = copy_dir(&data, &copy)?;
        copies.push(started.elapsed());
        std::fs::remove_dir_all(&copy)?;
    }
    let file = root.path().join("backup");
    store.backup_to(&file)?;
    let started = Instant::now();
    troupe_storage_sled::restore(&file, &root.path().join("restored"))?;
    let restore = started.elapsed();

    let (backup, copy) = (median(backups), median(copies));
    let (held, wait) = (median(held), median(waits));
    println!();
    println!(
        "sled store: {actors} actors, {entries} keys of {value_bytes} B values; backup file \
         {:.1} MiB, store files {:.1} MiB; median of {rounds} rounds",
        mib(file_bytes),
        mib(dir_bytes)
    );
    println!("| what | time | MiB/s | vs copying the files |");
    println!("|---|---|---|---|");
    println!(
        "| copying the store's files (anchor: a stopped daemon's backup) | {copy:.2?} | {:.0} | 1.00× |",
        mib(dir_bytes) / copy.as_secs_f64()
    );
    println!(
        "| backup, while a flusher writes ({meanwhile} writes in the last) | {backup:.2?} | {:.0} | {:.2}× |",
        mib(file_bytes) / backup.as_secs_f64(),
        backup.as_secs_f64() / copy.as_secs_f64()
    );
    println!("| backup: writes held | {held:.2?} | | |");
    println!("| backup: the flusher's longest write meanwhile | {wait:.2?} | | |");
    println!(
        "| restore into an empty directory | {restore:.2?} | {:.0} | {:.2}× |",
        mib(file_bytes) / restore.as_secs_f64(),
        restore.as_secs_f64() / copy.as_secs_f64()
    );
    Ok(())
}
