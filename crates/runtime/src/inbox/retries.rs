//! Durable tells waiting for another attempt after a failed one, kept for
//! operators: which entry, how many attempts failed, when the next is due,
//! and why the last one failed (`troupe actors get`, `troupe status`,
//! `/metrics`).
//!
//! A record lives from a failed attempt that will be retried until the
//! retry's turn ends or the retry is given up. A path that drops a queued
//! retry silently (its activation unloaded, fenced) leaves a record whose
//! activation is gone: readers check each record's activation and forget
//! those (`inbox::status`). Touched only by failures and retried attempts,
//! never by a first delivery, so the lock is off the path of healthy tells.
//!
//! Lock order: this lock is taken under an activation's lock, never the
//! other way round; readers copy the records out before they look at
//! activations.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::activation::Activation;
use crate::types::ActorId;

/// The longest error kept per record: the dead letter keeps the whole one.
const MAX_ERROR_BYTES: usize = 1024;

/// One tell waiting for (or in) its next attempt.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    /// Tells a record from a later one for the same entry, so that a reader
    /// forgets only what it found stale.
    id: u64,
    /// The activation that retries it.
    pub(crate) act: Weak<Activation>,
    /// Failed attempts so far.
    pub(crate) attempts: u32,
    pub(crate) due_unix_ms: u64,
    pub(crate) error: String,
}

/// An entry: its actor and inbox sequence number.
pub(crate) type Key = (ActorId, u64);

#[derive(Debug, Default)]
pub(crate) struct RetryBoard {
    records: Mutex<HashMap<Key, Record>>,
    next_id: AtomicU64,
}

impl RetryBoard {
    /// Entry `seq` of `act` failed `attempts` times and is tried again at
    /// `due_unix_ms`; `error` is the last failure.
    pub(crate) fn waiting(
        &self,
        act: &Arc<Activation>,
        seq: u64,
        attempts: u32,
        due_unix_ms: u64,
        error: &str,
    ) {
        let record = Record {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            act: Arc::downgrade(act),
            attempts,
            due_unix_ms,
            error: truncated(error, MAX_ERROR_BYTES),
        };
        self.records.lock().insert((act.id.clone(), seq), record);
    }

    /// The entry's retry ended (handled, dead-lettered or given up).
    pub(crate) fn done(&self, actor: &ActorId, seq: u64) {
        self.records.lock().remove(&(actor.clone(), seq));
    }

    /// A copy of the records (of `actor` when set), by actor and seq.
    pub(crate) fn snapshot(&self, actor: Option<&ActorId>) -> Vec<(Key, Record)> {
        let mut out: Vec<(Key, Record)> = self
            .records
            .lock()
            .iter()
            .filter(|((id, _), _)| actor.is_none_or(|a| a == id))
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Forgets the records found stale, unless they were replaced since.
    pub(crate) fn forget(&self, stale: &[(Key, Record)]) {
        if stale.is_empty() {
            return;
        }
        let mut records = self.records.lock();
        for (key, seen) in stale {
            if records.get(key).is_some_and(|r| r.id == seen.id) {
                records.remove(key);
            }
        }
    }
}

/// `s` cut to at most `max` bytes at a character boundary, marked when cut.
fn truncated(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn act(id: &str) -> Arc<Activation> {
        Arc::new(Activation::new(ActorId::new("log", id), 0))
    }

    #[test]
    fn a_record_lives_from_the_failure_until_its_retry_ends() {
        let board = RetryBoard::default();
        let a = act("a");
        board.waiting(&a, 7, 1, 1_000, "ValueError: no");
        board.waiting(&a, 9, 2, 2_000, "ValueError: again");
        let seen = board.snapshot(Some(&a.id));
        assert_eq!(
            seen.iter()
                .map(|((_, seq), r)| (*seq, r.attempts, r.due_unix_ms, r.error.as_str()))
                .collect::<Vec<_>>(),
            [
                (7, 1, 1_000, "ValueError: no"),
                (9, 2, 2_000, "ValueError: again")
            ]
        );
        assert!(board.snapshot(Some(&ActorId::new("log", "b"))).is_empty());
        board.done(&a.id, 7);
        assert_eq!(board.snapshot(None).len(), 1);
    }

    #[test]
    fn forgetting_stale_records_spares_newer_ones() {
        let board = RetryBoard::default();
        let a = act("a");
        board.waiting(&a, 7, 1, 1_000, "first");
        let stale = board.snapshot(None);
        // Failed again meanwhile: a new record for the same entry.
        board.waiting(&a, 7, 2, 3_000, "second");
        board.forget(&stale);
        let left = board.snapshot(None);
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].1.attempts, 2);
        board.forget(&left);
        assert!(board.snapshot(None).is_empty());
    }

    #[test]
    fn long_errors_are_cut_at_a_character_boundary() {
        let error = "é".repeat(1_000);
        let cut = truncated(&error, MAX_ERROR_BYTES);
        assert!(
            cut.len() <= MAX_ERROR_BYTES + '…'.len_utf8(),
            "{}",
            cut.len()
        );
        assert!(cut.ends_with('…'));
        assert_eq!(truncated("short", MAX_ERROR_BYTES), "short");
    }
}
