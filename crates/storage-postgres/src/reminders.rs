//! Reminders in PostgreSQL, beside the state, so daemons sharing a database
//! share their reminders. Same contract as the sled store: a batch of puts
//! and deletes is one statement (one round trip, one transaction); a fenced
//! batch (a daemon in a cluster) first locks and checks its actors' epochs
//! in the same transaction.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use bytes::Bytes;

use deadpool_postgres::GenericClient;
use troupe_storage::fencing::EpochCheck;
use troupe_storage::{
    ReminderApplied, ReminderKey, ReminderOp, ReminderRecord, ReminderStore, ReminderWrite,
    StoreError,
};

use crate::state::sql_epoch;
use crate::store::{bounded, PostgresStore};

/// Locks (creating at 0) and reads the epochs of the actors $1, $2 a fenced
/// batch writes; ON CONFLICT sees the newest committed epoch.
const LOCK_EPOCHS: &str = "
INSERT INTO troupe_actor_epochs AS e (actor_type, actor_id, epoch)
SELECT actor_type, actor_id, 0 FROM unnest($1::text[], $2::text[]) AS u(actor_type, actor_id)
ON CONFLICT (actor_type, actor_id) DO UPDATE SET epoch = e.epoch
RETURNING e.actor_type, e.actor_id, e.epoch";

/// Raises epochs to what the batch's admitted writes carried.
const RAISE_EPOCHS: &str = "
UPDATE troupe_actor_epochs e SET epoch = u.epoch
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(actor_type, actor_id, epoch)
WHERE e.actor_type = u.actor_type AND e.actor_id = u.actor_id AND e.epoch < u.epoch";

/// `existing` reads the deleted keys in the statement's snapshot (before
/// its changes), so each delete can say whether the reminder was there.
/// $1..$5: final puts; $6..$8: keys deleted by some op; $9..$11: keys whose
/// last op is a delete. Each key is touched at most once by the changes.
const APPLY: &str = "
WITH existing AS (
    SELECT r.actor_type, r.actor_id, r.name FROM troupe_reminders r
    JOIN unnest($6::text[], $7::text[], $8::text[]) AS d(actor_type, actor_id, name)
      ON r.actor_type = d.actor_type AND r.actor_id = d.actor_id AND r.name = d.name
), deleted AS (
    DELETE FROM troupe_reminders r
    USING unnest($9::text[], $10::text[], $11::text[]) AS d(actor_type, actor_id, name)
    WHERE r.actor_type = d.actor_type AND r.actor_id = d.actor_id AND r.name = d.name
), upserted AS (
    INSERT INTO troupe_reminders (actor_type, actor_id, name, due_ms, data)
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bytea[])
    ON CONFLICT (actor_type, actor_id, name)
    DO UPDATE SET due_ms = EXCLUDED.due_ms, data = EXCLUDED.data
)
SELECT actor_type, actor_id, name FROM existing";

const GET: &str = "SELECT due_ms, data FROM troupe_reminders
    WHERE actor_type = $1 AND actor_id = $2 AND name = $3";

const DUE: &str = "SELECT actor_type, actor_id, name, due_ms, data FROM troupe_reminders
    WHERE due_ms <= $1
      AND ($2::bigint IS NULL OR (due_ms, actor_type, actor_id, name) > ($2, $3, $4, $5))
    ORDER BY due_ms, actor_type, actor_id, name
    LIMIT $6";

const LIST: &str = "SELECT actor_type, actor_id, name, due_ms, data FROM troupe_reminders
    WHERE ($1::text IS NULL OR actor_type = $1)
      AND ($2::text IS NULL OR actor_id = $2)
      AND ($3::text IS NULL OR (actor_type, actor_id, name) > ($3, $4, $5))
    ORDER BY actor_type, actor_id, name
    LIMIT $6";

fn to_ms(due: u64) -> i64 {
    i64::try_from(due).unwrap_or(i64::MAX)
}

fn record(row: &tokio_postgres::Row) -> Result<ReminderRecord, tokio_postgres::Error> {
    let due: i64 = row.try_get(3)?;
    let data: Vec<u8> = row.try_get(4)?;
    Ok(ReminderRecord {
        key: ReminderKey {
            actor_type: row.try_get(0)?,
            actor_id: row.try_get(1)?,
            name: row.try_get(2)?,
        },
        due_unix_ms: u64::try_from(due).unwrap_or(0),
        data: Bytes::from(data),
    })
}

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[async_trait]
impl ReminderStore for PostgresStore {
    async fn apply_reminders(
        &self,
        writes: &[ReminderWrite],
    ) -> Result<Vec<ReminderApplied>, StoreError> {
        const DOING: &str = "writing reminders";
        let op = async {
            let mut client = self.client(DOING).await?;
            let failed = |e: tokio_postgres::Error| self.query_error(DOING, &e);
            if writes.iter().all(|w| w.epoch.is_none()) {
                // Not fenced: one statement, one round trip.
                let admitted = vec![true; writes.len()];
                return apply_admitted(&client, writes, &admitted)
                    .await
                    .map_err(failed);
            }
            // Fenced: lock the actors' epochs, decide, raise and write in
            // one transaction, so no claim comes in between.
            let tx = client.transaction().await.map_err(failed)?;
            let mut actors: Vec<(&str, &str)> = writes
                .iter()
                .filter(|w| w.epoch.is_some())
                .map(|w| {
                    let key = w.op.key();
                    (key.actor_type.as_str(), key.actor_id.as_str())
                })
                .collect();
            actors.sort_unstable();
            actors.dedup();
            let (types, ids): (Vec<&str>, Vec<&str>) = actors.into_iter().unzip();
            let statement = tx.prepare_cached(LOCK_EPOCHS).await.map_err(failed)?;
            let rows = tx
                .query(&statement, &[&types, &ids])
                .await
                .map_err(failed)?;
            let stored = rows
                .iter()
                .map(|row| {
                    let epoch: i64 = row.try_get(2)?;
                    Ok((
                        (row.try_get(0)?, row.try_get(1)?),
                        u64::try_from(epoch).unwrap_or(0),
                    ))
                })
                .collect::<Result<Vec<_>, tokio_postgres::Error>>()
                .map_err(failed)?;
            let mut check = EpochCheck::new(stored);
            let admitted: Vec<bool> = writes
                .iter()
                .map(|w| {
                    let key = w.op.key();
                    check.admit(&key.actor_type, &key.actor_id, w.epoch)
                })
                .collect();
            let (mut rt, mut ri, mut re) = (Vec::new(), Vec::new(), Vec::new());
            for (ty, id, epoch) in check.raised() {
                rt.push(ty);
                ri.push(id);
                re.push(sql_epoch(epoch));
            }
            if !rt.is_empty() {
                let statement = tx.prepare_cached(RAISE_EPOCHS).await.map_err(failed)?;
                tx.execute(&statement, &[&rt, &ri, &re])
                    .await
                    .map_err(failed)?;
            }
            let answers = apply_admitted(&tx, writes, &admitted)
                .await
                .map_err(failed)?;
            tx.commit().await.map_err(failed)?;
            Ok(answers)
        };
        bounded(op)
            .await
            .map_err(|r| self.timeout_error(DOING, r))?
    }

    async fn get_reminder(&self, key: &ReminderKey) -> Result<Option<ReminderRecord>, StoreError> {
        const DOING: &str = "reading a reminder";
        let op = async {
            let client = self.client(DOING).await?;
            let rows = client
                .query(GET, &[&key.actor_type, &key.actor_id, &key.name])
                .await
                .map_err(|e| self.query_error(DOING, &e))?;
            let Some(row) = rows.first() else {
                return Ok(None);
            };
            let due: i64 = row.try_get(0).map_err(|e| self.query_error(DOING, &e))?;
            let data: Vec<u8> = row.try_get(1).map_err(|e| self.query_error(DOING, &e))?;
            Ok(Some(ReminderRecord {
                key: key.clone(),
                due_unix_ms: u64::try_from(due).unwrap_or(0),
                data: Bytes::from(data),
            }))
        };
        bounded(op)
            .await
            .map_err(|r| self.timeout_error(DOING, r))?
    }

    async fn due_reminders(
        &self,
        after: Option<(u64, &ReminderKey)>,
        until_unix_ms: u64,
        limit_n: usize,
    ) -> Result<Vec<ReminderRecord>, StoreError> {
        const DOING: &str = "loading due reminders";
        let after_due = after.map(|(d, _)| to_ms(d));
        let (t, i, n) = match after {
            Some((_, k)) => (
                Some(k.actor_type.as_str()),
                Some(k.actor_id.as_str()),
                Some(k.name.as_str()),
            ),
            None => (None, None, None),
        };
        let op = async {
            let client = self.client(DOING).await?;
            let statement = client
                .prepare_cached(DUE)
                .await
                .map_err(|e| self.query_error(DOING, &e))?;
            let rows = client
                .query(
                    &statement,
                    &[
                        &to_ms(until_unix_ms),
                        &after_due,
                        &t,
                        &i,
                        &n,
                        &limit(limit_n),
                    ],
                )
                .await
                .map_err(|e| self.query_error(DOING, &e))?;
            rows.iter()
                .map(|r| record(r).map_err(|e| self.query_error(DOING, &e)))
                .collect()
        };
        bounded(op)
            .await
            .map_err(|r| self.timeout_error(DOING, r))?
    }

    async fn list_reminders(
        &self,
        actor_type: Option<&str>,
        actor_id: Option<&str>,
        after: Option<&ReminderKey>,
        limit_n: usize,
    ) -> Result<Vec<ReminderRecord>, StoreError> {
        const DOING: &str = "listing reminders";
        let (t, i, n) = match after {
            Some(k) => (
                Some(k.actor_type.as_str()),
                Some(k.actor_id.as_str()),
                Some(k.name.as_str()),
            ),
            None => (None, None, None),
        };
        let op = async {
            let client = self.client(DOING).await?;
            let statement = client
                .prepare_cached(LIST)
                .await
                .map_err(|e| self.query_error(DOING, &e))?;
            let rows = client
                .query(
                    &statement,
                    &[&actor_type, &actor_id, &t, &i, &n, &limit(limit_n)],
                )
                .await
                .map_err(|e| self.query_error(DOING, &e))?;
            rows.iter()
                .map(|r| record(r).map_err(|e| self.query_error(DOING, &e)))
                .collect()
        };
        bounded(op)
            .await
            .map_err(|r| self.timeout_error(DOING, r))?
    }

    async fn count_reminders(&self) -> Result<u64, StoreError> {
        const DOING: &str = "counting reminders";
        let op = async {
            let client = self.client(DOING).await?;
            let row = client
                .query_one("SELECT count(*) FROM troupe_reminders", &[])
                .await
                .map_err(|e| self.query_error(DOING, &e))?;
            let n: i64 = row.try_get(0).map_err(|e| self.query_error(DOING, &e))?;
            Ok(u64::try_from(n).unwrap_or(0))
        };
        bounded(op)
            .await
            .map_err(|r| self.timeout_error(DOING, r))?
    }
}

/// Writes the admitted puts, then the admitted deletes, in one statement
/// through `client` (a pooled connection or a transaction); answers every
/// write, the refused ones `Fenced`.
async fn apply_admitted(
    client: &impl GenericClient,
    writes: &[ReminderWrite],
    admitted: &[bool],
) -> Result<Vec<ReminderApplied>, tokio_postgres::Error> {
    let mut puts: Vec<&ReminderRecord> = Vec::new();
    let mut deletes: Vec<&ReminderKey> = Vec::new();
    for (write, ok) in writes.iter().zip(admitted) {
        match (&write.op, ok) {
            (ReminderOp::Put(record), true) => puts.push(record),
            (ReminderOp::Delete(key), true) => deletes.push(key),
            (_, false) => {}
        }
    }
    // Puts come before deletes in the batch's order. Collapse to each
    // key's last op (one statement may not touch a row twice), and
    // answer each delete: a put earlier in the batch means it existed.
    let mut last: HashMap<&ReminderKey, Option<&ReminderRecord>> = HashMap::new();
    for r in &puts {
        last.insert(&r.key, Some(r));
    }
    let put_in_batch: HashSet<&ReminderKey> = puts.iter().map(|r| &r.key).collect();
    let mut deleted_before: HashSet<&ReminderKey> = HashSet::new();
    // Per delete: Some(answer) when the batch itself decides it.
    let mut decided = Vec::with_capacity(deletes.len());
    for key in &deletes {
        decided.push(if deleted_before.contains(key) {
            Some(false)
        } else if put_in_batch.contains(key) {
            Some(true)
        } else {
            None
        });
        deleted_before.insert(key);
        last.insert(key, None);
    }
    let (mut pt, mut pi, mut pn, mut pd, mut pdata) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut dt, mut di, mut dn) = (Vec::new(), Vec::new(), Vec::new());
    for (key, op) in &last {
        match op {
            Some(r) => {
                pt.push(key.actor_type.as_str());
                pi.push(key.actor_id.as_str());
                pn.push(key.name.as_str());
                pd.push(to_ms(r.due_unix_ms));
                pdata.push(r.data.as_ref());
            }
            None => {
                dt.push(key.actor_type.as_str());
                di.push(key.actor_id.as_str());
                dn.push(key.name.as_str());
            }
        }
    }
    let at: Vec<&str> = deletes.iter().map(|k| k.actor_type.as_str()).collect();
    let ai: Vec<&str> = deletes.iter().map(|k| k.actor_id.as_str()).collect();
    let an: Vec<&str> = deletes.iter().map(|k| k.name.as_str()).collect();
    let statement = client.prepare_cached(APPLY).await?;
    let rows = client
        .query(
            &statement,
            &[&pt, &pi, &pn, &pd, &pdata, &at, &ai, &an, &dt, &di, &dn],
        )
        .await?;
    let mut existing: HashSet<(String, String, String)> = HashSet::new();
    for row in &rows {
        existing.insert((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?));
    }
    let mut existed = deletes.iter().zip(decided).map(|(k, decided)| {
        decided.unwrap_or_else(|| {
            existing.contains(&(k.actor_type.clone(), k.actor_id.clone(), k.name.clone()))
        })
    });
    Ok(writes
        .iter()
        .zip(admitted)
        .map(|(write, ok)| match (&write.op, ok) {
            (_, false) => ReminderApplied::Fenced,
            (ReminderOp::Put(_), true) => ReminderApplied::Put,
            (ReminderOp::Delete(_), true) => ReminderApplied::Deleted {
                existed: existed.next().unwrap_or(false),
            },
        })
        .collect())
}
