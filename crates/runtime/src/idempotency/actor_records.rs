//! One live actor's keyed calls in memory: the answers its store does not
//! hold yet, by key, and the fingerprints of those it does, bounded to the
//! [`MAX_IN_MEMORY`] most recent; past them, 32-bit tags of the keys let go,
//! up to [`MAX_LET_GO`], so that memory still knows every key the store
//! holds and a key it does not know is new without a store read.

use std::collections::VecDeque;
use std::sync::Arc;

use hashbrown::HashMap;

use super::answer::Answer;

/// Stored keys remembered per live actor (about 60-110 bytes each).
pub(crate) const MAX_IN_MEMORY: usize = 1024;

/// Stored keys let go past [`MAX_IN_MEMORY`] that are still remembered as
/// tags (8 bytes each, 64 KiB at most per actor). A retry of one asks the
/// store; an actor with more asks the store about every key memory does
/// not know, unless its caller says the key is new. Business keys a caller
/// chose (not marked new) thus cost no store read for actors with up to
/// [`LOAD_LIMIT`] keys in the retention window.
pub(crate) const MAX_LET_GO: usize = 8 * 1024;

/// The most recent keys an activation reads: enough to fill both.
pub(crate) const LOAD_LIMIT: usize = MAX_IN_MEMORY + MAX_LET_GO;

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
    /// Not in memory, but the store may hold it: its tag is among the keys
    /// let go, or the actor has records memory knows nothing of (and the
    /// caller did not say the key is new).
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
    /// Stored keys let go from `stored`, oldest first: their tags, with
    /// when they were recorded (Unix seconds).
    let_go: VecDeque<(u32, u32)>,
    /// The store holds records of this actor that memory does not know.
    spilled: bool,
}

/// A fingerprint's top 32 bits: two keys of an actor share one with odds
/// of 1 in 4 billion, which costs the newer one a store read.
fn tag(fingerprint: Fingerprint) -> u32 {
    (fingerprint >> 96) as u32
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
            None if new_key => Lookup::New,
            None if self.spilled => Lookup::AskStore,
            // A scan, but of at most 8,192 tags, and only for keys memory
            // does not know: cheaper than the store read it saves.
            None if self.let_go.iter().any(|(t, _)| *t == tag(fingerprint)) => Lookup::AskStore,
            None => Lookup::New,
        }
    }

    /// Keeps `answer` until its flush; a key recorded already (since
    /// `cutoff`) keeps its first answer. Returns whether this is the key's
    /// first record that memory knows of.
    pub(super) fn record(
        &mut self,
        key: &str,
        fingerprint: Fingerprint,
        at_unix_ms: u64,
        answer: Answer,
        cutoff: u64,
    ) -> bool {
        self.expire_stored(cutoff);
        let waiting = self
            .waiting
            .get(key)
            .is_some_and(|w| w.at_unix_ms >= cutoff);
        if waiting || self.stored.contains_key(&fingerprint) {
            return false;
        }
        self.waiting
            .insert(key.into(), Waiting { at_unix_ms, answer });
        true
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
            if let Some(at) = self.stored.remove(&oldest) {
                self.let_go(oldest, at);
            }
        }
    }

    /// Keeps the tag of a stored key `remember` let go; past
    /// [`MAX_LET_GO`] memory no longer knows every stored key.
    fn let_go(&mut self, fingerprint: Fingerprint, at_unix_ms: u64) {
        if self.spilled {
            return;
        }
        if self.let_go.len() >= MAX_LET_GO {
            self.spilled = true;
            self.let_go = VecDeque::new();
            return;
        }
        let secs = u32::try_from(at_unix_ms / 1000).unwrap_or(u32::MAX);
        self.let_go.push_back((tag(fingerprint), secs));
    }

    /// Drops stored keys and tags from before `cutoff` (the oldest first,
    /// cheap enough for every record).
    fn expire_stored(&mut self, cutoff: u64) {
        // Tags are of keys older than any fingerprint's. One stays while
        // any millisecond of its second is in the window.
        while let Some((_, secs)) = self.let_go.front() {
            let last_ms = u64::from(*secs).saturating_mul(1000).saturating_add(999);
            if last_ms >= cutoff {
                break;
            }
            self.let_go.pop_front();
        }
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
        if self.let_go.capacity() > 2 * self.let_go.len() + 64 {
            self.let_go.shrink_to_fit();
        }
        !self.stored.is_empty()
            || !self.waiting.is_empty()
            || !self.let_go.is_empty()
            || self.spilled
    }

    /// Bytes the stored keys' fingerprints and tags take: what
    /// [`forget_stored`](Self::forget_stored) gives back. Counted by
    /// capacity, as allocated.
    pub(super) fn footprint(&self) -> usize {
        self.fingerprint_bytes()
            .saturating_add(self.let_go.capacity().saturating_mul(8))
    }

    /// The part of [`footprint`](Self::footprint) that fingerprints take:
    /// what [`compact`](Self::compact) frees, less the tags it adds.
    pub(super) fn fingerprint_bytes(&self) -> usize {
        // A map slot holds a (u128, u64) padded to 32 bytes and a control
        // byte; the map keeps one slot in eight free.
        const STORED_SLOT: usize = 33 * 8 / 7;
        self.stored
            .capacity()
            .saturating_mul(STORED_SLOT)
            .saturating_add(self.order.capacity().saturating_mul(16))
    }

    /// Keeps the stored keys as tags only, which take a seventh of the
    /// memory: a new key is still told without a store read, a retry of a
    /// stored key reads the store. Past [`MAX_LET_GO`] tags the actor
    /// forgets them all, as [`let_go`](Self::let_go) does.
    pub(super) fn compact(&mut self) {
        let mut stored = std::mem::take(&mut self.stored);
        for fingerprint in std::mem::take(&mut self.order) {
            if let Some(at) = stored.remove(&fingerprint) {
                self.let_go(fingerprint, at);
            }
        }
    }

    /// Forgets every stored key: from now on a key memory does not know
    /// may be in the store, so it is asked unless the caller says the key
    /// is new. Answers waiting for their flush stay.
    pub(super) fn forget_stored(&mut self) {
        self.stored = HashMap::new();
        self.order = VecDeque::new();
        self.let_go = VecDeque::new();
        self.spilled = true;
    }

    /// Records held: answers and fingerprints.
    #[cfg(test)]
    pub(super) fn len(&self) -> (usize, usize) {
        (self.waiting.len(), self.stored.len())
    }

    /// Tags of keys let go, and whether memory gave up knowing them all.
    #[cfg(test)]
    pub(super) fn let_go_len(&self) -> (usize, bool) {
        (self.let_go.len(), self.spilled)
    }
}
