//! The handle on one PostgreSQL database: its connection pool, the schema
//! migrations run on start, time bounds on every operation, and error text
//! that names the database without its password.
//!
//! - The schema is created and migrated on start: `troupe_schema_version`
//!   records the applied version; migrations run in one transaction under an
//!   advisory lock, so daemons starting together do not race, and each is
//!   idempotent.
//! - Connections come from a deadpool pool; every operation is bounded in
//!   time, so a database that is down or hangs turns into an error the
//!   runtime can answer (UNAVAILABLE for `durable` calls, retry with backoff
//!   for write-behind), never into a stuck flush.

use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Hook, HookError, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::config::Host;
use tokio_postgres::NoTls;
use tracing::info;

use troupe_storage::StoreError;

/// Connections kept by one daemon. The flusher uses one at a time (its
/// writes are serialised); the rest serve activations' loads and reads.
const POOL_SIZE: usize = 16;
/// Opening one connection (TCP + startup + authentication).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Waiting for a free pooled connection.
const POOL_WAIT_TIMEOUT: Duration = Duration::from_secs(10);
/// Any one operation, connection included. A batch whose commit does not
/// answer in this time is reported failed; the runtime keeps it dirty and
/// writes the current values again, so an uncertain outcome is harmless.
const OPERATION_TIMEOUT: Duration = Duration::from_secs(30);
/// The `application_name` of a daemon's connections unless its URL names
/// one: how the offline tools tell daemons' sessions from their own.
const DAEMON_APPLICATION_NAME: &str = "troupe";
/// Any number fits: advisory-lock key of the schema migrations ("troupe").
const MIGRATION_LOCK: i64 = 0x7472_6f75_7065;

/// Schema migrations, in order. Version N is `MIGRATIONS[N - 1]`. Each must
/// be idempotent (`IF NOT EXISTS`), and a released one is never changed:
/// changes go in a new entry.
const MIGRATIONS: &[&str] = &[
    // 1: actor state.
    "CREATE TABLE IF NOT EXISTS troupe_state (
        actor_type text COLLATE \"C\" NOT NULL,
        actor_id   text COLLATE \"C\" NOT NULL,
        key        text COLLATE \"C\" NOT NULL,
        value      bytea NOT NULL,
        PRIMARY KEY (actor_type, actor_id, key)
    )",
    // 2: reminders and alarms, with the due-time index the scheduler loads by.
    "CREATE TABLE IF NOT EXISTS troupe_reminders (
        actor_type text COLLATE \"C\" NOT NULL,
        actor_id   text COLLATE \"C\" NOT NULL,
        name       text COLLATE \"C\" NOT NULL,
        due_ms     bigint NOT NULL,
        data       bytea NOT NULL,
        PRIMARY KEY (actor_type, actor_id, name)
    );
    CREATE INDEX IF NOT EXISTS troupe_reminders_by_due
        ON troupe_reminders (due_ms, actor_type, actor_id, name)",
    // 3: owner epochs, the fencing tokens state and reminder writes are
    // checked against (only actors written by a daemon in a cluster).
    "CREATE TABLE IF NOT EXISTS troupe_actor_epochs (
        actor_type text COLLATE \"C\" NOT NULL,
        actor_id   text COLLATE \"C\" NOT NULL,
        epoch      bigint NOT NULL,
        PRIMARY KEY (actor_type, actor_id)
    )",
    // 4: actor inboxes (durable tells, written with the state batch of
    // their actor) and the dead letters they become.
    "CREATE TABLE IF NOT EXISTS troupe_inbox (
        actor_type text COLLATE \"C\" NOT NULL,
        actor_id   text COLLATE \"C\" NOT NULL,
        seq        bigint NOT NULL,
        data       bytea NOT NULL,
        PRIMARY KEY (actor_type, actor_id, seq)
    );
    CREATE TABLE IF NOT EXISTS troupe_dead_letters (
        actor_type text COLLATE \"C\" NOT NULL,
        actor_id   text COLLATE \"C\" NOT NULL,
        seq        bigint NOT NULL,
        data       bytea NOT NULL,
        error      text NOT NULL,
        attempts   bigint NOT NULL,
        failed_ms  bigint NOT NULL,
        PRIMARY KEY (actor_type, actor_id, seq)
    )",
    // 5: call records (answers of keyed calls, written with the state batch
    // of their actor), with the age index expiry deletes by. No per-actor
    // age index: every keyed call writes a row, an activation reads its
    // actor's rows once (sorting them is cheaper than a third index).
    "CREATE TABLE IF NOT EXISTS troupe_call_records (
        actor_type  text COLLATE \"C\" NOT NULL,
        actor_id    text COLLATE \"C\" NOT NULL,
        key         text COLLATE \"C\" NOT NULL,
        recorded_ms bigint NOT NULL,
        data        bytea NOT NULL,
        PRIMARY KEY (actor_type, actor_id, key)
    );
    CREATE INDEX IF NOT EXISTS troupe_call_records_by_age
        ON troupe_call_records (recorded_ms)",
];

/// Actor state in a PostgreSQL database.
#[derive(Clone)]
pub struct PostgresStore {
    pub(crate) pool: Pool,
    /// What each connection is opened with (a snapshot's pool is built
    /// from it).
    pub(crate) config: tokio_postgres::Config,
    /// The connection URL without its password, for messages.
    pub(crate) url: String,
    /// The `application_name` daemons connecting with this URL use.
    pub(crate) daemon_name: String,
    /// Set on a store that reads one snapshot ([`PostgresStore::snapshot`]):
    /// the transaction that exported it, open while any clone lives.
    pub(crate) snapshot: Option<Arc<crate::snapshot::Exported>>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to `url` (`postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`,
    /// or libpq's `key=value` form), checks that the database answers and
    /// creates or migrates the schema.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::open(url, None).await
    }

    /// Connects as the offline tool `tool`, which names its connections so
    /// (`application_name`, whatever the URL says) for
    /// [`PostgresStore::daemon_connections`] to tell them from daemons'.
    pub async fn connect_as_tool(url: &str, tool: &str) -> Result<Self, StoreError> {
        Self::open(url, Some(tool)).await
    }

    async fn open(url: &str, tool: Option<&str>) -> Result<Self, StoreError> {
        let mut config = tokio_postgres::Config::from_str(url).map_err(|e| {
            StoreError::Config(format!("{} ({})", error_text(&e), redact_unparsed(url)))
        })?;
        config.connect_timeout(CONNECT_TIMEOUT);
        let daemon_name = config
            .get_application_name()
            .unwrap_or(DAEMON_APPLICATION_NAME)
            .to_owned();
        config.application_name(tool.unwrap_or(&daemon_name));
        let shown = describe_config(&config);
        let pool = build_pool(&config, None)?;
        let store = Self {
            pool,
            config,
            url: shown,
            daemon_name,
            snapshot: None,
        };
        let version = store.migrate().await?;
        info!(store = %store.url, schema_version = version, "PostgreSQL state store ready");
        Ok(store)
    }

    /// `url` as it may be shown: without its password.
    pub fn redact(url: &str) -> String {
        match tokio_postgres::Config::from_str(url) {
            Ok(config) => describe_config(&config),
            Err(_) => redact_unparsed(url),
        }
    }

    /// Creates or upgrades the schema; returns the version in force.
    async fn migrate(&self) -> Result<i32, StoreError> {
        let connect_error = |reason: String| StoreError::Connect {
            url: self.url.clone(),
            reason,
        };
        let mut client = bounded(self.pool.get())
            .await
            .map_err(connect_error)?
            .map_err(|e| connect_error(pool_error_text(&e)))?;
        let schema_error = |e: tokio_postgres::Error| StoreError::Schema {
            url: self.url.clone(),
            reason: error_text(&e),
        };
        let migrate = async {
            let tx = client.transaction().await.map_err(schema_error)?;
            // Daemons starting together take turns here.
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
                .await
                .map_err(schema_error)?;
            tx.batch_execute(
                "CREATE TABLE IF NOT EXISTS troupe_schema_version (
                    version integer NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )",
            )
            .await
            .map_err(schema_error)?;
            let row = tx
                .query_one(
                    "SELECT COALESCE(max(version), 0) FROM troupe_schema_version",
                    &[],
                )
                .await
                .map_err(schema_error)?;
            let current: i32 = row.try_get(0).map_err(schema_error)?;
            let known = i32::try_from(MIGRATIONS.len()).unwrap_or(i32::MAX);
            if current > known {
                return Err(StoreError::Schema {
                    url: self.url.clone(),
                    reason: format!(
                        "the database has schema version {current}, newer than this troupe \
                         knows ({known}); upgrade troupe before pointing it at this database"
                    ),
                });
            }
            for (index, sql) in MIGRATIONS.iter().enumerate().skip(current.max(0) as usize) {
                let version = i32::try_from(index + 1).unwrap_or(i32::MAX);
                tx.batch_execute(sql).await.map_err(schema_error)?;
                tx.execute(
                    "INSERT INTO troupe_schema_version (version) VALUES ($1)",
                    &[&version],
                )
                .await
                .map_err(schema_error)?;
                info!(store = %self.url, version, "applied state schema migration");
            }
            tx.commit().await.map_err(schema_error)?;
            Ok(known)
        };
        bounded(migrate)
            .await
            .map_err(|reason| StoreError::Schema {
                url: self.url.clone(),
                reason,
            })?
    }

    /// A pooled connection, or an error that says the database is not
    /// reachable.
    pub(crate) async fn client(
        &self,
        doing: &str,
    ) -> Result<deadpool_postgres::Client, StoreError> {
        self.pool.get().await.map_err(|e| {
            StoreError::Io(format!(
                "PostgreSQL at {}: {doing}: no connection: {} (is the server running and \
                 reachable?)",
                self.url,
                pool_error_text(&e)
            ))
        })
    }

    pub(crate) fn query_error(&self, doing: &str, e: &tokio_postgres::Error) -> StoreError {
        StoreError::Io(format!(
            "PostgreSQL at {}: {doing} failed: {}",
            self.url,
            error_text(e)
        ))
    }

    pub(crate) fn timeout_error(&self, doing: &str, reason: String) -> StoreError {
        StoreError::Io(format!("PostgreSQL at {}: {doing}: {reason}", self.url))
    }
}

/// The pool of connections `config` opens; with `on_open`, each connection
/// runs that SQL before its first use (a snapshot's import).
pub(crate) fn build_pool(
    config: &tokio_postgres::Config,
    on_open: Option<String>,
) -> Result<Pool, StoreError> {
    let manager = Manager::from_config(
        config.clone(),
        NoTls,
        ManagerConfig {
            // A connection the server closed (restart, failover) is dropped
            // here rather than failing the next operation. (The other
            // methods run SQL on reuse, which would end a snapshot's
            // transaction.)
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let mut builder = Pool::builder(manager)
        .max_size(POOL_SIZE)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(POOL_WAIT_TIMEOUT))
        .create_timeout(Some(CONNECT_TIMEOUT))
        .recycle_timeout(Some(CONNECT_TIMEOUT));
    if let Some(sql) = on_open {
        let sql = Arc::new(sql);
        builder = builder.post_create(Hook::async_fn(move |client, _| {
            let sql = Arc::clone(&sql);
            Box::pin(async move { client.batch_execute(&sql).await.map_err(HookError::Backend) })
        }));
    }
    builder
        .build()
        .map_err(|e| StoreError::Config(format!("building the connection pool: {e}")))
}

/// Runs `fut` for at most [`OPERATION_TIMEOUT`].
pub(crate) async fn bounded<T>(fut: impl Future<Output = T>) -> Result<T, String> {
    tokio::time::timeout(OPERATION_TIMEOUT, fut)
        .await
        .map_err(|_| format!("no answer within {OPERATION_TIMEOUT:?}"))
}

/// An error with its causes: tokio-postgres puts the interesting part (the
/// server's message, the OS error) in the source chain.
pub(crate) fn error_text(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut text = format!(
            "{}: {} (SQLSTATE {})",
            db.severity(),
            db.message(),
            db.code().code()
        );
        if let Some(hint) = db.hint() {
            text.push_str(&format!("; hint: {hint}"));
        }
        return text;
    }
    chain_text(e)
}

fn chain_text(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn pool_error_text(e: &deadpool_postgres::PoolError) -> String {
    match e {
        deadpool_postgres::PoolError::Backend(e) => error_text(e),
        other => chain_text(other),
    }
}

/// `postgres://user@host:port/db`: what a person needs to find the
/// database, never the password.
pub(crate) fn describe_config(config: &tokio_postgres::Config) -> String {
    let mut out = String::from("postgres://");
    if let Some(user) = config.get_user() {
        out.push_str(user);
        out.push('@');
    }
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let name = match host {
                Host::Tcp(name) => name.clone(),
                #[cfg(unix)]
                Host::Unix(path) => path.display().to_string(),
            };
            // One port for all hosts, or one per host; 5432 by default.
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            format!("{name}:{port}")
        })
        .collect();
    out.push_str(&hosts.join(","));
    out.push('/');
    if let Some(db) = config.get_dbname() {
        out.push_str(db);
    }
    out
}

/// For a URL that does not even parse: the text up to the user info, so a
/// password in it is never printed.
fn redact_unparsed(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((_, host)) => format!("{scheme}://***@{host}"),
            None => url.to_owned(),
        },
        None if url.contains("password") => "a key=value connection string".to_owned(),
        None => url.to_owned(),
    }
}
