//! Backups of the sled database, taken while the daemon runs, and their
//! restore into an empty data directory.
//!
//! sled 0.34 has no snapshots, and its files change in place, so copying
//! the directory of a running daemon can tear a write in two. A backup
//! instead pauses the store's writes ([`SledDb::pause_writes`]: reads and
//! turns go on, writes wait), syncs sled's log, and reads every tree into
//! one file; what it holds is the store as of one instant, every actor's
//! write whole or absent. Writes resume as soon as the file is written.
//!
//! The file: a header (`MAGIC`, then the format version), each tree as its
//! name followed by its entries, then the number of entries and a CRC-32 of
//! everything before it. Lengths and counts are little-endian. A restore
//! reads the whole file and checks the count and the checksum before it
//! writes anything, so a truncated or damaged copy is refused, never half
//! restored.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::db::{Handles, SledDb, MIN_FREE};
use crate::SledStore;

/// The first bytes of every backup file.
const MAGIC: &[u8; 16] = b"troupe-sled-bkp\0";
/// Bumped when the layout below changes; a restore refuses any other.
const VERSION: u32 = 1;
const TREE: u8 = 1;
const ENTRY: u8 = 2;
const END: u8 = 0;

/// What a backup or a restore holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackupSummary {
    /// sled trees (the state, the reminders, sled's default tree).
    pub trees: u64,
    /// Keys across all trees.
    pub entries: u64,
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
        "{path} is a backup of format {found}, and this troupe reads format {VERSION}; restore \
         it with the troupe version that took it"
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
}

impl SledStore {
    /// Writes a backup of the whole database to `to` (created, or
    /// truncated). Blocks: call it from a blocking thread.
    pub fn backup_to(&self, to: &Path) -> Result<BackupSummary, BackupError> {
        let file = File::create(to).map_err(io_at("create", to))?;
        let room = to.parent().unwrap_or(Path::new("."));
        self.backup_into(file, room).map(|(summary, _)| summary)
    }

    /// Writes a backup of the whole database into `file`, which lives in
    /// the directory `room`, pausing the store's writes while it reads (see
    /// the module doc), and hands the file back. Blocks.
    pub fn backup_into(
        &self,
        file: File,
        room: &Path,
    ) -> Result<(BackupSummary, File), BackupError> {
        let db: &SledDb = self.db();
        let _paused = db.pause_writes();
        let (summary, file) = db.with_open(|handles| write_backup(handles, file, room))??;
        tracing::info!(
            room = %room.display(),
            trees = summary.trees,
            entries = summary.entries,
            bytes = summary.bytes,
            "backed up the sled database"
        );
        Ok((summary, file))
    }
}

fn write_backup(
    handles: &Handles,
    file: File,
    room: &Path,
) -> Result<(BackupSummary, File), BackupError> {
    let read = |source| BackupError::Read { source };
    let wrote = io_at("write the backup in", room);
    handles.sync().map_err(read)?;
    // The copy is at most the live data, which sled's files hold.
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
        }
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

/// Restores the backup `from` into `dir`, which must be absent or empty,
/// as a database a daemon opens with `--data-dir dir`. The whole file is
/// checked first; nothing is written unless it is sound.
pub fn restore(from: &Path, dir: &Path) -> Result<BackupSummary, BackupError> {
    let summary = read_backup(from, &mut Check)?;
    if let Ok(mut listing) = std::fs::read_dir(dir) {
        if listing.next().is_some() {
            return Err(BackupError::NotEmpty { dir: dir.into() });
        }
    }
    let db = sled::Config::new()
        .path(dir)
        .open()
        .map_err(|source| BackupError::Open {
            dir: dir.into(),
            source,
        })?;
    let mut restorer = Restorer {
        db,
        dir,
        tree: None,
        batch: sled::Batch::default(),
        pending: 0,
    };
    read_backup(from, &mut restorer)?;
    restorer.apply()?;
    restorer.db.flush().map_err(|e| restorer.failed(e))?;
    Ok(summary)
}

/// What reading a backup file hands each tree's name and each entry to.
trait Visit {
    fn tree(&mut self, name: &[u8]) -> Result<(), BackupError>;
    fn entry(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<(), BackupError>;
}

/// Reads the file only to check it.
struct Check;

impl Visit for Check {
    fn tree(&mut self, _: &[u8]) -> Result<(), BackupError> {
        Ok(())
    }

    fn entry(&mut self, _: Vec<u8>, _: Vec<u8>) -> Result<(), BackupError> {
        Ok(())
    }
}

/// Writes what it reads into the new database, a batch at a time: one
/// batch per tree would hold a whole tree in memory.
struct Restorer<'a> {
    db: sled::Db,
    dir: &'a Path,
    tree: Option<sled::Tree>,
    batch: sled::Batch,
    pending: usize,
}

impl Restorer<'_> {
    const BATCH: usize = 4096;

    fn failed(&self, source: sled::Error) -> BackupError {
        BackupError::Write {
            dir: self.dir.into(),
            source,
        }
    }

    fn apply(&mut self) -> Result<(), BackupError> {
        let batch = std::mem::take(&mut self.batch);
        self.pending = 0;
        match &self.tree {
            Some(tree) => tree.apply_batch(batch).map_err(|e| self.failed(e)),
            None => Ok(()),
        }
    }
}

impl Visit for Restorer<'_> {
    fn tree(&mut self, name: &[u8]) -> Result<(), BackupError> {
        self.apply()?;
        self.tree = Some(self.db.open_tree(name).map_err(|e| self.failed(e))?);
        Ok(())
    }

    fn entry(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<(), BackupError> {
        self.batch.insert(key, value);
        self.pending += 1;
        if self.pending >= Self::BATCH {
            self.apply()?;
        }
        Ok(())
    }
}

/// Reads a backup file through, handing each tree's name and each entry to
/// `visit`, and checks its count and checksum at the end. A restore reads it
/// twice: once to check it, once to write.
fn read_backup(from: &Path, visit: &mut impl Visit) -> Result<BackupSummary, BackupError> {
    let file = File::open(from).map_err(io_at("open", from))?;
    let size = file.metadata().map_err(io_at("read", from))?.len();
    let corrupt = |reason: String| BackupError::Corrupt {
        path: from.into(),
        reason,
    };
    let mut input = Checked::new(BufReader::with_capacity(1 << 20, file));
    let mut magic = [0u8; 16];
    input
        .read_exact(&mut magic)
        .map_err(|_| corrupt("shorter than its header".into()))?;
    if &magic != MAGIC {
        return Err(corrupt("it does not start as one".into()));
    }
    let version = read_u32(&mut input).map_err(|_| corrupt("no format version".into()))?;
    if version != VERSION {
        return Err(BackupError::Version {
            path: from.into(),
            found: version,
        });
    }
    let mut summary = BackupSummary {
        bytes: size,
        ..BackupSummary::default()
    };
    let cut = |what: &str| corrupt(format!("it ends inside {what} (a partial copy?)"));
    loop {
        let mut tag = [0u8; 1];
        input.read_exact(&mut tag).map_err(|_| cut("a tree"))?;
        match tag[0] {
            TREE => {
                let name = read_bytes(&mut input, size).map_err(|_| cut("a tree name"))?;
                visit.tree(&name)?;
                summary.trees = summary.trees.saturating_add(1);
            }
            ENTRY if summary.trees == 0 => {
                return Err(corrupt("an entry before any tree".into()));
            }
            ENTRY => {
                let key = read_bytes(&mut input, size).map_err(|_| cut("a key"))?;
                let value = read_bytes(&mut input, size).map_err(|_| cut("a value"))?;
                visit.entry(key, value)?;
                summary.entries = summary.entries.saturating_add(1);
            }
            END => break,
            other => return Err(corrupt(format!("an unknown record type {other}"))),
        }
    }
    let mut stated = [0u8; 8];
    input
        .read_exact(&mut stated)
        .map_err(|_| cut("the entry count"))?;
    let stated = u64::from_le_bytes(stated);
    if stated != summary.entries {
        return Err(corrupt(format!(
            "it says {stated} entries and holds {}",
            summary.entries
        )));
    }
    let computed = input.crc.clone().finalize();
    let mut crc = [0u8; 4];
    input
        .inner
        .read_exact(&mut crc)
        .map_err(|_| cut("the checksum"))?;
    if u32::from_le_bytes(crc) != computed {
        return Err(corrupt("its checksum does not match its contents".into()));
    }
    if input
        .inner
        .read(&mut [0u8; 1])
        .map_err(io_at("read", from))?
        != 0
    {
        return Err(corrupt("bytes follow its checksum".into()));
    }
    Ok(summary)
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
