//! One live actor's keyed calls in memory: the answers its store does not
//! hold yet, by key, and the fingerprints of those it does, bounded to the
//! [`MAX_IN_MEMORY`] most recent.

use std::collections::VecDeque;
use std::sync::Arc;

use hashbrown::HashMap;

use super::answer::Answer;

/// Stored keys remembered per live actor (about 60-110 bytes each); an
/// actor with more asks the store about keys memory does not know.
pub(crate) const MAX_IN_MEMORY: usize = 1024;

/// 128 bits of a keyed hash of an idempotency key: two keys of one actor
/// share one with odds far below those of two random UUIDs colliding.
pub(super) type Fingerprint = u128;

/// What memory knows about a key.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Recorded, its answer not stored yet.
    Recorded(Answer),
    /// Recorded and stored: the store has the answer.
    Stored,
    /// Not recorded (within the retention window).
    New,
    /// Not in memory, but the actor has records only the store knows (and
    /// the caller did not say the key is new).
    AskStore,
}

#[derive(Debug)]
struct Waiting {
    at_unix_ms: u64,
    answer: Answer,
}

/// Oldest first in `order`.
#[derive(Debug, Default)]
pub(super) struct ActorRecords {
    /// Answers recorded and not stored yet: the store cannot give them.
    waiting: HashMap<Arc<str>, Waiting>,
    /// Stored keys' fingerprints, with when they were recorded.
    stored: HashMap<Fingerprint, u64>,
    /// `stored`'s fingerprints, oldest first.
    order: VecDeque<Fingerprint>,
    /// The store holds records of this actor that memory does not know.
    spilled: bool,
}

impl ActorRecords {
    /// An actor whose store may hold more records than it loaded.
    pub(super) fn spilled() -> Self {
        Self {
            spilled: true,
            ..Self::default()
        }
    }

    /// `new_key`: the caller says it never sent `key` before, so a key
    /// memory does not know is new even where the store knows more.
    pub(super) fn lookup(
        &self,
        key: &str,
        fingerprint: Fingerprint,
        cutoff: u64,
        new_key: bool,
    ) -> Lookup {
        if let Some(w) = self.waiting.get(key) {
            return if w.at_unix_ms >= cutoff {
                Lookup::Recorded(w.answer.clone())
            } else {
                Lookup::New
            };
        }
        match self.stored.get(&fingerprint) {
            Some(at) if *at >= cutoff => Lookup::Stored,
            Some(_) => Lookup::New,
            None if self.spilled && !new_key => Lookup::AskStore,
            None => Lookup::New,
        }
    }

    /// Keeps `answer` until its flush; a key recorded already (since
    /// `cutoff`) keeps its first answer.
    pub(super) fn record(
        &mut self,
        key: &str,
        fingerprint: Fingerprint,
        at_unix_ms: u64,
        answer: Answer,
        cutoff: u64,
    ) {
        self.expire_stored(cutoff);
        let waiting = self
            .waiting
            .get(key)
            .is_some_and(|w| w.at_unix_ms >= cutoff);
        if waiting || self.stored.contains_key(&fingerprint) {
            return;
        }
        self.waiting
            .insert(key.into(), Waiting { at_unix_ms, answer });
    }

    /// The store holds the record of `key` now: memory keeps its
    /// fingerprint only.
    pub(super) fn stored(&mut self, key: &str, fingerprint: Fingerprint) {
        if let Some(w) = self.waiting.remove(key) {
            self.remember(fingerprint, w.at_unix_ms);
        }
    }

    /// After a flush: a burst's answers are gone, and so goes the room
    /// they took (a map keeps its capacity when emptied).
    pub(super) fn shrink_waiting(&mut self) {
        self.waiting.shrink_to(self.waiting.len());
    }

    /// Adds a stored key (in the order they were recorded), letting the
    /// oldest go past the bound.
    pub(super) fn remember(&mut self, fingerprint: Fingerprint, at_unix_ms: u64) {
        if self.stored.contains_key(&fingerprint) {
            return;
        }
        self.stored.insert(fingerprint, at_unix_ms);
        self.order.push_back(fingerprint);
        while self.stored.len() > MAX_IN_MEMORY {
            let Some(oldest) = self.order.pop_front() else {
                return;
            };
            self.stored.remove(&oldest);
            self.spilled = true;
        }
    }

    /// Drops stored keys from before `cutoff` (the oldest first, cheap
    /// enough for every record).
    fn expire_stored(&mut self, cutoff: u64) {
        while let Some(oldest) = self.order.front() {
            if self.stored.get(oldest).is_some_and(|at| *at >= cutoff) {
                return;
            }
            if let Some(oldest) = self.order.pop_front() {
                self.stored.remove(&oldest);
            }
        }
    }

    /// Drops everything from before `cutoff`; whether anything is left (or
    /// the store may still hold some).
    pub(super) fn prune(&mut self, cutoff: u64) -> bool {
        self.expire_stored(cutoff);
        self.waiting.retain(|_, w| w.at_unix_ms >= cutoff);
        !self.stored.is_empty() || !self.waiting.is_empty() || self.spilled
    }

    /// Records held: answers and fingerprints.
    #[cfg(test)]
    pub(super) fn len(&self) -> (usize, usize) {
        (self.waiting.len(), self.stored.len())
    }
}
