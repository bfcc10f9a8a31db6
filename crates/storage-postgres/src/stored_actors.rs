//! Pages of actors: those with inbox entries (what the inbox scan
//! activates) and those with anything stored at all (what a copy of the
//! whole store walks), in (type, id) order under the tables' "C" collation.

use troupe_storage::StoreError;

use crate::store::{bounded, PostgresStore};

/// Every actor with state, inbox entries, dead letters or call records.
/// Each table's part is limited on its own, so each reads its primary key's
/// index from the cursor on rather than the whole table.
const STORED_ACTORS: &str = "
SELECT actor_type, actor_id FROM (
    (SELECT DISTINCT actor_type, actor_id FROM troupe_state
     WHERE $1::text IS NULL OR (actor_type, actor_id) > ($1, $2)
     ORDER BY actor_type, actor_id LIMIT $3)
    UNION
    (SELECT DISTINCT actor_type, actor_id FROM troupe_inbox
     WHERE $1::text IS NULL OR (actor_type, actor_id) > ($1, $2)
     ORDER BY actor_type, actor_id LIMIT $3)
    UNION
    (SELECT DISTINCT actor_type, actor_id FROM troupe_dead_letters
     WHERE $1::text IS NULL OR (actor_type, actor_id) > ($1, $2)
     ORDER BY actor_type, actor_id LIMIT $3)
    UNION
    (SELECT DISTINCT actor_type, actor_id FROM troupe_call_records
     WHERE $1::text IS NULL OR (actor_type, actor_id) > ($1, $2)
     ORDER BY actor_type, actor_id LIMIT $3)
) AS stored
ORDER BY actor_type, actor_id
LIMIT $3";

impl PostgresStore {
    pub(crate) async fn list_stored_actors(
        &self,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        self.actor_page(STORED_ACTORS, "listing every stored actor", after, limit)
            .await
    }

    /// Runs `sql`, which takes the cursor's type (NULL: from the start) and
    /// id and a limit, and answers (type, id) rows.
    pub(crate) async fn actor_page(
        &self,
        sql: &str,
        doing: &'static str,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let (after_type, after_id) = (after.map(|a| a.0), after.map_or("", |a| a.1));
        let op = async {
            let client = self.client(doing).await?;
            let failed = |e: tokio_postgres::Error| self.query_error(doing, &e);
            let statement = client.prepare_cached(sql).await.map_err(failed)?;
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
            .map_err(|r| self.timeout_error(doing, r))?
    }
}
