//! The writes a backup lets through while it reads: every insert and
//! removal in every tree from the instant the log starts, kept in a file
//! per tree in the order that tree saw them, until the instant it finishes.
//!
//! sled tells a subscriber (`Tree::watch_prefix`) every change to a key in
//! the order all threads see that key change, which is all a log needs:
//! whatever a backup's read of a tree saw of a key, the key's last logged
//! change, applied after the read, leaves it as it was when the log
//! finished. sled makes a writer wait while a subscriber's queue (1,024
//! events) is full, so each tree's log is drained by a thread of its own
//! into a file, never into memory, and a drain that cannot write its file
//! goes on draining, so no write waits for a failed backup.

use std::fs::File;
use std::future::Future;
use std::io::{BufWriter, Seek, Write};
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{write_bytes, BackupError, ENTRY, REMOVE};
use crate::db::Handles;

/// How often an idle drain looks whether it should stop, should no wake-up
/// reach it.
const POLL: Duration = Duration::from_millis(20);

const RUNNING: u8 = 0;
/// Writes are held: take what is queued, then stop.
const FINISHING: u8 = 1;
/// The backup failed: stop at once.
const ABANDONED: u8 = 2;

/// The running log; [`finish`](Self::finish) it while writes are held.
/// Dropped unfinished, its drains stop and its files go.
pub(super) struct WriteLog {
    state: Arc<AtomicU8>,
    drains: Vec<(Vec<u8>, JoinHandle<Drained>)>,
}

/// One tree's changes, ready to be copied into the backup.
pub(super) struct TreeLog {
    pub(super) tree: Vec<u8>,
    /// The changes as backup records, from the file's start.
    pub(super) file: File,
    pub(super) changes: u64,
}

/// What a drain kept: its file, rewound, and how many changes it holds.
type Drained = Result<(File, u64), Failure>;

enum Failure {
    Spill(std::io::Error),
    /// The subscription ended: the database was closed or re-opened.
    Closed,
}

impl WriteLog {
    /// Starts logging every tree of `handles`, each into a file in `room`.
    /// Call it while writes are held, so that no write is half in the
    /// tree and half out of the log.
    pub(super) fn start(handles: &Handles, room: &Path) -> Result<Self, BackupError> {
        let state = Arc::new(AtomicU8::new(RUNNING));
        let mut log = Self {
            state: state.clone(),
            drains: Vec::new(),
        };
        for name in handles.db.tree_names() {
            let tree = handles
                .db
                .open_tree(&name)
                .map_err(|source| BackupError::Read { source })?;
            let file = tempfile::tempfile_in(room).map_err(|source| BackupError::File {
                doing: "create the log of writes during the backup in",
                path: room.into(),
                source,
            })?;
            let subscriber = tree.watch_prefix(Vec::new());
            let state = state.clone();
            let drain = std::thread::Builder::new()
                .name("troupe-backup-log".into())
                .spawn(move || drain(subscriber, file, &state))
                .map_err(|source| BackupError::File {
                    doing: "start a thread logging writes during the backup of",
                    path: room.into(),
                    source,
                })?;
            log.drains.push((name.to_vec(), drain));
        }
        Ok(log)
    }

    /// Takes what each drain still has queued and hands back the logs.
    /// Call it while writes are held: every write done by then is queued.
    pub(super) fn finish(mut self, room: &Path) -> Result<Vec<TreeLog>, BackupError> {
        self.state.store(FINISHING, Ordering::Release);
        self.unpark();
        let failed = |source| BackupError::File {
            doing: "log the writes during the backup in",
            path: room.into(),
            source,
        };
        let mut logs = Vec::with_capacity(self.drains.len());
        for (tree, drain) in std::mem::take(&mut self.drains) {
            let drained = drain
                .join()
                .map_err(|_| failed(std::io::Error::other("the logging thread panicked")))?;
            let (file, changes) = drained.map_err(|failure| match failure {
                Failure::Spill(source) => failed(source),
                Failure::Closed => BackupError::Reopened,
            })?;
            logs.push(TreeLog {
                tree,
                file,
                changes,
            });
        }
        Ok(logs)
    }

    /// Wakes the drains parked for want of changes, to see the new state.
    fn unpark(&self) {
        for (_, drain) in &self.drains {
            drain.thread().unpark();
        }
    }
}

impl Drop for WriteLog {
    fn drop(&mut self) {
        self.state.store(ABANDONED, Ordering::Release);
        self.unpark();
        for (_, drain) in self.drains.drain(..) {
            let _ = drain.join();
        }
    }
}

fn drain(mut subscriber: sled::Subscriber, file: File, state: &AtomicU8) -> Drained {
    let mut out = Ok(BufWriter::with_capacity(1 << 20, file));
    let mut changes = 0u64;
    // A failed spill drains on and keeps nothing, so that no write waits
    // for a backup that has failed.
    let mut record = |event: sled::Event, out: &mut Result<BufWriter<File>, Failure>| {
        if let Ok(writer) = out {
            match write_event(writer, &event) {
                Ok(()) => changes = changes.saturating_add(1),
                Err(e) => *out = Err(Failure::Spill(e)),
            }
        }
    };
    // Polled as a future, which skips the reservations of writes that
    // changed nothing: `Subscriber::next_timeout` in sled 0.34 returns
    // `Disconnected` for those, and for them again at every later call.
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        match Pin::new(&mut subscriber).poll(&mut cx) {
            Poll::Ready(Some(event)) => record(event, &mut out),
            Poll::Ready(None) => {
                out = Err(Failure::Closed);
                break;
            }
            Poll::Pending => match state.load(Ordering::Acquire) {
                RUNNING => std::thread::park_timeout(POLL),
                FINISHING => {
                    // Writes are held, so every change is queued and
                    // complete: take them without waiting.
                    while let Poll::Ready(event) = Pin::new(&mut subscriber).poll(&mut cx) {
                        match event {
                            Some(event) => record(event, &mut out),
                            None => {
                                out = Err(Failure::Closed);
                                break;
                            }
                        }
                    }
                    break;
                }
                _ => break,
            },
        }
        if state.load(Ordering::Acquire) == ABANDONED {
            break;
        }
    }
    let mut file = out?
        .into_inner()
        .map_err(|e| Failure::Spill(e.into_error()))?;
    file.rewind().map_err(Failure::Spill)?;
    Ok((file, changes))
}

/// Wakes a drain parked for want of changes.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Writes `event` as the backup record that replays it.
fn write_event(out: &mut impl Write, event: &sled::Event) -> std::io::Result<()> {
    match event {
        sled::Event::Insert { key, value } => {
            out.write_all(&[ENTRY])?;
            write_bytes(out, key)?;
            write_bytes(out, value)
        }
        sled::Event::Remove { key } => {
            out.write_all(&[REMOVE])?;
            write_bytes(out, key)
        }
    }
}
