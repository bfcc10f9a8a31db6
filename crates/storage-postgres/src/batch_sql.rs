//! A flush batch as one statement: the state's upserts and deletes, the
//! fencing claim, inbox appends, removals and dead letters, and call
//! records, each a data-modifying CTE of one `WITH` (only the parts the
//! batch has). The batch never names a key or an inbox seq twice per actor
//! (see `PostgresStore::write_batch`), so no two CTEs touch one row. One statement is one atomic transaction in autocommit, so a
//! batch costs one round trip and one commit however many parts it has; the
//! parts of actors the fencing claim refused are left out by every CTE.
//!
//! Parameters come in the order of the parts present: state (7), fencing
//! (3), inbox (14), records (5), each an array per column (`unnest`).

use std::fmt::Write as _;

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;
use troupe_storage::{ActorWrite, FencedActor, InboxOp};

use crate::inbox::sql_seq;

/// Which parts a batch's statement has.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Parts {
    pub(crate) fenced: bool,
    pub(crate) inbox: bool,
    pub(crate) records: bool,
}

/// `AND NOT EXISTS` a refusal of the row's actor (alias `x`), when fenced.
fn unrefused(fenced: bool, alias: &str, joiner: &str) -> String {
    if !fenced {
        return String::new();
    }
    format!(
        " {joiner} NOT EXISTS (SELECT 1 FROM refused r \
         WHERE r.actor_type = {alias}.actor_type AND r.actor_id = {alias}.actor_id)"
    )
}

/// The statement for `parts`; its rows are the refused actors.
pub(crate) fn statement(parts: Parts) -> String {
    let f = parts.fenced;
    let mut sql = String::from("WITH ");
    let mut n = 7; // state's $1..$7
    if f {
        sql.push_str(
            "input AS (
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
), ",
        );
        n = 10;
    }
    let _ = write!(
        sql,
        "deleted AS (
    DELETE FROM troupe_state s
    USING unnest($5::text[], $6::text[], $7::text[]) AS d(actor_type, actor_id, key)
    WHERE s.actor_type = d.actor_type AND s.actor_id = d.actor_id AND s.key = d.key{}
), upserted AS (
    INSERT INTO troupe_state (actor_type, actor_id, key, value)
    SELECT u.actor_type, u.actor_id, u.key, u.value
    FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[]) AS u(actor_type, actor_id, key, value){}
    ON CONFLICT (actor_type, actor_id, key) DO UPDATE SET value = EXCLUDED.value
)",
        unrefused(f, "d", "AND"),
        unrefused(f, "u", "WHERE"),
    );
    if parts.inbox {
        let p: Vec<usize> = (n + 1..=n + 14).collect();
        n += 14;
        let _ = write!(
            sql,
            ", appended AS (
    INSERT INTO troupe_inbox (actor_type, actor_id, seq, data)
    SELECT a.actor_type, a.actor_id, a.seq, a.data
    FROM unnest(${}::text[], ${}::text[], ${}::bigint[], ${}::bytea[]) AS a(actor_type, actor_id, seq, data){}
    ON CONFLICT (actor_type, actor_id, seq) DO UPDATE SET data = EXCLUDED.data
), removed AS (
    DELETE FROM troupe_inbox i
    USING unnest(${}::text[], ${}::text[], ${}::bigint[]) AS d(actor_type, actor_id, seq)
    WHERE i.actor_type = d.actor_type AND i.actor_id = d.actor_id AND i.seq = d.seq{}
), dead AS (
    INSERT INTO troupe_dead_letters (actor_type, actor_id, seq, data, error, attempts, failed_ms)
    SELECT x.actor_type, x.actor_id, x.seq, x.data, x.error, x.attempts, x.failed_ms
    FROM unnest(${}::text[], ${}::text[], ${}::bigint[], ${}::bytea[], ${}::text[],
                ${}::bigint[], ${}::bigint[])
        AS x(actor_type, actor_id, seq, data, error, attempts, failed_ms){}
    ON CONFLICT (actor_type, actor_id, seq) DO UPDATE SET data = EXCLUDED.data,
        error = EXCLUDED.error, attempts = EXCLUDED.attempts, failed_ms = EXCLUDED.failed_ms
)",
            p[0],
            p[1],
            p[2],
            p[3],
            unrefused(f, "a", "WHERE"),
            p[4],
            p[5],
            p[6],
            unrefused(f, "d", "AND"),
            p[7],
            p[8],
            p[9],
            p[10],
            p[11],
            p[12],
            p[13],
            unrefused(f, "x", "WHERE"),
        );
    }
    if parts.records {
        let p: Vec<usize> = (n + 1..=n + 5).collect();
        let _ = write!(
            sql,
            ", recorded AS (
    INSERT INTO troupe_call_records (actor_type, actor_id, key, recorded_ms, data)
    SELECT c.actor_type, c.actor_id, c.key, c.recorded_ms, c.data
    FROM unnest(${}::text[], ${}::text[], ${}::text[], ${}::bigint[], ${}::bytea[])
        AS c(actor_type, actor_id, key, recorded_ms, data){}
    ON CONFLICT (actor_type, actor_id, key) DO NOTHING
)",
            p[0],
            p[1],
            p[2],
            p[3],
            p[4],
            unrefused(f, "c", "WHERE"),
        );
    }
    sql.push_str(if f {
        "\nSELECT actor_type, actor_id, epoch FROM refused"
    } else {
        "\nSELECT NULL::text, NULL::text, NULL::bigint WHERE false"
    });
    sql
}

/// The inbox ops of a batch as column arrays: appends, removals (handled
/// tells and dead letters), dead letters.
#[derive(Default)]
pub(crate) struct InboxColumns<'a> {
    a_ty: Vec<&'a str>,
    a_id: Vec<&'a str>,
    a_seq: Vec<i64>,
    a_data: Vec<&'a [u8]>,
    r_ty: Vec<&'a str>,
    r_id: Vec<&'a str>,
    r_seq: Vec<i64>,
    d_ty: Vec<&'a str>,
    d_id: Vec<&'a str>,
    d_seq: Vec<i64>,
    d_data: Vec<&'a [u8]>,
    d_err: Vec<&'a str>,
    d_attempts: Vec<i64>,
    d_failed: Vec<i64>,
}

impl<'a> InboxColumns<'a> {
    pub(crate) fn of(batch: &'a [ActorWrite]) -> Self {
        let mut c = Self::default();
        for w in batch {
            let (ty, id) = (w.actor_type.as_str(), w.actor_id.as_str());
            for op in &w.inbox {
                match op {
                    InboxOp::Append(entry) => {
                        c.a_ty.push(ty);
                        c.a_id.push(id);
                        c.a_seq.push(sql_seq(entry.seq));
                        c.a_data.push(entry.data.as_ref());
                    }
                    InboxOp::Remove { seq } => {
                        c.r_ty.push(ty);
                        c.r_id.push(id);
                        c.r_seq.push(sql_seq(*seq));
                    }
                    InboxOp::DeadLetter(letter) => {
                        c.r_ty.push(ty);
                        c.r_id.push(id);
                        c.r_seq.push(sql_seq(letter.key.seq));
                        c.d_ty.push(ty);
                        c.d_id.push(id);
                        c.d_seq.push(sql_seq(letter.key.seq));
                        c.d_data.push(letter.data.as_ref());
                        c.d_err.push(letter.error.as_str());
                        c.d_attempts.push(i64::from(letter.attempts));
                        c.d_failed
                            .push(i64::try_from(letter.failed_unix_ms).unwrap_or(i64::MAX));
                    }
                }
            }
        }
        c
    }

    fn params(&self) -> [&(dyn ToSql + Sync); 14] {
        [
            &self.a_ty,
            &self.a_id,
            &self.a_seq,
            &self.a_data,
            &self.r_ty,
            &self.r_id,
            &self.r_seq,
            &self.d_ty,
            &self.d_id,
            &self.d_seq,
            &self.d_data,
            &self.d_err,
            &self.d_attempts,
            &self.d_failed,
        ]
    }
}

/// The call records of a batch as column arrays.
#[derive(Default)]
pub(crate) struct RecordColumns<'a> {
    ty: Vec<&'a str>,
    id: Vec<&'a str>,
    key: Vec<&'a str>,
    at: Vec<i64>,
    data: Vec<&'a [u8]>,
}

impl<'a> RecordColumns<'a> {
    pub(crate) fn of(batch: &'a [ActorWrite]) -> Self {
        let mut c = Self::default();
        for w in batch {
            for r in &w.records {
                c.ty.push(w.actor_type.as_str());
                c.id.push(w.actor_id.as_str());
                c.key.push(r.key.as_str());
                c.at.push(i64::try_from(r.recorded_unix_ms).unwrap_or(i64::MAX));
                c.data.push(r.data.as_ref());
            }
        }
        c
    }

    fn params(&self) -> [&(dyn ToSql + Sync); 5] {
        [&self.ty, &self.id, &self.key, &self.at, &self.data]
    }
}

/// Writes a batch in one statement; returns the refused actors.
pub(crate) async fn write(
    client: &impl GenericClient,
    batch: &[ActorWrite],
    state: &[&(dyn ToSql + Sync); 7],
    fencing: Option<[&(dyn ToSql + Sync); 3]>,
) -> Result<Vec<FencedActor>, tokio_postgres::Error> {
    let inbox = InboxColumns::of(batch);
    let records = RecordColumns::of(batch);
    let parts = Parts {
        fenced: fencing.is_some(),
        inbox: batch.iter().any(|w| !w.inbox.is_empty()),
        records: !records.ty.is_empty(),
    };
    let mut params: Vec<&(dyn ToSql + Sync)> = state.to_vec();
    if let Some(fencing) = &fencing {
        params.extend_from_slice(fencing);
    }
    let inbox_params = inbox.params();
    if parts.inbox {
        params.extend_from_slice(&inbox_params);
    }
    let record_params = records.params();
    if parts.records {
        params.extend_from_slice(&record_params);
    }
    let statement = client.prepare_cached(&statement(parts)).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every placeholder from $1 to the last is used once in each variant,
    /// so the parameters line up with what `write` passes.
    #[test]
    fn placeholders_run_from_one_without_gaps() {
        for fenced in [false, true] {
            for inbox in [false, true] {
                for records in [false, true] {
                    let sql = statement(Parts {
                        fenced,
                        inbox,
                        records,
                    });
                    let want = 7
                        + if fenced { 3 } else { 0 }
                        + if inbox { 14 } else { 0 }
                        + if records { 5 } else { 0 };
                    for i in 1..=want {
                        assert!(sql.contains(&format!("${i}::")), "${i} missing:\n{sql}");
                    }
                    assert!(!sql.contains(&format!("${}::", want + 1)), "{sql}");
                }
            }
        }
    }
}
