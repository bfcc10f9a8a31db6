//! The hand-off from the core's runtime thread to Python's event loop.
//!
//! Runtime threads push what they have for Python (turns, answers to calls)
//! onto a queue, and only the push that finds the queue empty writes one
//! byte to a socket pair. The event loop watches the other end
//! (`loop.add_reader`) and takes the whole queue at once. So a burst of work
//! costs Python one wake-up, and the runtime threads never take the GIL: a
//! thread waiting for the GIL would stall every connection it serves while
//! Python runs handlers.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;

use parking_lot::Mutex;

#[derive(Debug)]
pub(crate) struct Inbox<T> {
    queue: Mutex<Vec<T>>,
    /// Written by the runtime side when the queue stops being empty.
    signal: UnixStream,
    /// Watched by the event loop; drained before the queue is taken, so a
    /// push after the take always leaves a byte for the next wake-up.
    wake: UnixStream,
}

impl<T> Inbox<T> {
    pub(crate) fn new() -> std::io::Result<Self> {
        let (signal, wake) = UnixStream::pair()?;
        signal.set_nonblocking(true)?;
        wake.set_nonblocking(true)?;
        Ok(Self {
            queue: Mutex::new(Vec::new()),
            signal,
            wake,
        })
    }

    pub(crate) fn push(&self, item: T) {
        self.push_all(std::iter::once(item));
    }

    pub(crate) fn push_all(&self, items: impl IntoIterator<Item = T>) {
        let was_empty = {
            let mut queue = self.queue.lock();
            let was_empty = queue.is_empty();
            queue.extend(items);
            was_empty && !queue.is_empty()
        };
        if was_empty {
            // WouldBlock: the socket is full of wake-ups Python has not read
            // yet, so one is pending anyway.
            if let Err(e) = (&self.signal).write(&[1]) {
                if e.kind() != ErrorKind::WouldBlock {
                    tracing::warn!(error = %e, "could not wake the event loop");
                }
            }
        }
    }

    /// Everything queued so far, in order.
    pub(crate) fn take(&self) -> Vec<T> {
        let mut buf = [0u8; 256];
        while let Ok(n) = (&self.wake).read(&mut buf) {
            if n < buf.len() {
                break;
            }
        }
        std::mem::take(&mut *self.queue.lock())
    }

    pub(crate) fn fileno(&self) -> RawFd {
        self.wake.as_raw_fd()
    }
}
