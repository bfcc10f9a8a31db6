//! A copy of a whole store into another, empty one: every actor's state,
//! inbox entries, dead letters and call records, and every reminder and
//! alarm — what moving from one backend to another (a single daemon's sled
//! to a cluster's PostgreSQL, or back) takes.
//!
//! The copy reads through the [`StateStore`] and [`ReminderStore`] contracts
//! only, so any pair of backends works, and writes unfenced (no daemon owns
//! anything in a store being filled). It reads the source in many pages, so
//! a source that may change meanwhile must be handed in as one instant's
//! view (a daemon's sled store is locked while it runs; a shared database
//! is read through a snapshot).

use futures::stream::{self, StreamExt};

use crate::{
    ActorWrite, InboxOp, ReminderApplied, ReminderOp, ReminderStore, ReminderWrite, StateStore,
    StoreError,
};

/// Actors read before their writes go out in one batch.
const ACTORS_PER_BATCH: usize = 256;
/// Bytes of state, entries and records that end a batch early, so one of
/// large actors stays a reasonable transaction.
const BYTES_PER_BATCH: usize = 8 << 20;
/// Actors read in one [`StateStore::export_actors`].
const EXPORT_CHUNK: usize = 32;
/// Chunks whose reads are in flight at once.
const CHUNKS_AT_ONCE: usize = 2;
/// Dead letters and reminders read per page.
const PAGE: usize = 1000;

/// One store's two halves.
#[derive(Debug, Clone, Copy)]
pub struct Stores<'a> {
    pub state: &'a dyn StateStore,
    pub reminders: &'a dyn ReminderStore,
}

/// How much a copy moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Copied {
    /// Actors with anything stored.
    pub actors: u64,
    pub state_keys: u64,
    pub inbox_entries: u64,
    pub dead_letters: u64,
    pub call_records: u64,
    /// Reminders and alarms.
    pub reminders: u64,
}

/// Why a copy stopped. Whatever it wrote before stays written: copy again
/// into an emptied store.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error(
        "the destination already holds {what}; copy into an empty store, so that nothing in it \
         is overwritten or mixed with the copy"
    )]
    NotEmpty { what: String },
    #[error("reading the source failed: {0}")]
    Read(#[source] StoreError),
    #[error("writing the destination failed: {0}")]
    Write(#[source] StoreError),
    /// A backend refused an unfenced write as fenced: a broken store.
    #[error(
        "the destination refused the write of {actor} as fenced, which an unfenced write never \
         is; check that no daemon uses the destination"
    )]
    Refused { actor: String },
}

/// Copies everything in `from` into `to`, which must be empty; `progress`
/// hears the running totals after each batch written.
pub async fn copy_store(
    from: Stores<'_>,
    to: Stores<'_>,
    mut progress: impl FnMut(&Copied),
) -> Result<Copied, CopyError> {
    check_empty(to).await?;
    let mut copied = Copied::default();
    let mut after: Option<(String, String)> = None;
    loop {
        let cursor = after.as_ref().map(|(t, i)| (t.as_str(), i.as_str()));
        let actors = from
            .state
            .stored_actors(cursor, ACTORS_PER_BATCH)
            .await
            .map_err(CopyError::Read)?;
        let Some(last) = actors.last().cloned() else {
            break;
        };
        // Chunks keep what is read ahead bounded (an actor may be large),
        // and two in flight overlap a chunk's read with the one before's.
        let mut reads = stream::iter(actors.chunks(EXPORT_CHUNK).map(<[_]>::to_vec))
            .map(|chunk| async move { from.state.export_actors(&chunk).await })
            .buffered(CHUNKS_AT_ONCE);
        let mut batch = Vec::new();
        let mut bytes = 0usize;
        while let Some(writes) = reads.next().await {
            for write in writes.map_err(CopyError::Read)? {
                copied.actors += 1;
                copied.state_keys += write.changes.len() as u64;
                copied.inbox_entries += write.inbox.len() as u64;
                copied.call_records += write.records.len() as u64;
                bytes = bytes.saturating_add(write_bytes(&write));
                batch.push(write);
                if bytes >= BYTES_PER_BATCH {
                    write_all(to.state, std::mem::take(&mut batch)).await?;
                    bytes = 0;
                    progress(&copied);
                }
            }
        }
        write_all(to.state, batch).await?;
        progress(&copied);
        after = Some(last);
    }
    copy_dead_letters(from.state, to.state, &mut copied).await?;
    progress(&copied);
    copy_reminders(from.reminders, to.reminders, &mut copied, &mut progress).await?;
    Ok(copied)
}

async fn check_empty(to: Stores<'_>) -> Result<(), CopyError> {
    let actors = to
        .state
        .stored_actors(None, 1)
        .await
        .map_err(CopyError::Write)?;
    if let Some((ty, id)) = actors.first() {
        return Err(CopyError::NotEmpty {
            what: format!("actor {ty}/{id}"),
        });
    }
    let reminders = to
        .reminders
        .count_reminders()
        .await
        .map_err(CopyError::Write)?;
    if reminders > 0 {
        return Err(CopyError::NotEmpty {
            what: format!("{reminders} reminders"),
        });
    }
    Ok(())
}

fn write_bytes(write: &ActorWrite) -> usize {
    let state: usize = write
        .changes
        .iter()
        .map(|(k, v)| k.len() + v.as_ref().map_or(0, |v| v.len()))
        .sum();
    let inbox: usize = write
        .inbox
        .iter()
        .map(|op| match op {
            InboxOp::Append(e) => e.data.len(),
            InboxOp::DeadLetter(l) => l.data.len() + l.error.len(),
            InboxOp::Remove { .. } => 0,
        })
        .sum();
    let records: usize = write
        .records
        .iter()
        .map(|r| r.key.len() + r.data.len())
        .sum();
    state + inbox + records
}

async fn write_all(to: &dyn StateStore, batch: Vec<ActorWrite>) -> Result<(), CopyError> {
    let batch: Vec<ActorWrite> = batch.into_iter().filter(|w| !w.is_empty()).collect();
    if batch.is_empty() {
        return Ok(());
    }
    let fenced = to.write_batch(&batch).await.map_err(CopyError::Write)?;
    match fenced.first() {
        None => Ok(()),
        Some(f) => Err(CopyError::Refused {
            actor: format!("{}/{}", f.actor_type, f.actor_id),
        }),
    }
}

async fn copy_dead_letters(
    from: &dyn StateStore,
    to: &dyn StateStore,
    copied: &mut Copied,
) -> Result<(), CopyError> {
    let mut after = None;
    loop {
        let letters = from
            .list_dead_letters(None, after.as_ref(), PAGE)
            .await
            .map_err(CopyError::Read)?;
        let Some(last) = letters.last().map(|l| l.key.clone()) else {
            return Ok(());
        };
        let mut batch: Vec<ActorWrite> = Vec::new();
        for letter in letters {
            copied.dead_letters += 1;
            let key = &letter.key;
            let same_actor = batch
                .last()
                .is_some_and(|w| w.actor_type == key.actor_type && w.actor_id == key.actor_id);
            if !same_actor {
                batch.push(ActorWrite {
                    actor_type: key.actor_type.clone(),
                    actor_id: key.actor_id.clone(),
                    epoch: None,
                    changes: Vec::new(),
                    inbox: Vec::new(),
                    records: Vec::new(),
                });
            }
            if let Some(write) = batch.last_mut() {
                write.inbox.push(InboxOp::DeadLetter(letter));
            }
        }
        write_all(to, batch).await?;
        after = Some(last);
    }
}

async fn copy_reminders(
    from: &dyn ReminderStore,
    to: &dyn ReminderStore,
    copied: &mut Copied,
    progress: &mut impl FnMut(&Copied),
) -> Result<(), CopyError> {
    let mut after = None;
    loop {
        let records = from
            .list_reminders(None, None, after.as_ref(), PAGE)
            .await
            .map_err(CopyError::Read)?;
        let Some(last) = records.last().map(|r| r.key.clone()) else {
            return Ok(());
        };
        let writes: Vec<ReminderWrite> = records
            .into_iter()
            .map(|r| ReminderWrite {
                op: ReminderOp::Put(r),
                epoch: None,
            })
            .collect();
        let applied = to
            .apply_reminders(&writes)
            .await
            .map_err(CopyError::Write)?;
        if let Some(i) = applied.iter().position(|a| *a != ReminderApplied::Put) {
            let key = writes
                .get(i)
                .map(|w| w.op.key().clone())
                .unwrap_or_default();
            return Err(CopyError::Refused {
                actor: format!(
                    "{}/{} (reminder {})",
                    key.actor_type, key.actor_id, key.name
                ),
            });
        }
        copied.reminders += writes.len() as u64;
        progress(copied);
        after = Some(last);
    }
}
