//! The marks of `retention` on their way to the scheduler: how an actor
//! was last seen, as its `$retain` reminder's data, and the queue the
//! lifecycle notes them in without waiting, with how many wait per actor
//! (a purge waits for its actor's, admin deactivation and the test clock
//! for theirs). The same queue carries the `$expire` reminder an actor
//! leaves as it goes holding keys that expire (`crate::expiry`), so those
//! waits cover it too. Data only, so that `Shared` can hold the queue.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, Notify};

use crate::input::millis;
use crate::types::ActorId;

/// How the actor was last seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Seen {
    Active,
    Idle,
}

/// The `$retain` reminder's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Mark {
    pub(crate) seen: Seen,
    /// The retention it was set with: what its firing uses while no app
    /// says the type's retention.
    pub(crate) retention_ms: u64,
}

impl Mark {
    /// The data of a mark someone else wrote (a hand-edited record, a
    /// future version): read as `active`, the case that erases nothing.
    pub(crate) fn read(data: &[u8], fallback: Duration) -> Mark {
        serde_json::from_slice(data).unwrap_or(Mark {
            seen: Seen::Active,
            retention_ms: millis(fallback),
        })
    }
}

/// A daemon reminder of one actor to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Noting {
    /// Its `$retain` mark, seen so, for the type's retention.
    Retain { seen: Seen, retention: Duration },
    /// Its `$expire` reminder, due when its first key expires.
    Expire { due_unix_ms: u64 },
}

impl Noting {
    /// Which reminder it writes: the latest noted of each is written.
    pub(crate) fn is_expire(self) -> bool {
        matches!(self, Noting::Expire { .. })
    }
}

/// A reminder waiting to be written.
#[derive(Debug)]
pub(crate) struct Noted {
    pub(crate) actor: ActorId,
    pub(crate) noting: Noting,
}

/// The queue of marks the lifecycle notes, and how many wait per actor.
#[derive(Debug)]
pub(crate) struct Marks {
    tx: mpsc::UnboundedSender<Noted>,
    /// Taken by `Runtime::start` for the writer task.
    rx: Mutex<Option<mpsc::UnboundedReceiver<Noted>>>,
    waiting: Mutex<HashMap<ActorId, usize>>,
    written: Notify,
}

impl Marks {
    pub(crate) fn new() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            tx,
            rx: Mutex::new(Some(rx)),
            waiting: Mutex::default(),
            written: Notify::new(),
        }
    }

    pub(crate) fn note(&self, actor: &ActorId, noting: Noting) {
        *self.waiting.lock().entry(actor.clone()).or_default() += 1;
        let noted = Noted {
            actor: actor.clone(),
            noting,
        };
        if self.tx.send(noted).is_err() {
            // No writer (stopped): nothing will be written.
            self.done(actor, 1);
        }
    }

    pub(crate) fn done(&self, actor: &ActorId, count: usize) {
        let mut waiting = self.waiting.lock();
        if let Some(left) = waiting.get_mut(actor) {
            *left = left.saturating_sub(count);
            if *left == 0 {
                waiting.remove(actor);
            }
        }
        drop(waiting);
        self.written.notify_waiters();
    }

    /// Returns once no mark noted for `actor` (`None`: for any actor)
    /// waits to be written.
    pub(crate) async fn settled(&self, actor: Option<&ActorId>) {
        loop {
            let written = self.written.notified();
            tokio::pin!(written);
            written.as_mut().enable();
            let pending = {
                let waiting = self.waiting.lock();
                match actor {
                    Some(actor) => waiting.contains_key(actor),
                    None => !waiting.is_empty(),
                }
            };
            if !pending {
                return;
            }
            written.await;
        }
    }

    pub(crate) fn take_receiver(&self) -> Option<mpsc::UnboundedReceiver<Noted>> {
        self.rx.lock().take()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn settled_waits_for_the_marks_of_its_actor_only() {
        let marks = Arc::new(Marks::new());
        let (a, b) = (ActorId::new("cart", "a"), ActorId::new("cart", "b"));
        let active = Noting::Retain {
            seen: Seen::Active,
            retention: Duration::from_secs(60),
        };
        marks.note(&a, active);
        marks.note(&b, active);
        marks.settled(Some(&ActorId::new("cart", "c"))).await;
        let waiting = tokio::spawn({
            let marks = marks.clone();
            let a = a.clone();
            async move { marks.settled(Some(&a)).await }
        });
        marks.done(&b, 1);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        marks.done(&a, 1);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .map(|joined| joined.is_ok())
            .map_or_else(|_| panic!("settled did not return"), |ok| assert!(ok));
    }
}
