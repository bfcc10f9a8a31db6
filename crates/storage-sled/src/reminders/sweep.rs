//! Removing deleted reminders' records, in key order, a little per batch.
//!
//! A delete empties its record (a tombstone) instead of removing it. Fired
//! one-shot reminders are deleted in due order, which is random in key
//! order, so removing their records at once thinned every leaf of the tree
//! together; sled merges a leaf once fewer than 4 of its up to 16 keys are
//! left, and those merges then all came within a few seconds, each one
//! rewriting a parent node of up to 256 children. In `cargo bench -p
//! troupe-runtime --bench reminders` that burst took the CPU from the
//! firings, which fell to 20–25k/s for seconds, with a lateness p99 of up
//! to 4 s; with records left in place, five runs fired at 50k/s with p99 of
//! 10–66 ms.
//!
//! The sweep walks the records in key order from where it stopped, a
//! bounded number per batch, and removes the tombstones among them: leaves
//! empty one after another at the sweep's place, so their merges spread out
//! at its pace. It steps only in batches that find the writer nearly idle
//! (or once tombstones pile up past a bound), and walks while deletes came
//! since two passes ago (one pass may have started past a tombstone); a
//! store that only reads or adds never walks. While passes are left, the
//! scheduler's writer gives the store an empty batch whenever it has been
//! idle a moment (`ReminderStore::wants_idle_batches`), so an idle daemon
//! sweeps too.
//!
//! A key of its own ([`MARK`]) says that a sweep is under way, so a daemon
//! that stopped before its sweep finished resumes it at its next start:
//! written before a batch's first tombstone, removed when the passes end.
//! Until the first batch has read it, the store asks for an idle batch.

use parking_lot::Mutex;

use super::{MARK, RECORD};
use crate::db::Failure;

/// Records one batch looks at, at most.
const RECORDS_PER_BATCH: usize = 1024;

/// A batch of at most this many writes finds the writer all but idle: the
/// sweep steps then. Larger ones (firings at full rate) leave it be, as
/// removing records costs the same CPU in any order, and the firings need it.
const IDLE_BATCH: usize = 64;

/// Tombstones beyond which the sweep steps at every batch: a store that is
/// never idle still bounds them.
const MAX_TOMBSTONES: u64 = 2_000_000;

/// Where the sweep stands, shared by the store's clones (one writer uses it).
#[derive(Debug, Default)]
pub(super) struct Sweep(Mutex<Position>);

#[derive(Debug, Default)]
struct Position {
    /// The next record key to look at; empty: the first.
    next: Vec<u8>,
    /// Passes still to make: 2 after any delete, one less at each wrap.
    passes: u8,
    /// Tombstones made since the sweep last found none, about.
    tombstones: u64,
    /// Whether a batch has read [`MARK`] since the store opened.
    resumed: bool,
    /// Whether [`MARK`] is in the tree.
    marked: bool,
}

impl Sweep {
    /// Resumes a sweep a previous run left unfinished, and marks the tree
    /// before a batch with `deletes` makes tombstones (or while passes are
    /// left, in case a failed batch's mark did not stay). On the writer's
    /// blocking thread, at the start of its batch.
    pub(super) fn prepare(&self, tree: &sled::Tree, deletes: bool) -> Result<(), Failure> {
        let mut at = self.0.lock();
        if !at.resumed {
            at.resumed = true;
            if tree.contains_key([MARK])? {
                at.marked = true;
                at.passes = 2;
            }
        }
        if (deletes || at.passes > 0) && !at.marked {
            tree.insert([MARK], &[] as &[u8])?;
            at.marked = true;
        }
        Ok(())
    }

    /// Forgets what it knew of [`MARK`], after a batch failed: the database
    /// may have been re-opened without it. The next batch reads it again.
    pub(super) fn failed(&self) {
        let mut at = self.0.lock();
        at.resumed = false;
        at.marked = false;
    }

    /// Notes that a batch made `tombstones` tombstones.
    pub(super) fn deleted(&self, tombstones: usize) {
        let mut at = self.0.lock();
        at.passes = 2;
        at.tombstones = at.tombstones.saturating_add(tombstones as u64);
    }

    /// Whether passes are left to make, or a sweep of a previous run may be.
    pub(super) fn pending(&self) -> bool {
        let at = self.0.lock();
        at.passes > 0 || !at.resumed
    }

    /// Removes the tombstones among the next records of `tree`, if a pass
    /// is due and the batch of `writes` leaves time for it. On the writer's
    /// blocking thread, inside its batch.
    pub(super) fn step(&self, tree: &sled::Tree, writes: usize) -> Result<(), Failure> {
        let mut at = self.0.lock();
        if at.passes == 0 || (writes > IDLE_BATCH && at.tombstones <= MAX_TOMBSTONES) {
            return Ok(());
        }
        let start = if at.next.is_empty() {
            vec![RECORD]
        } else {
            at.next.clone()
        };
        let mut seen = 0;
        let mut last = None;
        for item in tree.range(start..vec![RECORD + 1]) {
            let (key, value) = item?;
            if value.is_empty() {
                tree.remove(&key)?;
                at.tombstones = at.tombstones.saturating_sub(1);
            }
            seen += 1;
            if seen == RECORDS_PER_BATCH {
                last = Some(key);
                break;
            }
        }
        match last {
            Some(key) => {
                let mut next = key.to_vec();
                next.push(0);
                at.next = next;
            }
            None => {
                at.next.clear();
                at.passes = at.passes.saturating_sub(1);
                if at.passes == 0 {
                    at.tombstones = 0;
                    if at.marked {
                        tree.remove([MARK])?;
                        at.marked = false;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use troupe_storage::{
        ReminderApplied, ReminderKey, ReminderOp, ReminderRecord, ReminderStore, ReminderWrite,
        StoreError,
    };

    use super::super::{SledReminders, RECORD};
    use crate::SledStore;

    fn key(i: usize) -> ReminderKey {
        ReminderKey {
            actor_type: "t".into(),
            actor_id: format!("a{i}"),
            name: "r".into(),
        }
    }

    fn put(i: usize) -> ReminderWrite {
        ReminderWrite {
            op: ReminderOp::Put(ReminderRecord {
                key: key(i),
                due_unix_ms: 1_000 + i as u64,
                data: Bytes::from_static(b"d"),
            }),
            epoch: None,
        }
    }

    fn delete(i: usize) -> ReminderWrite {
        ReminderWrite {
            op: ReminderOp::Delete(key(i)),
            epoch: None,
        }
    }

    /// Record keys in the tree: (live, tombstones).
    async fn records(reminders: &SledReminders) -> Result<(usize, usize), StoreError> {
        reminders
            .db
            .read(|db| {
                let (mut live, mut dead) = (0, 0);
                for item in db.reminders.scan_prefix([RECORD]) {
                    let (_, v) = item?;
                    if v.is_empty() {
                        dead += 1;
                    } else {
                        live += 1;
                    }
                }
                Ok((live, dead))
            })
            .await
    }

    #[tokio::test]
    async fn deleted_records_are_hidden_at_once_and_removed_within_a_few_batches(
    ) -> Result<(), StoreError> {
        let dir = tempfile::tempdir().map_err(|e| StoreError::Io(e.to_string()))?;
        let store = SledStore::open(dir.path())?;
        let reminders = SledReminders::open(&store)?;
        let n = 3 * super::RECORDS_PER_BATCH;
        reminders
            .apply_reminders(&(0..n).map(put).collect::<Vec<_>>())
            .await?;
        // Every other one deleted, spread over the keys as firings are.
        let deletes: Vec<_> = (0..n).step_by(2).map(delete).collect();
        let applied = reminders.apply_reminders(&deletes).await?;
        assert!(applied
            .iter()
            .all(|a| *a == ReminderApplied::Deleted { existed: true }));
        let (live, dead) = records(&reminders).await?;
        assert_eq!(live, n / 2);
        assert_eq!(dead, n / 2, "a batch that large leaves the sweep be");
        assert!(reminders.wants_idle_batches());
        // Hidden from every read meanwhile.
        assert_eq!(reminders.count_reminders().await?, (n / 2) as u64);
        assert!(reminders.get_reminder(&key(0)).await?.is_none());
        let listed = reminders.list_reminders(Some("t"), None, None, n).await?;
        assert_eq!(listed.len(), n / 2);
        let due = reminders.due_reminders(None, u64::MAX, n).await?;
        assert_eq!(due.len(), n / 2);
        // Deleting again finds nothing, and leaves no tombstone behind.
        let again = reminders
            .apply_reminders(&[delete(0), delete(n + 7)])
            .await?;
        assert_eq!(again, vec![ReminderApplied::Deleted { existed: false }; 2]);
        // Small batches (here, empty ones) walk on until two passes are
        // done, and as they write nothing they were asked to keep, they
        // leave the fsync to sled's flusher.
        let syncs = reminders.db.syncs();
        for _ in 0..8 {
            reminders.apply_reminders(&[]).await?;
        }
        assert_eq!(records(&reminders).await?, (n / 2, 0));
        assert!(!reminders.wants_idle_batches(), "both passes are done");
        assert_eq!(reminders.db.syncs(), syncs, "an empty batch synced");
        // A tombstone's key takes a new reminder like any other, durably.
        reminders.apply_reminders(&[put(0)]).await?;
        assert!(reminders.get_reminder(&key(0)).await?.is_some());
        assert_eq!(reminders.db.syncs(), syncs.map(|n| n + 1));
        Ok(())
    }

    #[tokio::test]
    async fn a_sweep_cut_short_by_a_restart_resumes_at_the_next_start() -> Result<(), StoreError> {
        let dir = tempfile::tempdir().map_err(|e| StoreError::Io(e.to_string()))?;
        let n = 2 * super::RECORDS_PER_BATCH;
        {
            let store = SledStore::open(dir.path())?;
            let reminders = SledReminders::open(&store)?;
            reminders
                .apply_reminders(&(0..n).map(put).collect::<Vec<_>>())
                .await?;
            let deletes: Vec<_> = (0..n).step_by(2).map(delete).collect();
            reminders.apply_reminders(&deletes).await?;
            assert_eq!(records(&reminders).await?, (n / 2, n / 2));
        }
        let store = SledStore::open(dir.path())?;
        let reminders = SledReminders::open(&store)?;
        assert!(reminders.wants_idle_batches());
        let mut batches = 0;
        while reminders.wants_idle_batches() && batches < 16 {
            reminders.apply_reminders(&[]).await?;
            batches += 1;
        }
        assert_eq!(records(&reminders).await?, (n / 2, 0));
        assert!(!reminders.wants_idle_batches(), "both passes are done");
        drop((reminders, store));

        // With its sweep done, the next start asks for one batch, to look.
        let store = SledStore::open(dir.path())?;
        let reminders = SledReminders::open(&store)?;
        assert!(reminders.wants_idle_batches());
        reminders.apply_reminders(&[]).await?;
        assert!(!reminders.wants_idle_batches());
        Ok(())
    }
}
