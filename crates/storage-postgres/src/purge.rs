//! An actor's purge in PostgreSQL: one transaction that claims the actor's
//! epoch as a fenced write does, then deletes its rows from the state,
//! inbox, dead-letter and call-record tables in one statement. Its epoch
//! row stays, so an older owner's writes stay refused.

use troupe_storage::{Epoch, PurgedActor, StoreError};

use crate::state::{sql_epoch, CLAIM};
use crate::store::{bounded, PostgresStore};

/// Deletes every row of actor ($1, $2) but its reminders and its epoch,
/// counting each table's.
const PURGE: &str = "
WITH state AS (
    DELETE FROM troupe_state WHERE actor_type = $1 AND actor_id = $2 RETURNING 1
), inbox AS (
    DELETE FROM troupe_inbox WHERE actor_type = $1 AND actor_id = $2 RETURNING 1
), dead AS (
    DELETE FROM troupe_dead_letters WHERE actor_type = $1 AND actor_id = $2 RETURNING 1
), records AS (
    DELETE FROM troupe_call_records WHERE actor_type = $1 AND actor_id = $2 RETURNING 1
)
SELECT (SELECT count(*) FROM state), (SELECT count(*) FROM inbox),
       (SELECT count(*) FROM dead), (SELECT count(*) FROM records)";

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

impl PostgresStore {
    pub(crate) async fn actor_purge(
        &self,
        actor_type: &str,
        actor_id: &str,
        epoch: Option<Epoch>,
    ) -> Result<PurgedActor, StoreError> {
        const DOING: &str = "purging an actor";
        let op = async {
            let mut client = self.client(DOING).await?;
            let failed = |e: tokio_postgres::Error| self.query_error(DOING, &e);
            let tx = client.transaction().await.map_err(failed)?;
            if let Some(epoch) = epoch {
                // The claim a fenced batch makes: it raises the epoch unless
                // a newer one is stored, and holds the epoch's row lock to
                // the commit, so a write of the actor in flight finishes
                // first and an older one arriving later is refused.
                let statement = tx.prepare_cached(CLAIM).await.map_err(failed)?;
                let claimed = tx
                    .query_opt(&statement, &[&actor_type, &actor_id, &sql_epoch(epoch)])
                    .await
                    .map_err(failed)?;
                if claimed.is_none() {
                    // Dropping the transaction rolls it back: nothing went.
                    return Err(StoreError::Fenced {
                        actor_type: actor_type.to_owned(),
                        actor_id: actor_id.to_owned(),
                        epoch,
                    });
                }
            }
            // A statement of its own, not a CTE beside the claim: read
            // committed gives it a snapshot taken after the claim got the
            // lock, so it also deletes what the write it waited for stored.
            let statement = tx.prepare_cached(PURGE).await.map_err(failed)?;
            let row = tx
                .query_one(&statement, &[&actor_type, &actor_id])
                .await
                .map_err(failed)?;
            let purged = PurgedActor {
                state_keys: count(row.try_get(0).map_err(failed)?),
                inbox_entries: count(row.try_get(1).map_err(failed)?),
                dead_letters: count(row.try_get(2).map_err(failed)?),
                call_records: count(row.try_get(3).map_err(failed)?),
            };
            tx.commit().await.map_err(failed)?;
            Ok(purged)
        };
        bounded(op)
            .await
            .map_err(|r| self.timeout_error(DOING, r))?
    }
}
