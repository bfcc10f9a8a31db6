//! Call records in PostgreSQL: `troupe_call_records (actor_type, actor_id,
//! key) -> recorded_ms, data`, written in the statement of the state batch
//! they came with (`batch_sql`; a key recorded already keeps its first
//! answer), behind its fencing claim, so a refused actor's records are left
//! out and the others land with their state. Expiry deletes by the
//! `recorded_ms` index, oldest first.

use bytes::Bytes;
use deadpool_postgres::GenericClient;
use troupe_storage::{ActorWrite, CallRecord, RecordedKey, StoreError};

use crate::store::{bounded, PostgresStore};

const LOAD_RECORD_KEYS: &str = "
SELECT key, recorded_ms FROM troupe_call_records
WHERE actor_type = $1 AND actor_id = $2 AND recorded_ms >= $3
ORDER BY recorded_ms DESC LIMIT $4";

const LOAD_RECORD: &str = "
SELECT key, recorded_ms, data FROM troupe_call_records
WHERE actor_type = $1 AND actor_id = $2 AND key = $3";

const EXPIRE_RECORDS: &str = "
DELETE FROM troupe_call_records WHERE ctid IN (
    SELECT ctid FROM troupe_call_records WHERE recorded_ms < $1
    ORDER BY recorded_ms LIMIT $2)";

fn recorded_key_of(row: &tokio_postgres::Row) -> Result<RecordedKey, tokio_postgres::Error> {
    let at: i64 = row.try_get(1)?;
    Ok(RecordedKey {
        key: row.try_get(0)?,
        recorded_unix_ms: u64::try_from(at).unwrap_or(0),
    })
}

pub(crate) fn record_of(row: &tokio_postgres::Row) -> Result<CallRecord, tokio_postgres::Error> {
    let RecordedKey {
        key,
        recorded_unix_ms,
    } = recorded_key_of(row)?;
    let data: Vec<u8> = row.try_get(2)?;
    Ok(CallRecord {
        key,
        recorded_unix_ms,
        data: Bytes::from(data),
        new_key: false,
    })
}

fn sql_ms(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// Whether any write of the batch carries call records.
pub(crate) fn has_records(batch: &[ActorWrite]) -> bool {
    batch.iter().any(|w| !w.records.is_empty())
}

impl PostgresStore {
    pub(crate) async fn record_keys_load(
        &self,
        actor_type: &str,
        actor_id: &str,
        since_unix_ms: u64,
        limit: usize,
    ) -> Result<Vec<RecordedKey>, StoreError> {
        const DOING: &str = "loading an actor's call-record keys";
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let op = async {
            let client = self.client(DOING).await?;
            let failed = |e: tokio_postgres::Error| self.query_error(DOING, &e);
            let statement = client
                .prepare_cached(LOAD_RECORD_KEYS)
                .await
                .map_err(failed)?;
            let rows = client
                .query(
                    &statement,
                    &[&actor_type, &actor_id, &sql_ms(since_unix_ms), &limit],
                )
                .await
                .map_err(failed)?;
            rows.iter()
                .map(recorded_key_of)
                .collect::<Result<Vec<_>, tokio_postgres::Error>>()
                .map_err(failed)
        };
        bounded(op)
            .await
            .map_err(|r| self.timeout_error(DOING, r))?
    }

    pub(crate) async fn record_get(
        &self,
        actor_type: &str,
        actor_id: &str,
        key: &str,
    ) -> Result<Option<CallRecord>, StoreError> {
        const DOING: &str = "reading a call record";
        let op = async {
            let client = self.client(DOING).await?;
            let failed = |e: tokio_postgres::Error| self.query_error(DOING, &e);
            let statement = client.prepare_cached(LOAD_RECORD).await.map_err(failed)?;
            let row = client
                .query_opt(&statement, &[&actor_type, &actor_id, &key])
                .await
                .map_err(failed)?;
            row.as_ref().map(record_of).transpose().map_err(failed)
        };
        bounded(op)
            .await
            .map_err(|r| self.timeout_error(DOING, r))?
    }

    pub(crate) async fn records_expire(
        &self,
        before_unix_ms: u64,
        limit: usize,
    ) -> Result<u64, StoreError> {
        const DOING: &str = "expiring call records";
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let op = async {
            let client = self.client(DOING).await?;
            let failed = |e: tokio_postgres::Error| self.query_error(DOING, &e);
            let statement = client
                .prepare_cached(EXPIRE_RECORDS)
                .await
                .map_err(failed)?;
            client
                .execute(&statement, &[&sql_ms(before_unix_ms), &limit])
                .await
                .map_err(failed)
        };
        bounded(op)
            .await
            .map_err(|r| self.timeout_error(DOING, r))?
    }
}
