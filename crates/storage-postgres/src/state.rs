//! Actor state in PostgreSQL, for several daemons using one database.
//!
//! - One table, `troupe_state (actor_type, actor_id, key) -> value bytea`.
//!   Names are `text COLLATE "C"` so that ids sort bytewise, as in sled.
//! - `write_batch` is ONE statement (a data-modifying CTE over `unnest` of
//!   array parameters: upserts and deletes), so a flush batch of any size is
//!   one round trip and one transaction: all of it or none of it.
//! - Fencing: `troupe_actor_epochs (actor_type, actor_id) -> epoch` holds
//!   each actor's owner epoch. A fenced batch raises it in the same
//!   statement, and writes only the actors whose epoch did not go past the
//!   batch's; a claim raises it in a transaction that then reads the state,
//!   holding the epoch's row lock, so no older write lands in between.
//!
//! The batch statement is built in `batch_sql`.

use std::collections::HashMap;

use async_trait::async_trait;
use bytes::Bytes;
use deadpool_postgres::GenericClient;

use troupe_storage::{
    ActorWrite, CallRecord, DeadLetter, DeadLetterKey, Epoch, FencedActor, InboxEntry, PurgedActor,
    RecordedKey, StateStore, StoreError, StoredState,
};

use crate::store::{bounded, PostgresStore};

/// Raises one actor's epoch unless the stored one is newer; a row back
/// means it was raised (or equal). The row stays locked until the claim's
/// transaction ends, so an older write waits and is then refused.
pub(crate) const CLAIM: &str = "
INSERT INTO troupe_actor_epochs AS e (actor_type, actor_id, epoch) VALUES ($1, $2, $3)
ON CONFLICT (actor_type, actor_id) DO UPDATE SET epoch = EXCLUDED.epoch
    WHERE e.epoch <= EXCLUDED.epoch
RETURNING 1";

const LOAD: &str =
    "SELECT key, value FROM troupe_state WHERE actor_type = $1 AND actor_id = $2 ORDER BY key";

const LIST_ACTORS: &str = "
SELECT DISTINCT actor_id FROM troupe_state
WHERE actor_type = $1 AND ($2::text IS NULL OR actor_id > $2)
ORDER BY actor_id
LIMIT $3";

/// An epoch as PostgreSQL's bigint (table versions never come near 2^63).
pub(crate) fn sql_epoch(epoch: Epoch) -> i64 {
    i64::try_from(epoch).unwrap_or(i64::MAX)
}

#[async_trait]
impl StateStore for PostgresStore {
    fn describe(&self) -> String {
        self.url.clone()
    }

    async fn size_on_disk(&self) -> Option<u64> {
        self.tables_size().await
    }

    async fn load(&self, actor_type: &str, actor_id: &str) -> Result<StoredState, StoreError> {
        const DOING: &str = "loading actor state";
        let op = async {
            let client = self.client(DOING).await?;
            read_state(&client, actor_type, actor_id)
                .await
                .map_err(|e| self.query_error(DOING, &e))
        };
        bounded(op)
            .await
            .map_err(|r| self.timeout_error(DOING, r))?
    }

    async fn claim(
        &self,
        actor_type: &str,
        actor_id: &str,
        epoch: Epoch,
    ) -> Result<StoredState, StoreError> {
        const DOING: &str = "claiming an actor";
        let op = async {
            let mut client = self.client(DOING).await?;
            let failed = |e: tokio_postgres::Error| self.query_error(DOING, &e);
            // Read committed: the read below takes a new snapshot, after the
            // claim, so it sees every write that got in before the claim.
            let tx = client.transaction().await.map_err(failed)?;
            let statement = tx.prepare_cached(CLAIM).await.map_err(failed)?;
            let claimed = tx
                .query_opt(&statement, &[&actor_type, &actor_id, &sql_epoch(epoch)])
                .await
                .map_err(failed)?;
            if claimed.is_none() {
                return Err(StoreError::Fenced {
                    actor_type: actor_type.to_owned(),
                    actor_id: actor_id.to_owned(),
                    epoch,
                });
            }
            let state = read_state(&tx, actor_type, actor_id)
                .await
                .map_err(failed)?;
            tx.commit().await.map_err(failed)?;
            Ok(state)
        };
        bounded(op)
            .await
            .map_err(|r| self.timeout_error(DOING, r))?
    }

    async fn write_batch(&self, batch: &[ActorWrite]) -> Result<Vec<FencedActor>, StoreError> {
        const DOING: &str = "writing a state batch";
        // The last change of a key wins, should a batch ever name it twice:
        // one statement may not touch a row twice.
        let mut last: HashMap<(&str, &str, &str), Option<&[u8]>> = HashMap::new();
        let mut order: Vec<(&str, &str, &str)> = Vec::new();
        // Fenced actors with their epoch (the smallest, should an actor come
        // twice: its older write must not ride on the newer one's epoch).
        let mut epochs: HashMap<(&str, &str), Epoch> = HashMap::new();
        for write in batch {
            let actor = (write.actor_type.as_str(), write.actor_id.as_str());
            if let Some(epoch) = write.epoch {
                let held = epochs.entry(actor).or_insert(epoch);
                *held = (*held).min(epoch);
            }
            for (key, value) in &write.changes {
                let id = (actor.0, actor.1, key.as_str());
                if last.insert(id, value.as_deref()).is_none() {
                    order.push(id);
                }
            }
        }
        let with_extras = crate::inbox::has_inbox(batch) || crate::records::has_records(batch);
        if order.is_empty() && epochs.is_empty() && !with_extras {
            return Ok(Vec::new());
        }
        let (mut set_types, mut set_ids, mut set_keys, mut set_values) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut del_types, mut del_ids, mut del_keys) = (Vec::new(), Vec::new(), Vec::new());
        for id in order {
            match last.get(&id).copied().flatten() {
                Some(value) => {
                    set_types.push(id.0);
                    set_ids.push(id.1);
                    set_keys.push(id.2);
                    set_values.push(value);
                }
                None => {
                    del_types.push(id.0);
                    del_ids.push(id.1);
                    del_keys.push(id.2);
                }
            }
        }
        let (mut fenced_types, mut fenced_ids, mut fenced_epochs) =
            (Vec::new(), Vec::new(), Vec::new());
        for ((ty, id), epoch) in &epochs {
            fenced_types.push(*ty);
            fenced_ids.push(*id);
            fenced_epochs.push(sql_epoch(*epoch));
        }
        let op = async {
            let client = self.client(DOING).await?;
            let failed = |e: tokio_postgres::Error| self.query_error(DOING, &e);
            let changes: [&(dyn tokio_postgres::types::ToSql + Sync); 7] = [
                &set_types,
                &set_ids,
                &set_keys,
                &set_values,
                &del_types,
                &del_ids,
                &del_keys,
            ];
            let fencing: Option<[&(dyn tokio_postgres::types::ToSql + Sync); 3]> =
                (!epochs.is_empty()).then_some([&fenced_types, &fenced_ids, &fenced_epochs]);
            // One statement in autocommit: one round trip, one transaction,
            // durable once it returns (synchronous_commit). Inbox ops and
            // call records ride in it behind the fencing claim, so they
            // land with the state or not at all.
            crate::batch_sql::write(&client, batch, &changes, fencing)
                .await
                .map_err(failed)
        };
        bounded(op)
            .await
            .map_err(|r| self.timeout_error(DOING, r))?
    }

    async fn list_actors(
        &self,
        actor_type: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        const DOING: &str = "listing actors";
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let op = async {
            let client = self.client(DOING).await?;
            let statement = client
                .prepare_cached(LIST_ACTORS)
                .await
                .map_err(|e| self.query_error(DOING, &e))?;
            let rows = client
                .query(&statement, &[&actor_type, &after, &limit])
                .await
                .map_err(|e| self.query_error(DOING, &e))?;
            rows.iter()
                .map(|row| row.try_get(0).map_err(|e| self.query_error(DOING, &e)))
                .collect()
        };
        bounded(op)
            .await
            .map_err(|r| self.timeout_error(DOING, r))?
    }

    async fn load_inbox(
        &self,
        actor_type: &str,
        actor_id: &str,
    ) -> Result<Vec<InboxEntry>, StoreError> {
        self.inbox_load(actor_type, actor_id).await
    }

    async fn inbox_actors(
        &self,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        self.inbox_list_actors(after, limit).await
    }

    async fn stored_actors(
        &self,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        self.list_stored_actors(after, limit).await
    }

    async fn export_actors(
        &self,
        actors: &[(String, String)],
    ) -> Result<Vec<ActorWrite>, StoreError> {
        self.export_page(actors).await
    }

    async fn list_dead_letters(
        &self,
        actor_type: Option<&str>,
        after: Option<&DeadLetterKey>,
        limit: usize,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        self.dead_list(actor_type, after, limit).await
    }

    async fn get_dead_letter(&self, key: &DeadLetterKey) -> Result<Option<DeadLetter>, StoreError> {
        self.dead_get(key).await
    }

    async fn remove_dead_letter(&self, key: &DeadLetterKey) -> Result<bool, StoreError> {
        self.dead_remove(key).await
    }

    async fn load_record_keys(
        &self,
        actor_type: &str,
        actor_id: &str,
        since_unix_ms: u64,
        limit: usize,
    ) -> Result<Vec<RecordedKey>, StoreError> {
        self.record_keys_load(actor_type, actor_id, since_unix_ms, limit)
            .await
    }

    async fn load_record(
        &self,
        actor_type: &str,
        actor_id: &str,
        key: &str,
    ) -> Result<Option<CallRecord>, StoreError> {
        self.record_get(actor_type, actor_id, key).await
    }

    async fn purge_actor(
        &self,
        actor_type: &str,
        actor_id: &str,
        epoch: Option<Epoch>,
    ) -> Result<PurgedActor, StoreError> {
        self.actor_purge(actor_type, actor_id, epoch).await
    }

    async fn expire_records(&self, before_unix_ms: u64, limit: usize) -> Result<u64, StoreError> {
        self.records_expire(before_unix_ms, limit).await
    }
}

/// Every key of one actor's state, through `client` (a pooled connection or
/// a transaction).
async fn read_state(
    client: &impl GenericClient,
    actor_type: &str,
    actor_id: &str,
) -> Result<StoredState, tokio_postgres::Error> {
    let statement = client.prepare_cached(LOAD).await?;
    let rows = client.query(&statement, &[&actor_type, &actor_id]).await?;
    rows.iter()
        .map(|row| {
            let key: String = row.try_get(0)?;
            let value: Vec<u8> = row.try_get(1)?;
            Ok((key, Bytes::from(value)))
        })
        .collect()
}
