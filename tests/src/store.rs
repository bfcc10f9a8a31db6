//! State-store fixtures for the end-to-end tests: the store a daemon runs
//! on (sled, or a fresh PostgreSQL database), a private PostgreSQL server a
//! test may stop and start, and streams of two-key writes whose
//! acknowledgements are recorded.
//!
//! PostgreSQL comes from `TROUPE_TEST_POSTGRES` (a connection URL;
//! `scripts/postgres.sh start DIR` prints one, `scripts/test` sets it). When
//! it is unset the tests that need it print why and pass as skipped, unless
//! `TROUPE_REQUIRE_POSTGRES=1`, which makes them fail.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::process::Command;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::Status;

use crate::{within, Client, WAIT};

/// `TROUPE_TEST_POSTGRES`, or `None` after printing why `test` is skipped;
/// an error instead when `TROUPE_REQUIRE_POSTGRES=1`.
pub fn postgres_url(test: &str) -> anyhow::Result<Option<String>> {
    match std::env::var("TROUPE_TEST_POSTGRES") {
        Ok(url) if !url.is_empty() => Ok(Some(url)),
        _ if std::env::var("TROUPE_REQUIRE_POSTGRES").is_ok_and(|v| v == "1") => bail!(
            "{test} needs PostgreSQL: TROUPE_REQUIRE_POSTGRES=1 but TROUPE_TEST_POSTGRES is not \
             set (scripts/postgres.sh start DIR prints a URL)"
        ),
        _ => {
            eprintln!(
                "SKIPPED {test}: set TROUPE_TEST_POSTGRES to a PostgreSQL URL to run it \
                 (scripts/test does; or scripts/postgres.sh start DIR)"
            );
            Ok(None)
        }
    }
}

/// `url` with its database name replaced by `db`.
pub fn with_database(url: &str, db: &str) -> anyhow::Result<String> {
    let (scheme, rest) = url
        .split_once("://")
        .with_context(|| "TROUPE_TEST_POSTGRES must be a postgres://... URL")?;
    let (authority, tail) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, ""),
    };
    let query = tail.find('?').map(|i| &tail[i..]).unwrap_or("");
    Ok(format!("{scheme}://{authority}/{db}{query}"))
}

async fn pg_connect(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = within(
        WAIT,
        "a PostgreSQL connection",
        tokio_postgres::connect(url, tokio_postgres::NoTls),
    )
    .await?
    .with_context(|| {
        format!(
            "connecting to {}",
            troupe_storage_postgres::PostgresStore::redact(url)
        )
    })?;
    tokio::spawn(connection);
    Ok(client)
}

static DATABASES: AtomicU64 = AtomicU64::new(0);

/// A fresh database on the test server, dropped when the value is.
#[derive(Debug)]
pub struct PgDatabase {
    pub url: String,
    name: String,
    server_url: String,
}

impl PgDatabase {
    pub async fn create(server_url: &str) -> anyhow::Result<PgDatabase> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .subsec_nanos();
        let name = format!(
            "troupe_e2e_{}_{}_{nanos}",
            std::process::id(),
            DATABASES.fetch_add(1, Ordering::Relaxed)
        );
        let admin = pg_connect(server_url).await?;
        within(
            WAIT,
            "CREATE DATABASE",
            admin.batch_execute(&format!("CREATE DATABASE {name}")),
        )
        .await??;
        Ok(PgDatabase {
            url: with_database(server_url, &name)?,
            name,
            server_url: server_url.to_owned(),
        })
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        // Best effort, on a thread of its own: Drop may run inside the
        // test's runtime, which must not block on a nested one.
        let (url, name) = (self.server_url.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if let Ok(admin) = pg_connect(&url).await {
                    let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                    let _ = tokio::time::timeout(WAIT, admin.batch_execute(&sql)).await;
                }
            });
        })
        .join();
    }
}

/// The store a test daemon runs on.
#[derive(Debug)]
pub enum TestStore {
    /// sled under the daemon's `--data-dir`.
    Sled,
    Postgres(PgDatabase),
}

impl TestStore {
    /// A fresh PostgreSQL database, or `None` when the test is skipped.
    pub async fn postgres(test: &str) -> anyhow::Result<Option<TestStore>> {
        match postgres_url(test)? {
            Some(url) => Ok(Some(TestStore::Postgres(PgDatabase::create(&url).await?))),
            None => Ok(None),
        }
    }

    /// The `troupe serve` flags that select this store.
    pub fn args(&self) -> Vec<String> {
        match self {
            TestStore::Sled => vec!["--store".into(), "sled".into()],
            TestStore::Postgres(db) => vec!["--store".into(), db.url.clone()],
        }
    }
}

// ------------------------------------------------------------ private server

fn postgres_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/postgres.sh")
}

/// A PostgreSQL server of the test's own (`scripts/postgres.sh` in a temp
/// dir), for tests that stop and restart it. Stopped when dropped.
#[derive(Debug)]
pub struct PgServer {
    dir: tempfile::TempDir,
    pub url: String,
}

impl PgServer {
    /// Starts a new cluster, or `None` when PostgreSQL tests are skipped.
    pub async fn start(test: &str) -> anyhow::Result<Option<PgServer>> {
        if postgres_url(test)?.is_none() {
            return Ok(None);
        }
        let dir = tempfile::Builder::new().prefix("troupe-pg-").tempdir()?;
        let url = run_script("start", &dir).await?;
        Ok(Some(PgServer { dir, url }))
    }

    /// Stops the server (fast shutdown: open sessions are ended).
    pub async fn stop(&self) -> anyhow::Result<()> {
        run_script("stop", &self.dir).await.map(drop)
    }

    /// Freezes the server and its sessions (SIGSTOP), as a paused VM or
    /// container would: connections stay open and nothing answers.
    pub async fn pause(&self) -> anyhow::Result<()> {
        run_script("pause", &self.dir).await.map(drop)
    }

    /// Lets a paused server go on (SIGCONT).
    pub async fn resume(&self) -> anyhow::Result<()> {
        run_script("resume", &self.dir).await.map(drop)
    }

    /// Starts it again, on the same port.
    pub async fn restart(&self) -> anyhow::Result<()> {
        let url = run_script("start", &self.dir).await?;
        if url != self.url {
            bail!("the restarted server moved from {} to {url}", self.url);
        }
        Ok(())
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // A paused server cannot stop; resuming one that runs does nothing.
        let _ = std::process::Command::new(postgres_script())
            .arg("resume")
            .arg(self.dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        let _ = std::process::Command::new(postgres_script())
            .arg("stop")
            .arg(self.dir.path())
            .stdout(std::process::Stdio::null())
            .status();
    }
}

async fn run_script(command: &str, dir: &tempfile::TempDir) -> anyhow::Result<String> {
    let output = within(
        Duration::from_secs(120),
        "scripts/postgres.sh",
        Command::new(postgres_script())
            .arg(command)
            .arg(dir.path())
            .kill_on_drop(true)
            .output(),
    )
    .await??;
    if !output.status.success() {
        bail!(
            "scripts/postgres.sh {command} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// Reads one actor's state straight from PostgreSQL (no daemon involved).
pub async fn postgres_state(
    url: &str,
    actor_type: &str,
    actor_id: &str,
) -> anyhow::Result<std::collections::HashMap<String, bytes::Bytes>> {
    let store = troupe_storage_postgres::PostgresStore::connect(url).await?;
    use troupe_storage::StateStore as _;
    Ok(store
        .load(actor_type, actor_id)
        .await?
        .into_iter()
        .collect())
}

// ------------------------------------------------------------ write streams

/// What one writer saw: every acknowledged value with when it came back,
/// the last value it asked for, and the error that ended it (if any).
#[derive(Debug, Default, Clone)]
pub struct WriteLog {
    pub actor_id: String,
    pub acked: Vec<(Instant, i64)>,
    /// Calls sent; each adds 1, so the actor's value never exceeds this.
    pub sent: i64,
    pub error: Option<Status>,
}

impl WriteLog {
    pub fn last_acked(&self) -> i64 {
        self.acked.last().map_or(0, |(_, v)| *v)
    }

    /// The last value acknowledged at or before `at` (0 if none).
    pub fn acked_by(&self, at: Instant) -> i64 {
        self.acked
            .iter()
            .take_while(|(t, _)| *t <= at)
            .last()
            .map_or(0, |(_, v)| *v)
    }
}

/// Writers calling `incr_pair` on `ids` of `actor_type`, one call at a time
/// per actor, until told to stop or a call fails.
#[derive(Debug)]
pub struct WriteStream {
    stop: watch::Sender<bool>,
    acks: watch::Receiver<u64>,
    tasks: Vec<JoinHandle<WriteLog>>,
}

impl WriteStream {
    pub fn start(client: &Client, actor_type: &str, ids: &[String]) -> WriteStream {
        let (stop, stop_rx) = watch::channel(false);
        let (acks_tx, acks) = watch::channel(0u64);
        let acks_tx = Arc::new(acks_tx);
        let tasks = ids
            .iter()
            .map(|id| {
                let (mut client, ty, id) = (client.clone(), actor_type.to_owned(), id.clone());
                let (stop, acks) = (stop_rx.clone(), acks_tx.clone());
                tokio::spawn(async move {
                    let mut log = WriteLog {
                        actor_id: id.clone(),
                        ..WriteLog::default()
                    };
                    while !*stop.borrow() {
                        log.sent += 1;
                        let call = client.invoke_raw(&ty, &id, "incr_pair", "{}");
                        let result = match tokio::time::timeout(WAIT, call).await {
                            Ok(r) => r,
                            Err(_) => Err(Status::deadline_exceeded("test: the call hung")),
                        };
                        let value = result.and_then(|bytes| {
                            serde_json::from_slice::<i64>(&bytes).map_err(|e| {
                                Status::internal(format!("test: reply is not a number: {e}"))
                            })
                        });
                        match value {
                            Ok(v) => {
                                log.acked.push((Instant::now(), v));
                                acks.send_modify(|n| *n += 1);
                            }
                            Err(status) => {
                                log.error = Some(status);
                                break;
                            }
                        }
                    }
                    log
                })
            })
            .collect();
        WriteStream { stop, acks, tasks }
    }

    /// Waits (bounded) until `n` writes in all were acknowledged.
    pub async fn wait_acks(&mut self, n: u64) -> anyhow::Result<()> {
        within(
            WAIT,
            &format!("{n} acknowledged writes"),
            self.acks.wait_for(|a| *a >= n),
        )
        .await?
        .map_err(|_| anyhow::anyhow!("every writer stopped before {n} writes were acknowledged"))?;
        Ok(())
    }

    /// Acknowledged writes so far.
    pub fn acks(&self) -> u64 {
        *self.acks.borrow()
    }

    /// Collects the logs of writers that end by themselves (their daemon
    /// is gone, so their next call fails), without telling them to stop:
    /// a stop could end one between two calls, before any call failed.
    pub async fn ended(self) -> anyhow::Result<Vec<WriteLog>> {
        let mut logs = Vec::with_capacity(self.tasks.len());
        for task in self.tasks {
            logs.push(within(WAIT + WAIT, "a writer to fail", task).await??);
        }
        drop(self.stop);
        Ok(logs)
    }

    /// Tells the writers to stop after their current call and collects
    /// their logs (bounded).
    pub async fn finish(self) -> anyhow::Result<Vec<WriteLog>> {
        let _ = self.stop.send(true);
        let mut logs = Vec::with_capacity(self.tasks.len());
        for task in self.tasks {
            logs.push(within(WAIT + WAIT, "a writer to finish", task).await??);
        }
        Ok(logs)
    }
}

/// The two keys `incr_pair` sets, as numbers: (count, copy).
pub fn pair_of(
    state: &std::collections::HashMap<String, bytes::Bytes>,
) -> anyhow::Result<(i64, i64)> {
    let num = |k: &str| -> anyhow::Result<i64> {
        match state.get(k) {
            None => Ok(0),
            Some(v) => serde_json::from_slice::<i64>(v)
                .with_context(|| format!("state key {k} is not a number: {v:?}")),
        }
    };
    Ok((num("count")?, num("copy")?))
}

/// Actor ids `prefix-0` .. `prefix-{n-1}`.
pub fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// An actor type with the given state mode.
pub fn type_with_mode(name: &str, mode: crate::pb::StateMode) -> crate::pb::ActorTypeSpec {
    crate::pb::ActorTypeSpec {
        state_mode: mode as i32,
        ..crate::type_spec(name)
    }
}
