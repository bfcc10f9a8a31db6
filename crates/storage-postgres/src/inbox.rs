//! Inboxes and dead letters in PostgreSQL: `troupe_inbox (actor_type,
//! actor_id, seq) -> data` and `troupe_dead_letters`, written in the
//! statement of the state batch they came with (`batch_sql`), behind its
//! fencing claim, so the refused actors' inbox ops are left out and the
//! others land with their state.

use bytes::Bytes;
use deadpool_postgres::GenericClient;
use troupe_storage::{ActorWrite, DeadLetter, DeadLetterKey, InboxEntry};

pub(crate) const LOAD_INBOX: &str = "
SELECT seq, data FROM troupe_inbox WHERE actor_type = $1 AND actor_id = $2 ORDER BY seq";

pub(crate) const INBOX_ACTORS: &str = "
SELECT DISTINCT actor_type, actor_id FROM troupe_inbox
WHERE $1::text IS NULL OR (actor_type, actor_id) > ($1, $2)
ORDER BY actor_type, actor_id
LIMIT $3";

pub(crate) const LIST_DEAD: &str = "
SELECT actor_type, actor_id, seq, data, error, attempts, failed_ms FROM troupe_dead_letters
WHERE ($1::text IS NULL OR actor_type = $1)
  AND ($2::text IS NULL OR (actor_type, actor_id, seq) > ($2, $3, $4))
ORDER BY actor_type, actor_id, seq
LIMIT $5";

pub(crate) const GET_DEAD: &str = "
SELECT actor_type, actor_id, seq, data, error, attempts, failed_ms FROM troupe_dead_letters
WHERE actor_type = $1 AND actor_id = $2 AND seq = $3";

pub(crate) const REMOVE_DEAD: &str =
    "DELETE FROM troupe_dead_letters WHERE actor_type = $1 AND actor_id = $2 AND seq = $3";

/// A sequence number as bigint: the runtime's stay below 2^63.
pub(crate) fn sql_seq(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

fn seq_of(seq: i64) -> u64 {
    u64::try_from(seq).unwrap_or(0)
}

/// Whether any write of the batch carries inbox ops.
pub(crate) fn has_inbox(batch: &[ActorWrite]) -> bool {
    batch.iter().any(|w| !w.inbox.is_empty())
}

pub(crate) fn entry_of(row: &tokio_postgres::Row) -> Result<InboxEntry, tokio_postgres::Error> {
    let seq: i64 = row.try_get(0)?;
    let data: Vec<u8> = row.try_get(1)?;
    Ok(InboxEntry {
        seq: seq_of(seq),
        data: Bytes::from(data),
    })
}

pub(crate) fn dead_of(row: &tokio_postgres::Row) -> Result<DeadLetter, tokio_postgres::Error> {
    let seq: i64 = row.try_get(2)?;
    let data: Vec<u8> = row.try_get(3)?;
    let attempts: i64 = row.try_get(5)?;
    let failed: i64 = row.try_get(6)?;
    Ok(DeadLetter {
        key: DeadLetterKey {
            actor_type: row.try_get(0)?,
            actor_id: row.try_get(1)?,
            seq: seq_of(seq),
        },
        data: Bytes::from(data),
        error: row.try_get(4)?,
        attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
        failed_unix_ms: u64::try_from(failed).unwrap_or(0),
    })
}

// === the reads, as PostgresStore methods the StateStore impl calls ===

use troupe_storage::StoreError;

use crate::store::{bounded, PostgresStore};

impl PostgresStore {
    pub(crate) async fn inbox_load(
        &self,
        actor_type: &str,
        actor_id: &str,
    ) -> Result<Vec<InboxEntry>, StoreError> {
        const DOING: &str = "loading an actor's inbox";
        let op = async {
            let client = self.client(DOING).await?;
            let failed = |e: tokio_postgres::Error| self.query_error(DOING, &e);
            let statement = client.prepare_cached(LOAD_INBOX).await.map_err(failed)?;
            let rows = client
                .query(&statement, &[&actor_type, &actor_id])
                .await
                .map_err(failed)?;
            rows.iter().map(|r| entry_of(r).map_err(failed)).collect()
        };
        bounded(op)
            .await
            .map_err(|r| self.timeout_error(DOING, r))?
    }

    pub(crate) async fn inbox_list_actors(
        &self,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        self.actor_page(
            INBOX_ACTORS,
            "listing actors with inbox entries",
            after,
            limit,
        )
        .await
    }

    pub(crate) async fn dead_list(
        &self,
        actor_type: Option<&str>,
        after: Option<&DeadLetterKey>,
        limit: usize,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        const DOING: &str = "listing dead letters";
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let after_type = after.map(|a| a.actor_type.as_str());
        let after_id = after.map_or("", |a| a.actor_id.as_str());
        let after_seq = after.map_or(0, |a| sql_seq(a.seq));
        let op = async {
            let client = self.client(DOING).await?;
            let failed = |e: tokio_postgres::Error| self.query_error(DOING, &e);
            let statement = client.prepare_cached(LIST_DEAD).await.map_err(failed)?;
            let rows = client
                .query(
                    &statement,
                    &[&actor_type, &after_type, &after_id, &after_seq, &limit],
                )
                .await
                .map_err(failed)?;
            rows.iter().map(|r| dead_of(r).map_err(failed)).collect()
        };
        bounded(op)
            .await
            .map_err(|r| self.timeout_error(DOING, r))?
    }

    pub(crate) async fn dead_get(
        &self,
        key: &DeadLetterKey,
    ) -> Result<Option<DeadLetter>, StoreError> {
        const DOING: &str = "reading a dead letter";
        let op = async {
            let client = self.client(DOING).await?;
            let failed = |e: tokio_postgres::Error| self.query_error(DOING, &e);
            let statement = client.prepare_cached(GET_DEAD).await.map_err(failed)?;
            let row = client
                .query_opt(
                    &statement,
                    &[&key.actor_type, &key.actor_id, &sql_seq(key.seq)],
                )
                .await
                .map_err(failed)?;
            row.map(|r| dead_of(&r).map_err(failed)).transpose()
        };
        bounded(op)
            .await
            .map_err(|r| self.timeout_error(DOING, r))?
    }

    pub(crate) async fn dead_remove(&self, key: &DeadLetterKey) -> Result<bool, StoreError> {
        const DOING: &str = "dropping a dead letter";
        let op = async {
            let client = self.client(DOING).await?;
            let failed = |e: tokio_postgres::Error| self.query_error(DOING, &e);
            let statement = client.prepare_cached(REMOVE_DEAD).await.map_err(failed)?;
            let removed = client
                .execute(
                    &statement,
                    &[&key.actor_type, &key.actor_id, &sql_seq(key.seq)],
                )
                .await
                .map_err(failed)?;
            Ok(removed > 0)
        };
        bounded(op)
            .await
            .map_err(|r| self.timeout_error(DOING, r))?
    }
}
