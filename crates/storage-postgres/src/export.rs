//! Actors read out whole for a copy of the store
//! (`StateStore::export_actors`): a page of actors in three queries, one
//! per table, sent together on one connection, instead of a few round
//! trips per actor.

use std::collections::HashMap;
use std::sync::LazyLock;

use troupe_storage::{ActorWrite, InboxOp, StoreError};

use crate::inbox::entry_of;
use crate::records::record_of;
use crate::store::{bounded, PostgresStore};

/// The actors asked for, as a relation to join each table with.
const ACTORS: &str = "unnest($1::text[], $2::text[]) AS a(actor_type, actor_id)";

static STATE: LazyLock<String> =
    LazyLock::new(|| select("t.key, t.value", "troupe_state", "t.key"));
static INBOX: LazyLock<String> = LazyLock::new(|| select("t.seq, t.data", "troupe_inbox", "t.seq"));
static RECORDS: LazyLock<String> = LazyLock::new(|| {
    select(
        "t.key, t.recorded_ms, t.data",
        "troupe_call_records",
        "t.key",
    )
});

/// `columns` of `table`'s rows for the actors asked for, then each row's
/// actor: the leading columns are what the per-actor reads decode.
fn select(columns: &str, table: &str, order: &str) -> String {
    format!(
        "SELECT {columns}, t.actor_type, t.actor_id FROM {table} t JOIN {ACTORS} \
         ON t.actor_type = a.actor_type AND t.actor_id = a.actor_id ORDER BY {order}"
    )
}

impl PostgresStore {
    pub(crate) async fn export_page(
        &self,
        actors: &[(String, String)],
    ) -> Result<Vec<ActorWrite>, StoreError> {
        const DOING: &str = "reading actors for a copy";
        let types: Vec<&str> = actors.iter().map(|(t, _)| t.as_str()).collect();
        let ids: Vec<&str> = actors.iter().map(|(_, i)| i.as_str()).collect();
        let mut writes: Vec<ActorWrite> = actors
            .iter()
            .map(|(actor_type, actor_id)| ActorWrite {
                actor_type: actor_type.clone(),
                actor_id: actor_id.clone(),
                epoch: None,
                changes: Vec::new(),
                inbox: Vec::new(),
                records: Vec::new(),
            })
            .collect();
        let at: HashMap<(&str, &str), usize> = actors
            .iter()
            .enumerate()
            .map(|(i, (t, id))| ((t.as_str(), id.as_str()), i))
            .collect();
        let op = async {
            let client = self.client(DOING).await?;
            let failed = |e: tokio_postgres::Error| self.query_error(DOING, &e);
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&types, &ids];
            // Polled together, the three queries share the connection's
            // round trips (tokio-postgres pipelines them).
            let (state, inbox, records) = tokio::try_join!(
                client.prepare_cached(&STATE),
                client.prepare_cached(&INBOX),
                client.prepare_cached(&RECORDS),
            )
            .map_err(failed)?;
            let (state, inbox, records) = tokio::try_join!(
                client.query(&state, &params),
                client.query(&inbox, &params),
                client.query(&records, &params),
            )
            .map_err(failed)?;
            let write_of = |row: &tokio_postgres::Row, first: usize| {
                let ty: &str = row.try_get(first)?;
                let id: &str = row.try_get(first + 1)?;
                Ok::<_, tokio_postgres::Error>(at.get(&(ty, id)).copied())
            };
            for row in &state {
                if let Some(i) = write_of(row, 2).map_err(failed)? {
                    let key: String = row.try_get(0).map_err(failed)?;
                    let value: Vec<u8> = row.try_get(1).map_err(failed)?;
                    if let Some(w) = writes.get_mut(i) {
                        w.changes.push((key, Some(value.into())));
                    }
                }
            }
            for row in &inbox {
                if let Some(i) = write_of(row, 2).map_err(failed)? {
                    let entry = entry_of(row).map_err(failed)?;
                    if let Some(w) = writes.get_mut(i) {
                        w.inbox.push(InboxOp::Append(entry));
                    }
                }
            }
            for row in &records {
                if let Some(i) = write_of(row, 3).map_err(failed)? {
                    let record = record_of(row).map_err(failed)?;
                    if let Some(w) = writes.get_mut(i) {
                        w.records.push(record);
                    }
                }
            }
            Ok(())
        };
        bounded(op)
            .await
            .map_err(|r| self.timeout_error(DOING, r))??;
        Ok(writes)
    }
}
