//! What troupe's tables take in the database, for `troupe status` and
//! `troupe_store_size_bytes`: their heaps, indexes and TOAST, as PostgreSQL
//! counts them. The database may hold other tables; those are not troupe's
//! to report.

use crate::store::{bounded, PostgresStore};

/// Troupe's tables in the schema the store created them in (the first of
/// the connection's search path).
const TABLES_SIZE: &str = "
SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::bigint
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'r' AND n.nspname = current_schema() AND c.relname LIKE 'troupe\\_%'";

impl PostgresStore {
    /// The bytes of troupe's tables; `None` when the server does not answer
    /// in time (status output shows the size as unknown then).
    pub(crate) async fn tables_size(&self) -> Option<u64> {
        const DOING: &str = "reading the size of troupe's tables";
        let op = async {
            let client = self.client(DOING).await.ok()?;
            let row = client.query_one(TABLES_SIZE, &[]).await.ok()?;
            let bytes: i64 = row.try_get(0).ok()?;
            u64::try_from(bytes).ok()
        };
        bounded(op).await.ok().flatten()
    }
}
