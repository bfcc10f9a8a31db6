//! The one sled database under a data directory, shared by the state and
//! reminder stores, and re-opened after an I/O error.
//!
//! sled 0.34 records the first I/O error of a database (a full disk, say)
//! and fails every later write with it, so a store that only retried would
//! stay failed after the disk has space again. Every operation of
//! [`SledStore`](crate::SledStore) and [`SledReminders`](crate::SledReminders)
//! therefore reaches sled through [`SledDb`], under a read lock: an I/O error
//! marks the open database broken, and the next write re-opens it. The
//! re-open takes the write lock, so it waits for running operations and no
//! handle of the old database survives it; drops the old database, which
//! ends sled's flusher thread; waits (bounded) for sled to release the
//! directory lock; and opens the directory again, which recovers from sled's
//! log as after a crash. The runtime keeps every change it could not write
//! dirty and writes it again, so nothing is lost across a re-open.
//!
//! A write is refused before sled sees it unless the file system has room
//! for twice its bytes plus [`MIN_FREE`]: a blob write (a value over about
//! 128 KiB) that fails on a full disk leaves sled 0.34 waiting forever for
//! the log buffer it claimed, so every later flush of that database hangs,
//! its drop too, and the directory lock it keeps holding stops any re-open
//! until the daemon restarts. The bound is rough and races with anything
//! else filling the disk; what slips past it is re-opened as above.
//!
//! Reads go on using a broken database while it is open (sled serves them
//! from its cache and its files; a disk that is still full would fail a
//! re-open anyway). Only after a failed re-open, when no database is open,
//! do reads re-open it too, at most every [`REOPEN_EVERY`] so that a burst of
//! reads does not retry a re-open that just failed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use troupe_storage::StoreError;

/// After a failed re-open, operations are told that failure instead of
/// trying again for this long.
pub(crate) const REOPEN_EVERY: Duration = Duration::from_millis(100);

/// Free space a write leaves besides twice its own bytes: two of sled's
/// 512 KiB log segments, for the log records and node rewrites of a batch.
pub(crate) const MIN_FREE: u64 = 1 << 20;

/// How long an open waits for sled to release the directory lock held by
/// a database of this process that was just dropped (a re-open after an
/// I/O error, or a store opened again: its background threads end shortly
/// after the last handle is dropped). Another process's lock is held all
/// along, so that open fails after the wait with the lock named.
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// How often a re-open looks at the lock again while waiting for it. sled
/// signals nothing when it lets go, so this is a bounded poll.
const LOCK_POLL: Duration = Duration::from_millis(5);

/// Why the database could not be re-opened after an I/O error: the cause of
/// the [`StoreError::Open`] that operations get until it can.
#[derive(Debug, thiserror::Error)]
#[error(
    "re-opening it after an I/O error failed: {source}; it is tried again at the next write, \
     so the store recovers by itself once the file system has space and accepts writes"
)]
pub struct ReopenError {
    #[source]
    pub source: sled::Error,
}

/// The open database and the trees the stores use.
#[derive(Debug)]
pub(crate) struct Handles {
    pub(crate) db: sled::Db,
    /// Actor state (`crate::state`).
    pub(crate) state: sled::Tree,
    /// Reminders and their due-time index (`crate::reminders`).
    pub(crate) reminders: sled::Tree,
    /// Held while a flush writes call records and their age index, and
    /// while expiry removes them (`crate::records`).
    pub(crate) records: parking_lot::Mutex<()>,
    /// How many times [`sync`](Self::sync) ran, for tests of when a store
    /// pays for an fsync.
    #[cfg(test)]
    syncs: AtomicU64,
    /// The operations in each sled batch applied, for tests of how a flush
    /// groups actors' writes.
    #[cfg(test)]
    pub(crate) batches: parking_lot::Mutex<Vec<usize>>,
}

impl Handles {
    /// Writes sled's log out and fsyncs it: what makes the writes so far
    /// durable.
    pub(crate) fn sync(&self) -> sled::Result<()> {
        #[cfg(test)]
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.db.flush().map(drop)
    }

    fn open(dir: &Path, cache_bytes: u64) -> sled::Result<Self> {
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(cache_bytes)
            .open()?;
        let state = db.open_tree("state")?;
        let reminders = db.open_tree("reminders")?;
        Ok(Self {
            db,
            state,
            reminders,
            records: parking_lot::Mutex::new(()),
            #[cfg(test)]
            syncs: AtomicU64::new(0),
            #[cfg(test)]
            batches: parking_lot::Mutex::new(Vec::new()),
        })
    }
}

/// What an operation on the database failed with: sled's error, which may
/// break the database, or the store's own (corrupt data).
#[derive(Debug)]
pub(crate) enum Failure {
    Sled(sled::Error),
    Store(StoreError),
}

impl From<sled::Error> for Failure {
    fn from(e: sled::Error) -> Self {
        Self::Sled(e)
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

/// Whether an operation may use a database that an I/O error broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Yes: reads still work on it.
    Read,
    /// No: re-open it first, or the write fails with the old error.
    Write,
}

/// A shared handle on the data directory's sled database (see the module
/// doc). Cloning it shares the database.
#[derive(Debug, Clone)]
pub(crate) struct SledDb(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    dir: PathBuf,
    /// sled's page cache bound, kept for re-opens.
    cache_bytes: u64,
    slot: RwLock<Slot>,
    /// The generation of the open database once an I/O error broke it
    /// (0: none; generations start at 1).
    broken: AtomicU64,
    /// Held shared by every write while it runs, and exclusively by a
    /// backup, which so reads the database as of one instant
    /// (`crate::backup`).
    writes: RwLock<()>,
    /// Writes handed to the blocking pool so far, for tests of what runs
    /// on the caller's worker before one is.
    #[cfg(test)]
    writes_begun: AtomicU64,
}

#[derive(Debug)]
struct Slot {
    /// `None` after a failed re-open.
    open: Option<Handles>,
    /// Counts opens, so that an error of a replaced database cannot mark
    /// its successor broken.
    generation: u64,
    /// The last failed re-open, told to operations for [`REOPEN_EVERY`].
    failed_reopen: Option<(Instant, StoreError)>,
}

impl SledDb {
    /// Opens (or creates) the database in `dir`, its page cache bounded to
    /// `cache_bytes`.
    pub(crate) fn open(dir: &Path, cache_bytes: u64) -> Result<Self, StoreError> {
        let handles = open_when_unlocked(dir, cache_bytes).map_err(|source| StoreError::Open {
            path: dir.display().to_string(),
            source: Arc::new(source),
        })?;
        Ok(Self(Arc::new(Shared {
            dir: dir.to_owned(),
            cache_bytes,
            slot: RwLock::new(Slot {
                open: Some(handles),
                generation: 1,
                failed_reopen: None,
            }),
            broken: AtomicU64::new(0),
            writes: RwLock::new(()),
            #[cfg(test)]
            writes_begun: AtomicU64::new(0),
        })))
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.0.dir
    }

    /// Runs a read: inline, as sled reads are short, unless the database
    /// is closed or being re-opened, which blocks; then on the blocking pool.
    pub(crate) async fn read<T, F>(&self, read: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Handles) -> Result<T, Failure> + Send + 'static,
    {
        let read = match self.try_read_now(read) {
            Ok(result) => return result,
            Err(read) => read,
        };
        let db = self.clone();
        tokio::task::spawn_blocking(move || db.run(Access::Read, read))
            .await
            .map_err(|e| StoreError::Io(format!("state store read task failed: {e}")))?
    }

    /// Runs a long read (a scan of many keys) on the blocking pool, so that
    /// it does not hold up the async worker it was called from.
    pub(crate) async fn scan<T, F>(&self, read: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Handles) -> Result<T, Failure> + Send + 'static,
    {
        let db = self.clone();
        tokio::task::spawn_blocking(move || db.run(Access::Read, read))
            .await
            .map_err(|e| StoreError::Io(format!("state store scan task failed: {e}")))?
    }

    /// Runs a write of about `bytes` bytes on the blocking pool (writes end
    /// in an fsync), once the file system has room for it, on a database
    /// re-opened first if an I/O error broke it.
    pub(crate) async fn write<T, F>(&self, bytes: u64, write: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Handles) -> Result<T, Failure> + Send + 'static,
    {
        #[cfg(test)]
        self.0.writes_begun.fetch_add(1, Ordering::Relaxed);
        let db = self.clone();
        tokio::task::spawn_blocking(move || {
            let _writing = db.0.writes.read();
            db.check_space(bytes)?;
            db.run(Access::Write, write)
        })
        .await
        .map_err(|e| StoreError::Io(format!("state store write task failed: {e}")))?
    }

    /// Holds every write back until the guard is dropped, once the writes
    /// running now are done. Reads go on. Blocks.
    pub(crate) fn pause_writes(&self) -> parking_lot::RwLockWriteGuard<'_, ()> {
        self.0.writes.write()
    }

    /// Runs `op` on the open database, as it is (a broken one reads).
    /// Blocks.
    pub(crate) fn with_open<T>(&self, op: impl FnOnce(&Handles) -> T) -> Result<T, StoreError> {
        self.run(Access::Read, |handles| Ok(op(handles)))
    }

    /// Refuses a write that may not fit (see the module doc).
    fn check_space(&self, bytes: u64) -> Result<(), StoreError> {
        let path = || self.0.dir.display().to_string();
        let available = fs2::available_space(&self.0.dir).map_err(|e| {
            StoreError::Io(format!("cannot read the free space under {}: {e}", path()))
        })?;
        let needed = bytes.saturating_mul(2).saturating_add(MIN_FREE);
        if available < needed {
            return Err(StoreError::NoSpace {
                path: path(),
                available,
                needed,
            });
        }
        Ok(())
    }

    /// `read` now if an open database can be had without waiting; `read`
    /// back otherwise.
    fn try_read_now<T, F>(&self, read: F) -> Result<Result<T, StoreError>, F>
    where
        F: FnOnce(&Handles) -> Result<T, Failure>,
    {
        let Some(slot) = self.0.slot.try_read() else {
            return Err(read);
        };
        let Some(handles) = slot.open.as_ref() else {
            return Err(read);
        };
        Ok(self.outcome(slot.generation, read(handles)))
    }

    /// Runs `op` under the read lock, re-opening the database first when
    /// `access` cannot use it as it is. Blocks.
    fn run<T>(
        &self,
        access: Access,
        op: impl FnOnce(&Handles) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        {
            let slot = self.0.slot.read();
            if let Some(handles) = slot.open.as_ref() {
                if access == Access::Read || !self.is_broken(&slot) {
                    return self.outcome(slot.generation, op(handles));
                }
            }
        }
        self.reopen()?;
        let slot = self.0.slot.read();
        match slot.open.as_ref() {
            Some(handles) => self.outcome(slot.generation, op(handles)),
            // Another failed re-open came in between: its error.
            None => Err(slot
                .failed_reopen
                .as_ref()
                .map(|(_, e)| e.clone())
                .unwrap_or_else(|| StoreError::Io("the state store is not open".into()))),
        }
    }

    fn is_broken(&self, slot: &Slot) -> bool {
        self.0.broken.load(Ordering::Acquire) == slot.generation
    }

    /// The store's error for an operation's result, marking the database of
    /// `generation` broken on an I/O error (the read lock is still held, so
    /// `generation` is the open one).
    fn outcome<T>(&self, generation: u64, result: Result<T, Failure>) -> Result<T, StoreError> {
        result.map_err(|failure| match failure {
            Failure::Sled(e) => {
                if matches!(e, sled::Error::Io(_)) {
                    self.0.broken.store(generation, Ordering::Release);
                }
                StoreError::Io(e.to_string())
            }
            Failure::Store(e) => e,
        })
    }

    /// Replaces a broken (or closed) database with a newly opened one; does
    /// nothing if another operation already did. Blocks.
    fn reopen(&self) -> Result<(), StoreError> {
        let mut slot = self.0.slot.write();
        if slot.open.is_some() && !self.is_broken(&slot) {
            return Ok(());
        }
        if let Some((at, e)) = &slot.failed_reopen {
            if at.elapsed() < REOPEN_EVERY {
                return Err(e.clone());
            }
        }
        // Every handle of the old database is in the slot (operations hold
        // the read lock for as long as they use one), so this drops the
        // database: sled joins its flusher thread and, once its I/O threads
        // are done, closes the file that holds the directory lock.
        slot.open = None;
        match open_when_unlocked(&self.0.dir, self.0.cache_bytes) {
            Ok(handles) => {
                slot.open = Some(handles);
                slot.generation += 1;
                slot.failed_reopen = None;
                tracing::info!(
                    dir = %self.0.dir.display(),
                    "re-opened the sled database after an I/O error"
                );
                Ok(())
            }
            Err(source) => {
                let e = StoreError::Open {
                    path: self.0.dir.display().to_string(),
                    source: Arc::new(ReopenError { source }),
                };
                slot.failed_reopen = Some((Instant::now(), e.clone()));
                Err(e)
            }
        }
    }
}

/// Opens the directory, retrying for [`LOCK_WAIT`] while a dropped
/// database still holds its lock. sled 0.34 reports a held lock as an I/O
/// error of kind `Other` ("could not acquire lock on ..."); a full disk or a
/// permission problem has a kind of its own and fails at once.
pub(crate) fn open_when_unlocked(dir: &Path, cache_bytes: u64) -> sled::Result<Handles> {
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match Handles::open(dir, cache_bytes) {
            Err(sled::Error::Io(e))
                if e.kind() == std::io::ErrorKind::Other && Instant::now() < deadline =>
            {
                std::thread::sleep(LOCK_POLL);
            }
            opened => return opened,
        }
    }
}

#[cfg(test)]
impl SledDb {
    /// Marks the open database broken, as an I/O error would.
    pub(crate) fn break_for_test(&self) {
        let generation = self.0.slot.read().generation;
        self.0.broken.store(generation, Ordering::Release);
    }

    /// How many times the open database was synced (`None`: closed).
    pub(crate) fn syncs(&self) -> Option<u64> {
        let slot = self.0.slot.read();
        slot.open.as_ref().map(|h| h.syncs.load(Ordering::Relaxed))
    }

    /// The operations in each batch a flush applied so far (`None`: closed).
    pub(crate) fn batches(&self) -> Option<Vec<usize>> {
        let slot = self.0.slot.read();
        slot.open.as_ref().map(|h| h.batches.lock().clone())
    }

    /// How many writes were handed to the blocking pool.
    pub(crate) fn writes_begun(&self) -> u64 {
        self.0.writes_begun.load(Ordering::Relaxed)
    }

    /// The open database's generation (`None`: closed).
    pub(crate) fn generation(&self) -> Option<u64> {
        let slot = self.0.slot.read();
        slot.open.as_ref().map(|_| slot.generation)
    }
}

#[cfg(test)]
pub(crate) mod tests;
