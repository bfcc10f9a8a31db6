//! Inboxes and dead letters in PostgreSQL: `troupe_inbox (actor_type,
//! actor_id, seq) -> data` and `troupe_dead_letters`, written in the
//! transaction of the state batch they came with (see
//! [`crate::state`]), after its fencing statement, so the refused actors'
//! inbox ops are left out and the others land with their state.

use std::collections::HashSet;

use bytes::Bytes;
use deadpool_postgres::GenericClient;
use troupe_storage::{ActorWrite, DeadLetter, DeadLetterKey, InboxEntry, InboxOp};

/// Appends ($1..$4), removals ($5..$7: handled tells and dead letters) and
/// dead letters ($8..$14) of one batch in one statement. A batch never
/// names one seq twice for an actor, so no two parts touch one row.
const WRITE_INBOX: &str = "
WITH appended AS (
    INSERT INTO troupe_inbox (actor_type, actor_id, seq, data)
    SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bytea[])
    ON CONFLICT (actor_type, actor_id, seq) DO UPDATE SET data = EXCLUDED.data
), removed AS (
    DELETE FROM troupe_inbox i
    USING unnest($5::text[], $6::text[], $7::bigint[]) AS d(actor_type, actor_id, seq)
    WHERE i.actor_type = d.actor_type AND i.actor_id = d.actor_id AND i.seq = d.seq
)
INSERT INTO troupe_dead_letters (actor_type, actor_id, seq, data, error, attempts, failed_ms)
SELECT * FROM unnest($8::text[], $9::text[], $10::bigint[], $11::bytea[], $12::text[],
                     $13::bigint[], $14::bigint[])
ON CONFLICT (actor_type, actor_id, seq) DO UPDATE SET data = EXCLUDED.data,
    error = EXCLUDED.error, attempts = EXCLUDED.attempts, failed_ms = EXCLUDED.failed_ms";

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

/// Writes the inbox ops of `batch`, except those of `refused` actors.
pub(crate) async fn write(
    client: &impl GenericClient,
    batch: &[ActorWrite],
    refused: &HashSet<(String, String)>,
) -> Result<(), tokio_postgres::Error> {
    let (mut a_ty, mut a_id, mut a_seq, mut a_data) = (vec![], vec![], vec![], vec![]);
    let (mut r_ty, mut r_id, mut r_seq) = (vec![], vec![], vec![]);
    let (mut d_ty, mut d_id, mut d_seq, mut d_data) = (vec![], vec![], vec![], vec![]);
    let (mut d_err, mut d_attempts, mut d_failed) = (vec![], vec![], vec![]);
    for w in batch {
        if refused.contains(&(w.actor_type.clone(), w.actor_id.clone())) {
            continue;
        }
        let (ty, id) = (w.actor_type.as_str(), w.actor_id.as_str());
        for op in &w.inbox {
            match op {
                InboxOp::Append(entry) => {
                    a_ty.push(ty);
                    a_id.push(id);
                    a_seq.push(sql_seq(entry.seq));
                    a_data.push(entry.data.as_ref());
                }
                InboxOp::Remove { seq } => {
                    r_ty.push(ty);
                    r_id.push(id);
                    r_seq.push(sql_seq(*seq));
                }
                InboxOp::DeadLetter(letter) => {
                    r_ty.push(ty);
                    r_id.push(id);
                    r_seq.push(sql_seq(letter.key.seq));
                    d_ty.push(ty);
                    d_id.push(id);
                    d_seq.push(sql_seq(letter.key.seq));
                    d_data.push(letter.data.as_ref());
                    d_err.push(letter.error.as_str());
                    d_attempts.push(i64::from(letter.attempts));
                    d_failed.push(i64::try_from(letter.failed_unix_ms).unwrap_or(i64::MAX));
                }
            }
        }
    }
    if a_ty.is_empty() && r_ty.is_empty() {
        return Ok(());
    }
    let statement = client.prepare_cached(WRITE_INBOX).await?;
    client
        .execute(
            &statement,
            &[
                &a_ty,
                &a_id,
                &a_seq,
                &a_data,
                &r_ty,
                &r_id,
                &r_seq,
                &d_ty,
                &d_id,
                &d_seq,
                &d_data,
                &d_err,
                &d_attempts,
                &d_failed,
            ],
        )
        .await?;
    Ok(())
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
        const DOING: &str = "listing actors with inbox entries";
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let (after_type, after_id) = (after.map(|a| a.0), after.map_or("", |a| a.1));
        let op = async {
            let client = self.client(DOING).await?;
            let failed = |e: tokio_postgres::Error| self.query_error(DOING, &e);
            let statement = client.prepare_cached(INBOX_ACTORS).await.map_err(failed)?;
            let rows = client
                .query(&statement, &[&after_type, &after_id, &limit])
                .await
                .map_err(failed)?;
            rows.iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect::<Result<Vec<_>, tokio_postgres::Error>>()
                .map_err(failed)
        };
        bounded(op)
            .await
            .map_err(|r| self.timeout_error(DOING, r))?
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
