//! Backups of the sled database, taken while the daemon runs and writes,
//! and their restore into an empty data directory (`restore`).
//!
//! sled 0.34 has no snapshots, and its files change in place, so copying
//! the directory of a running daemon can tear a write in two. A backup
//! instead reads every tree into one file while writes go on, and logs the
//! writes made meanwhile (`write_log`): it holds writes for an instant to
//! start the log, reads, holds them for another instant to end it, and
//! appends the log to the file. A restore writes what was read, then
//! replays the log over it, so what it restores is the store as of the
//! instant the log ended: every actor's write whole or absent, as if
//! writes had paused for the whole read, which is what backups did before
//! (format 1, which a restore still reads).
//!
//! The file: a header (`MAGIC`, then the format version), each tree as its
//! name followed by its entries, then `LOG` and each tree whose keys
//! changed during the read as its name followed by those changes in order
//! (entries, and removals of keys), then the number of records (entries
//! and removals) and a CRC-32 of everything before it. Lengths and counts
//! are little-endian. A restore reads the whole file and checks the count
//! and the checksum before it writes anything, so a truncated or damaged
//! copy is refused, never half restored.

mod restore;
mod write_log;

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::db::{Handles, SledDb, MIN_FREE};
use crate::SledStore;
pub use restore::restore;
use write_log::{TreeLog, WriteLog};

/// The first bytes of every backup file.
const MAGIC: &[u8; 16] = b"troupe-sled-bkp\0";
/// Bumped when the layout below changes; a restore refuses any newer one.
const VERSION: u32 = 2;
/// The first format, without a log; restores still read it.
const VERSION_WITHOUT_LOG: u32 = 1;
const TREE: u8 = 1;
const ENTRY: u8 = 2;
/// A key removed during the read (format 2, after `LOG` only).
const REMOVE: u8 = 3;
/// The writes made during the read follow (format 2).
const LOG: u8 = 4;
const END: u8 = 0;

/// What a backup or a restore holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackupSummary {
    /// sled trees (the state, the reminders, sled's default tree).
    pub trees: u64,
    /// Records across all trees: the keys read, and the changes (entries
    /// and removals) logged while they were read.
    pub entries: u64,
    /// Of `entries`, the changes logged while the trees were read.
    pub logged: u64,
    /// The file's size.
    pub bytes: u64,
}

/// Why a backup or a restore failed.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("cannot {doing} {path}: {source}")]
    File {
        doing: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("reading the sled database failed: {source}")]
    Read {
        #[source]
        source: sled::Error,
    },
    #[error("the sled database is not open: {0}")]
    Store(#[from] troupe_storage::StoreError),
    #[error("writing the restored database under {dir} failed: {source}")]
    Write {
        dir: PathBuf,
        #[source]
        source: sled::Error,
    },
    #[error(
        "{path} is not a troupe sled backup, or is damaged: {reason}; nothing was restored \
         (take the backup again with `troupe backup`)"
    )]
    Corrupt { path: PathBuf, reason: String },
    #[error(
        "{path} is a backup of format {found}, and this troupe reads formats \
         {VERSION_WITHOUT_LOG} to {VERSION}; restore it with the troupe version that took it"
    )]
    Version { path: PathBuf, found: u32 },
    /// Refused before writing: the copy may not fit beside the store, and
    /// filling that file system would stop the store's own writes.
    #[error(
        "not enough free space for a backup in {path}: {available} bytes available, about \
         {needed} needed; free space there and take it again"
    )]
    NoSpace {
        path: PathBuf,
        available: u64,
        needed: u64,
    },
    #[error(
        "{dir} is not empty; restore into a new or empty directory, then start the daemon with \
         --data-dir on it"
    )]
    NotEmpty { dir: PathBuf },
    #[error(
        "cannot open a sled database in {dir}: {source}; check that the directory is writable \
         and that no daemon runs on it"
    )]
    Open {
        dir: PathBuf,
        #[source]
        source: sled::Error,
    },
    /// The database was closed or re-opened (after an I/O error) while the
    /// backup read it, so the log of writes it kept is incomplete.
    #[error(
        "the sled database was re-opened during the backup (after an I/O error; see the \
         daemon's log), so the backup is incomplete; take it again"
    )]
    Reopened,
}

/// A backup written to its file.
#[derive(Debug)]
pub struct TakenBackup {
    pub summary: BackupSummary,
    /// How long writes were held, in all: the two instants that start and
    /// end the log, each waiting out the writes running then.
    pub writes_held: Duration,
    /// The file, written and synced.
    pub file: File,
}

impl SledStore {
    /// Writes a backup of the whole database to `to` (created, or
    /// truncated). Blocks: call it from a blocking thread.
    pub fn backup_to(&self, to: &Path) -> Result<TakenBackup, BackupError> {
        let file = File::create(to).map_err(io_at("create", to))?;
        let room = to.parent().unwrap_or(Path::new("."));
        self.backup_into(file, room)
    }

    /// Writes a backup of the whole database into `file`, which lives in
    /// the directory `room`, and hands the file back. Writes go on while
    /// it reads (see the module doc). Blocks.
    pub fn backup_into(&self, file: File, room: &Path) -> Result<TakenBackup, BackupError> {
        self.backup_with(file, room, || {})
    }

    /// [`backup_into`](Self::backup_into), calling `reading` once the read
    /// of the trees has begun, for tests of what runs meanwhile.
    fn backup_with(
        &self,
        file: File,
        room: &Path,
        reading: impl FnOnce(),
    ) -> Result<TakenBackup, BackupError> {
        let db: &SledDb = self.db();
        let (log, mut writes_held) = held(db, || db.with_open(|h| WriteLog::start(h, room))?)?;
        let (out, summary) = db.with_open(|handles| read_trees(handles, file, room, reading))??;
        let (logs, held_again) = held(db, || log.finish(room))?;
        writes_held = writes_held.saturating_add(held_again);
        let (summary, file) = end_backup(out, summary, logs, room)?;
        tracing::info!(
            room = %room.display(),
            trees = summary.trees,
            entries = summary.entries,
            logged = summary.logged,
            bytes = summary.bytes,
            writes_held_ms = writes_held.as_millis(),
            "backed up the sled database"
        );
        Ok(TakenBackup {
            summary,
            writes_held,
            file,
        })
    }
}

/// Runs `op` while the store's writes are held, and says for how long
/// they were, counting the wait for the writes running when it began.
fn held<T>(
    db: &SledDb,
    op: impl FnOnce() -> Result<T, BackupError>,
) -> Result<(T, Duration), BackupError> {
    let started = Instant::now();
    let paused = db.pause_writes();
    let outcome = op();
    drop(paused);
    Ok((outcome?, started.elapsed()))
}

type Output = Checked<BufWriter<File>>;

/// Writes the header and every tree as it reads now.
fn read_trees(
    handles: &Handles,
    file: File,
    room: &Path,
    reading: impl FnOnce(),
) -> Result<(Output, BackupSummary), BackupError> {
    let read = |source| BackupError::Read { source };
    let wrote = io_at("write the backup in", room);
    handles.sync().map_err(read)?;
    // The read is at most the live data, which sled's files hold; the log
    // grows with the writes made meanwhile, which nothing here can know.
    let needed = handles
        .db
        .size_on_disk()
        .map_err(read)?
        .saturating_add(MIN_FREE);
    let available = fs2::available_space(room).map_err(io_at("read the free space of", room))?;
    if available < needed {
        return Err(BackupError::NoSpace {
            path: room.into(),
            available,
            needed,
        });
    }
    let mut out = Checked::new(BufWriter::with_capacity(1 << 20, file));
    out.write_all(MAGIC).map_err(&wrote)?;
    out.write_all(&VERSION.to_le_bytes()).map_err(&wrote)?;
    let mut summary = BackupSummary::default();
    let mut reading = Some(reading);
    for name in handles.db.tree_names() {
        let tree = handles.db.open_tree(&name).map_err(read)?;
        out.write_all(&[TREE]).map_err(&wrote)?;
        write_bytes(&mut out, &name).map_err(&wrote)?;
        summary.trees = summary.trees.saturating_add(1);
        for item in tree.iter() {
            let (key, value) = item.map_err(read)?;
            out.write_all(&[ENTRY]).map_err(&wrote)?;
            write_bytes(&mut out, &key).map_err(&wrote)?;
            write_bytes(&mut out, &value).map_err(&wrote)?;
            summary.entries = summary.entries.saturating_add(1);
            if let Some(reading) = reading.take() {
                reading();
            }
        }
    }
    Ok((out, summary))
}

/// Appends the logs, the record count and the checksum, and syncs the file.
fn end_backup(
    mut out: Output,
    mut summary: BackupSummary,
    logs: Vec<TreeLog>,
    room: &Path,
) -> Result<(BackupSummary, File), BackupError> {
    let wrote = io_at("write the backup in", room);
    out.write_all(&[LOG]).map_err(&wrote)?;
    for mut log in logs.into_iter().filter(|log| log.changes > 0) {
        out.write_all(&[TREE]).map_err(&wrote)?;
        write_bytes(&mut out, &log.tree).map_err(&wrote)?;
        std::io::copy(&mut log.file, &mut out).map_err(&wrote)?;
        summary.entries = summary.entries.saturating_add(log.changes);
        summary.logged = summary.logged.saturating_add(log.changes);
    }
    out.write_all(&[END]).map_err(&wrote)?;
    out.write_all(&summary.entries.to_le_bytes())
        .map_err(&wrote)?;
    let crc = out.crc.clone().finalize();
    let mut file = out.inner.into_inner().map_err(|e| wrote(e.into_error()))?;
    file.write_all(&crc.to_le_bytes()).map_err(&wrote)?;
    file.sync_all().map_err(&wrote)?;
    summary.bytes = file.metadata().map_err(&wrote)?.len();
    Ok((summary, file))
}

fn io_at<'a>(doing: &'static str, path: &'a Path) -> impl Fn(std::io::Error) -> BackupError + 'a {
    move |source| BackupError::File {
        doing,
        path: path.into(),
        source,
    }
}

fn write_bytes(out: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(bytes.len())
        .map_err(|_| std::io::Error::other("a key or value over 4 GiB"))?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(bytes)
}

fn read_u32(input: &mut impl Read) -> std::io::Result<u32> {
    let mut n = [0u8; 4];
    input.read_exact(&mut n)?;
    Ok(u32::from_le_bytes(n))
}

/// Reads a length and that many bytes; a length past the file's size is
/// damage, refused before anything is allocated for it.
fn read_bytes(input: &mut impl Read, file_size: u64) -> std::io::Result<Vec<u8>> {
    let len = read_u32(input)?;
    if u64::from(len) > file_size {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
    }
    let len = usize::try_from(len).map_err(|_| std::io::Error::other("a length past memory"))?;
    let mut bytes = vec![0u8; len];
    input.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// A reader or writer that keeps a CRC-32 of the bytes through it.
struct Checked<T> {
    inner: T,
    crc: crc32fast::Hasher,
}

impl<T> Checked<T> {
    fn new(inner: T) -> Self {
        Self {
            inner,
            crc: crc32fast::Hasher::new(),
        }
    }
}

impl<W: Write> Write for Checked<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(buf.get(..n).unwrap_or(buf));
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl<R: Read> Read for Checked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.crc.update(buf.get(..n).unwrap_or(buf));
        Ok(n)
    }
}

#[cfg(test)]
mod tests;
