//! How long `troupe store copy` takes to move a store between sled and
//! PostgreSQL, against moving a sled store by backup and restore (the
//! anchor: how one daemon's data moved before).
//!
//! `TROUPE_TEST_POSTGRES=postgres://... cargo bench -p troupe-storage-postgres
//! --bench copy -- [--actors N] [--value-bytes B]`
//!
//! Each actor gets two keys of B bytes and a call record, written in
//! batches of 1,000 actors; every 100th actor a reminder. The bench makes
//! a database of its own on that server and drops it at the end.

use std::time::{Duration, Instant};

use bytes::Bytes;
use troupe_storage::{
    copy_store, ActorWrite, CallRecord, ReminderKey, ReminderOp, ReminderRecord, ReminderStore,
    ReminderWrite, StateStore, Stores,
};
use troupe_storage_postgres::PostgresStore;
use troupe_storage_sled::{SledReminders, SledStore};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let Ok(url) = std::env::var("TROUPE_TEST_POSTGRES") else {
        eprintln!("copy bench: set TROUPE_TEST_POSTGRES to a PostgreSQL server's URL");
        std::process::exit(2);
    };
    let run = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(Into::into)
        .and_then(|rt| rt.block_on(run(&url)));
    if let Err(e) = run {
        eprintln!("copy bench failed: {e:?}");
        std::process::exit(1);
    }
}

/// A database of the bench's own, dropped by [`drop_database`].
async fn create_database(url: &str, name: &str) -> BenchResult<String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    // Two statements: one query string would run them in one transaction,
    // which CREATE DATABASE refuses.
    client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
        .await?;
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await?;
    let base = url.rsplit_once('/').map_or(url, |(base, _)| base);
    Ok(format!("{base}/{name}"))
}

async fn drop_database(url: &str, name: &str) -> BenchResult<()> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await?;
    Ok(())
}

async fn fill(
    store: &SledStore,
    reminders: &SledReminders,
    actors: u64,
    value: &Bytes,
) -> BenchResult<()> {
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
                records: vec![CallRecord {
                    key: format!("key-{i}"),
                    recorded_unix_ms: 1_000,
                    data: Bytes::from_static(b"answer"),
                    new_key: true,
                }],
            })
            .collect();
        store.write_batch(&writes).await?;
        let due: Vec<ReminderWrite> = (next..end)
            .filter(|i| i % 100 == 0)
            .map(|i| ReminderWrite {
                op: ReminderOp::Put(ReminderRecord {
                    key: ReminderKey {
                        actor_type: "counter".into(),
                        actor_id: format!("actor-{i}"),
                        name: "tick".into(),
                    },
                    due_unix_ms: 10_000 + i,
                    data: Bytes::from_static(b"reminder"),
                }),
                epoch: None,
            })
            .collect();
        reminders.apply_reminders(&due).await?;
        next = end;
    }
    Ok(())
}

async fn timed(from: Stores<'_>, to: Stores<'_>) -> BenchResult<Duration> {
    let started = Instant::now();
    copy_store(from, to, |_| {}).await?;
    Ok(started.elapsed())
}

async fn run(url: &str) -> BenchResult<()> {
    let actors = arg("--actors", 100_000);
    let value_bytes = arg("--value-bytes", 200);
    let value = Bytes::from(vec![b'x'; usize::try_from(value_bytes)?]);
    let root = tempfile::tempdir()?;
    let sled = SledStore::open(&root.path().join("one"))?;
    let sled_reminders = SledReminders::open(&sled)?;
    fill(&sled, &sled_reminders, actors, &value).await?;
    let one = Stores {
        state: &sled,
        reminders: &sled_reminders,
    };

    // The anchor: a backup of the sled store restored elsewhere.
    let started = Instant::now();
    let file = root.path().join("backup");
    sled.backup_to(&file)?;
    troupe_storage_sled::restore(&file, &root.path().join("restored"))?;
    let anchor = started.elapsed();

    let name = format!("troupe_copy_bench_{}", std::process::id());
    let pg_url = create_database(url, &name).await?;
    let measured = async {
        let pg = PostgresStore::connect(&pg_url).await?;
        let shared = Stores {
            state: &pg,
            reminders: &pg,
        };
        let to_pg = timed(one, shared).await?;
        let back = SledStore::open(&root.path().join("back"))?;
        let back_reminders = SledReminders::open(&back)?;
        let back = Stores {
            state: &back,
            reminders: &back_reminders,
        };
        // As `troupe store copy` reads a database: through one snapshot.
        let snapshot = pg.snapshot().await?;
        let from_snapshot = Stores {
            state: &snapshot,
            reminders: &snapshot,
        };
        let from_pg = timed(from_snapshot, back).await?;
        drop(snapshot);
        let plain = SledStore::open(&root.path().join("plain"))?;
        let plain_reminders = SledReminders::open(&plain)?;
        let plain = Stores {
            state: &plain,
            reminders: &plain_reminders,
        };
        let from_pg_plain = timed(shared, plain).await?;
        let other = SledStore::open(&root.path().join("other"))?;
        let other_reminders = SledReminders::open(&other)?;
        let other = Stores {
            state: &other,
            reminders: &other_reminders,
        };
        let sled_to_sled = timed(one, other).await?;
        Ok::<_, Box<dyn std::error::Error>>((to_pg, from_pg, from_pg_plain, sled_to_sled))
    }
    .await;
    drop_database(url, &name).await?;
    let (to_pg, from_pg, from_pg_plain, sled_to_sled) = measured?;

    let rate = |d: Duration| actors as f64 / d.as_secs_f64();
    let ratio = |d: Duration| d.as_secs_f64() / anchor.as_secs_f64();
    println!();
    println!(
        "{actors} actors (two {value_bytes} B keys and a call record each), {} reminders",
        actors.div_ceil(100)
    );
    println!("| what | time | actors/s | vs backup + restore |");
    println!("|---|---|---|---|");
    for (what, time) in [
        ("sled backup + restore (anchor)", anchor),
        ("store copy sled → PostgreSQL", to_pg),
        (
            "store copy PostgreSQL → sled (a snapshot, as the CLI reads)",
            from_pg,
        ),
        ("the same without the snapshot", from_pg_plain),
        ("store copy sled → sled", sled_to_sled),
    ] {
        println!(
            "| {what} | {time:.2?} | {:.0} | {:.2}× |",
            rate(time),
            ratio(time)
        );
    }
    Ok(())
}
