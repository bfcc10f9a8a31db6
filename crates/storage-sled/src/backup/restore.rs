//! A backup's restore into an empty directory: the file checked whole
//! first, then its trees written and its log replayed over them.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use super::{
    io_at, read_bytes, read_u32, BackupError, BackupSummary, Checked, END, ENTRY, LOG, MAGIC,
    REMOVE, TREE, VERSION, VERSION_WITHOUT_LOG,
};

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
    /// `None` removes the key.
    fn change(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) -> Result<(), BackupError>;
}

/// Reads the file only to check it.
struct Check;

impl Visit for Check {
    fn tree(&mut self, _: &[u8]) -> Result<(), BackupError> {
        Ok(())
    }

    fn change(&mut self, _: Vec<u8>, _: Option<Vec<u8>>) -> Result<(), BackupError> {
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

    fn change(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) -> Result<(), BackupError> {
        // A batch keeps the last change of each key, as the log's order
        // asks; batches are applied in the file's order.
        match value {
            Some(value) => self.batch.insert(key, value),
            None => self.batch.remove(key),
        }
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
    if !(VERSION_WITHOUT_LOG..=VERSION).contains(&version) {
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
    let mut in_log = false;
    loop {
        let mut tag = [0u8; 1];
        input.read_exact(&mut tag).map_err(|_| cut("a tree"))?;
        match tag[0] {
            TREE => {
                let name = read_bytes(&mut input, size).map_err(|_| cut("a tree name"))?;
                visit.tree(&name)?;
                if !in_log {
                    summary.trees = summary.trees.saturating_add(1);
                }
            }
            ENTRY | REMOVE if summary.trees == 0 => {
                return Err(corrupt("an entry before any tree".into()));
            }
            ENTRY => {
                let key = read_bytes(&mut input, size).map_err(|_| cut("a key"))?;
                let value = read_bytes(&mut input, size).map_err(|_| cut("a value"))?;
                visit.change(key, Some(value))?;
                summary.entries = summary.entries.saturating_add(1);
                if in_log {
                    summary.logged = summary.logged.saturating_add(1);
                }
            }
            REMOVE if in_log => {
                let key = read_bytes(&mut input, size).map_err(|_| cut("a key"))?;
                visit.change(key, None)?;
                summary.entries = summary.entries.saturating_add(1);
                summary.logged = summary.logged.saturating_add(1);
            }
            LOG if version > VERSION_WITHOUT_LOG && !in_log => in_log = true,
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
