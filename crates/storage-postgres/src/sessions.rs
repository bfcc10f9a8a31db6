//! Who else uses the database: the connections daemons hold to it, for the
//! offline tools (`troupe store copy`), which must not fill a store daemons
//! write to, nor take a copy of one they are changing unawares.

use troupe_storage::StoreError;

use crate::store::{bounded, PostgresStore};

/// Sessions in this database named as daemons name theirs, this one aside.
const DAEMON_SESSIONS: &str = "
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND application_name = $1 AND pid <> pg_backend_pid()";

impl PostgresStore {
    /// How many connections daemons hold to this database: those named as
    /// a daemon connecting with this store's URL names its own (the URL's
    /// `application_name`, else `troupe`). A store opened with
    /// [`PostgresStore::connect_as_tool`] does not count its own; one opened
    /// with [`PostgresStore::connect`] counts its own pool among them.
    pub async fn daemon_connections(&self) -> Result<u64, StoreError> {
        const DOING: &str = "counting the daemons connected";
        let op = async {
            let client = self.client(DOING).await?;
            let row = client
                .query_one(DAEMON_SESSIONS, &[&self.daemon_name])
                .await
                .map_err(|e| self.query_error(DOING, &e))?;
            let count: i64 = row.try_get(0).map_err(|e| self.query_error(DOING, &e))?;
            Ok(u64::try_from(count).unwrap_or(0))
        };
        bounded(op)
            .await
            .map_err(|reason| self.timeout_error(DOING, reason))?
    }
}
