//! The state part of a flush batch: one statement, fenced or not (the
//! scheme is described in `state`).

use deadpool_postgres::GenericClient;
use troupe_storage::FencedActor;

/// Upserts ($1..$4: type, id, key, value per set) and deletes ($5..$7: type,
/// id, key per delete) of one batch, in one statement. The batch never names
/// a key twice (see [`PostgresStore::write_batch`]), so the CTE's delete and
/// the insert never touch the same row.
const WRITE_BATCH: &str = "
WITH deleted AS (
    DELETE FROM troupe_state s
    USING unnest($5::text[], $6::text[], $7::text[]) AS d(actor_type, actor_id, key)
    WHERE s.actor_type = d.actor_type AND s.actor_id = d.actor_id AND s.key = d.key
)
INSERT INTO troupe_state (actor_type, actor_id, key, value)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[])
ON CONFLICT (actor_type, actor_id, key) DO UPDATE SET value = EXCLUDED.value";

/// [`WRITE_BATCH`] with fencing: $8..$10 are the fenced actors and their
/// epochs. `claimed` raises each one's epoch unless the stored one is newer
/// (ON CONFLICT sees, and locks, the newest committed row, so a concurrent
/// claim is waited for, then counted); the changes of the actors it did not
/// claim are left out, and those actors are returned.
const WRITE_FENCED: &str = "
WITH input AS (
    SELECT * FROM unnest($8::text[], $9::text[], $10::bigint[]) AS i(actor_type, actor_id, epoch)
), claimed AS (
    INSERT INTO troupe_actor_epochs AS e (actor_type, actor_id, epoch)
    SELECT actor_type, actor_id, epoch FROM input
    ON CONFLICT (actor_type, actor_id) DO UPDATE SET epoch = EXCLUDED.epoch
        WHERE e.epoch <= EXCLUDED.epoch
    RETURNING e.actor_type, e.actor_id
), refused AS (
    SELECT i.actor_type, i.actor_id, i.epoch FROM input i
    WHERE NOT EXISTS (
        SELECT 1 FROM claimed c WHERE c.actor_type = i.actor_type AND c.actor_id = i.actor_id)
), deleted AS (
    DELETE FROM troupe_state s
    USING unnest($5::text[], $6::text[], $7::text[]) AS d(actor_type, actor_id, key)
    WHERE s.actor_type = d.actor_type AND s.actor_id = d.actor_id AND s.key = d.key
      AND NOT EXISTS (
        SELECT 1 FROM refused r WHERE r.actor_type = d.actor_type AND r.actor_id = d.actor_id)
), upserted AS (
    INSERT INTO troupe_state (actor_type, actor_id, key, value)
    SELECT u.actor_type, u.actor_id, u.key, u.value
    FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[]) AS u(actor_type, actor_id, key, value)
    WHERE NOT EXISTS (
        SELECT 1 FROM refused r WHERE r.actor_type = u.actor_type AND r.actor_id = u.actor_id)
    ON CONFLICT (actor_type, actor_id, key) DO UPDATE SET value = EXCLUDED.value
)
SELECT actor_type, actor_id, epoch FROM refused";

/// The state part of a batch (fenced when `fencing` holds the actors and
/// their epochs); returns the refused actors.
pub(crate) async fn write_state(
    client: &impl GenericClient,
    changes: &[&(dyn tokio_postgres::types::ToSql + Sync); 7],
    fencing: Option<[&(dyn tokio_postgres::types::ToSql + Sync); 3]>,
) -> Result<Vec<FencedActor>, tokio_postgres::Error> {
    let Some(fencing) = fencing else {
        let statement = client.prepare_cached(WRITE_BATCH).await?;
        client.execute(&statement, changes).await?;
        return Ok(Vec::new());
    };
    let statement = client.prepare_cached(WRITE_FENCED).await?;
    let mut params = changes.to_vec();
    params.extend_from_slice(&fencing);
    let rows = client.query(&statement, &params).await?;
    rows.iter()
        .map(|row| {
            let epoch: i64 = row.try_get(2)?;
            Ok(FencedActor {
                actor_type: row.try_get(0)?,
                actor_id: row.try_get(1)?,
                epoch: u64::try_from(epoch).unwrap_or(0),
            })
        })
        .collect()
}
