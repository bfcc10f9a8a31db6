//! The database as of one instant, for a copy out of it while daemons may
//! still write: a transaction exports its snapshot (`pg_export_snapshot`)
//! and stays open; every connection of the reading store's pool imports it
//! before its first query, as `pg_dump`'s parallel jobs do. So the copy's
//! concurrent reads, page after page and table after table, all see the
//! same moment, and nothing committed after it.

use std::sync::Arc;

use tokio_postgres::NoTls;
use tracing::{info, warn};

use troupe_storage::StoreError;

use crate::store::{bounded, build_pool, error_text, PostgresStore};

/// The exporting transaction: importing the snapshot needs it open, and
/// the pool may open a connection at any time, so it stays open as long as
/// the store that reads the snapshot.
#[derive(Debug)]
pub(crate) struct Exported {
    /// Closing the client ends the transaction and its connection.
    _client: tokio_postgres::Client,
}

impl PostgresStore {
    /// A store that reads this database as it is now, whatever is committed
    /// after, for as long as it lives. Writes through it fail: its
    /// transactions are read-only. What daemons hold unflushed in memory
    /// (write-behind state) is not in the database, so not in the snapshot.
    /// The server keeps the rows the snapshot sees until it is dropped
    /// (vacuum waits), so hold it only for a copy.
    pub async fn snapshot(&self) -> Result<PostgresStore, StoreError> {
        const DOING: &str = "taking a snapshot";
        let failed = |e: tokio_postgres::Error| self.query_error(DOING, &e);
        let export = async {
            let (client, connection) =
                self.config
                    .connect(NoTls)
                    .await
                    .map_err(|e| StoreError::Connect {
                        url: self.url.clone(),
                        reason: error_text(&e),
                    })?;
            let url = self.url.clone();
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    warn!(store = %url, error = %error_text(&e), "the snapshot's connection failed");
                }
            });
            client
                .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                .await
                .map_err(failed)?;
            let row = client
                .query_one("SELECT pg_export_snapshot()", &[])
                .await
                .map_err(failed)?;
            let id: String = row.try_get(0).map_err(failed)?;
            Ok::<_, StoreError>((client, id))
        };
        let (client, id) = bounded(export)
            .await
            .map_err(|reason| self.timeout_error(DOING, reason))??;
        // The id is the server's (hex digits and dashes); doubled quotes
        // keep it a literal whatever it holds.
        let import = format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT '{}'",
            id.replace('\'', "''")
        );
        let pool = build_pool(&self.config, Some(import))?;
        info!(store = %self.url, snapshot = %id, "reading the database as of a snapshot");
        Ok(PostgresStore {
            pool,
            config: self.config.clone(),
            url: self.url.clone(),
            daemon_name: self.daemon_name.clone(),
            snapshot: Some(Arc::new(Exported { _client: client })),
        })
    }

    /// Whether this store reads one snapshot ([`PostgresStore::snapshot`]).
    pub fn is_snapshot(&self) -> bool {
        self.snapshot.is_some()
    }
}
