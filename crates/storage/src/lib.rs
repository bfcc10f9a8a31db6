//! Actor state stores.
//!
//! The runtime keeps each active actor's state in memory and hands dirty keys
//! to a [`StateStore`] in batches (write-behind). This crate owns the trait and
//! its implementations: [`SledStore`], the embedded default under
//! `--data-dir`, [`PostgresStore`], shared by several daemons
//! (`--store postgres://...`), and [`MemoryStore`], for tests and
//! benchmarks. A store only sees opaque bytes addressed by (actor type, actor
//! id, key).

mod memory;
mod postgres;
mod postgres_reminders;
mod reminders;
mod sled_store;

pub use memory::MemoryStore;
pub use postgres::PostgresStore;
pub use reminders::{MemoryReminders, ReminderKey, ReminderRecord, ReminderStore, SledReminders};
pub use sled_store::SledStore;

use async_trait::async_trait;
use bytes::Bytes;

/// Every key of one actor's stored state.
pub type StoredState = Vec<(String, Bytes)>;

/// The changes of one actor written by one flush.
#[derive(Debug, Clone)]
pub struct ActorWrite {
    pub actor_type: String,
    pub actor_id: String,
    /// `None` deletes the key.
    pub changes: Vec<(String, Option<Bytes>)>,
}

/// A storage failure. The message says what failed; the runtime keeps dirty
/// state in memory and retries, so no failure here loses data by itself.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the state store at {path}: {source} (check that the directory is writable and no other troupe daemon uses it)")]
    Open {
        path: String,
        #[source]
        source: sled::Error,
    },
    #[error(
        "cannot connect to PostgreSQL at {url}: {reason} (check that the server is running and \
         reachable there, and that the user, password and database in the URL are right)"
    )]
    Connect { url: String, reason: String },
    #[error(
        "invalid PostgreSQL connection URL: {0} (expected \
         postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE)"
    )]
    Config(String),
    #[error("cannot set up the state schema in PostgreSQL at {url}: {reason}")]
    Schema { url: String, reason: String },
    #[error("state store I/O failed: {0}")]
    Io(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
}

/// Where actor state lives between activations.
///
/// `write_batch` must apply the whole batch atomically and durably before it
/// returns: the runtime answers `durable` calls once it has.
#[async_trait]
pub trait StateStore: Send + Sync + std::fmt::Debug + 'static {
    /// A short description for status output, e.g. `sled:/var/lib/troupe`.
    fn describe(&self) -> String;

    /// Reads every key of one actor's state.
    async fn load(&self, actor_type: &str, actor_id: &str) -> Result<StoredState, StoreError>;

    /// Writes the changes of several actors as one atomic, durable batch.
    async fn write_batch(&self, batch: &[ActorWrite]) -> Result<(), StoreError>;

    /// Lists ids of actors of a type that have stored state, in id order,
    /// starting after `after`.
    async fn list_actors(
        &self,
        actor_type: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError>;
}

#[cfg(test)]
pub(crate) mod test_support {
    use bytes::Bytes;

    use crate::ActorWrite;

    /// One actor's changes; `None` deletes the key.
    pub fn write(ty: &str, id: &str, changes: &[(&str, Option<&str>)]) -> ActorWrite {
        ActorWrite {
            actor_type: ty.into(),
            actor_id: id.into(),
            changes: changes
                .iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        v.map(|v| Bytes::copy_from_slice(v.as_bytes())),
                    )
                })
                .collect(),
        }
    }

    /// `TROUPE_TEST_POSTGRES`, a connection URL for tests that need a real
    /// server. Unset: prints why `test` is skipped and returns `None`, unless
    /// `TROUPE_REQUIRE_POSTGRES=1`, which makes that an error.
    pub fn postgres_url(test: &str) -> Result<Option<String>, String> {
        match std::env::var("TROUPE_TEST_POSTGRES") {
            Ok(url) if !url.is_empty() => Ok(Some(url)),
            _ if std::env::var("TROUPE_REQUIRE_POSTGRES").is_ok_and(|v| v == "1") => Err(format!(
                "{test}: TROUPE_REQUIRE_POSTGRES=1 but TROUPE_TEST_POSTGRES is not set \
                 (scripts/postgres.sh start prints a URL)"
            )),
            _ => {
                eprintln!(
                    "skipped {test}: set TROUPE_TEST_POSTGRES to a PostgreSQL URL \
                     (scripts/postgres.sh start) to run it"
                );
                Ok(None)
            }
        }
    }
}
