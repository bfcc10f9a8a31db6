//! What write-behind owes the store, as status output and a shutdown's
//! report read it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;

use super::Flusher;

/// What write-behind still owes the store, for status output.
#[derive(Debug, Clone, Default)]
pub struct FlushBacklog {
    pub dirty_actors: usize,
    pub dirty_bytes: usize,
    /// Durable replies waiting for their batch.
    pub held_replies: usize,
    pub batches: u64,
    pub keys_written: u64,
    pub last_flush_unix_ms: u64,
    pub failing: bool,
    /// Empty when the last write succeeded.
    pub last_error: String,
}

impl Flusher {
    pub(crate) fn backlog(&self) -> FlushBacklog {
        let failing = self.failing.load(Ordering::Relaxed);
        FlushBacklog {
            dirty_actors: self.dirty_actors(),
            dirty_bytes: self.dirty_bytes(),
            held_replies: self.held.lock().len(),
            batches: self.batches.load(Ordering::Relaxed),
            keys_written: self.keys_written.load(Ordering::Relaxed),
            last_flush_unix_ms: self.last_flush_unix_ms.load(Ordering::Relaxed),
            failing,
            // The error of the last write, which is the one that failed.
            last_error: if failing {
                self.last_failure
                    .lock()
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default()
            } else {
                String::new()
            },
        }
    }
}

/// State the store has not confirmed: one actor's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnwrittenState {
    pub actor_type: String,
    pub actor_id: String,
    pub keys: Vec<String>,
}

impl Flusher {
    /// Every change the store has not confirmed: dirty keys, and the batch
    /// of a write that was abandoned before the store answered. Sorted by
    /// actor, keys sorted.
    pub(crate) fn unwritten(&self) -> Vec<UnwrittenState> {
        let mut unwritten: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
        if let Some(batch) = self.in_flight.lock().clone() {
            for write in batch.iter() {
                unwritten
                    .entry((write.actor_type.clone(), write.actor_id.clone()))
                    .or_default()
                    .extend(write.changes.iter().map(|(key, _)| key.clone()));
            }
        }
        let listed = self.dirty.lock().clone();
        for act in listed {
            let inner = act.inner.lock();
            if let Some(dirty) = inner.dirty.as_ref().filter(|d| !d.is_empty()) {
                unwritten
                    .entry((act.id.ty.to_string(), act.id.id.to_string()))
                    .or_default()
                    .extend(dirty.keys.iter().cloned());
            }
        }
        unwritten
            .into_iter()
            .map(|((actor_type, actor_id), keys)| UnwrittenState {
                actor_type,
                actor_id,
                keys: keys.into_iter().collect(),
            })
            .collect()
    }
}
