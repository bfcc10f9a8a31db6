//! How long a backup pauses the store's writes (`troupe backup`), and how
//! long a restore takes, against copying the store's files (what a backup
//! costs a daemon that is stopped for it: the anchor).
//!
//! `cargo bench -p troupe-storage-sled --bench backup -- [--actors N]
//! [--value-bytes B] [--rounds R]`
//!
//! Each actor gets two keys of B bytes, as a turn of the tests' `incr_pair`
//! writes them, in batches of 1,000 actors. The store keeps sled's default
//! cache of the daemon (256 MiB), so a store larger than that is read back
//! from disk, as a daemon's would be.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use troupe_storage::{ActorWrite, StateStore};
use troupe_storage_sled::SledStore;

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
            let writes: Vec<ActorWrite> = (next..end)
                .map(|i| ActorWrite {
                    actor_type: "counter".into(),
                    actor_id: format!("actor-{i}"),
                    epoch: None,
                    changes: vec![
                        ("count".into(), Some(value.clone())),
                        ("copy".into(), Some(value.clone())),
                    ],
                    inbox: Vec::new(),
                    records: Vec::new(),
                })
                .collect();
            store.write_batch(&writes).await?;
            next = end;
        }
        Ok::<_, troupe_storage::StoreError>(())
    })?;
    eprintln!("filled {actors} actors in {:?}", fill.elapsed());

    let (mut backups, mut copies) = (Vec::new(), Vec::new());
    let (mut file_bytes, mut dir_bytes, mut entries) = (0, 0, 0);
    for round in 0..rounds {
        let file = root.path().join(format!("backup-{round}"));
        let started = Instant::now();
        let summary = store.backup_to(&file)?;
        backups.push(started.elapsed());
        (file_bytes, entries) = (summary.bytes, summary.entries);
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
        "| backup: writes paused | {backup:.2?} | {:.0} | {:.2}× |",
        mib(file_bytes) / backup.as_secs_f64(),
        backup.as_secs_f64() / copy.as_secs_f64()
    );
    println!(
        "| restore into an empty directory | {restore:.2?} | {:.0} | {:.2}× |",
        mib(file_bytes) / restore.as_secs_f64(),
        restore.as_secs_f64() / copy.as_secs_f64()
    );
    Ok(())
}
