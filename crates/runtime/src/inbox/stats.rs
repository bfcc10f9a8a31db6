//! What happens to durable tells, counted per actor type: plain atomics,
//! always on (`troupe status` reads them as well as `/metrics`).
//!
//! Each type's counters are resolved once, held by the type's bindings and
//! by every durable tell in memory ([`Held`]), so counting on a tell's path
//! is an atomic add, never a lookup. The inbox depth is kept by [`Held`]
//! itself: a guard that counts while a durable tell is in memory here and
//! uncounts when it is dropped, whichever way it goes (handled, dead-lettered,
//! rerouted, dropped with its activation), so the gauge cannot drift.
//!
//! A leaf: activations and hosts reach it through the tells they hold.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

/// One actor type's durable tells.
#[derive(Debug, Default)]
pub(crate) struct InboxCounters {
    /// Durable tells in memory here (see [`Held`]).
    held: AtomicI64,
    stored: AtomicU64,
    delivered: AtomicU64,
    retried: AtomicU64,
    dead_lettered: AtomicU64,
    redriven: AtomicU64,
    dropped: AtomicU64,
}

/// A copy of one type's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeliveryCounts {
    /// Durable tells held by this daemon's activations now: sequenced
    /// (stored or being stored) and neither handled nor dead-lettered yet,
    /// whether queued, running or waiting for a retry.
    pub inbox_depth: u64,
    /// Since start: tells appended to an inbox here (each acknowledged once
    /// the batch that carries it is stored).
    pub stored: u64,
    /// Tells whose turn succeeded (their removal is written with its state).
    pub delivered: u64,
    /// Failed attempts that were retried.
    pub retried: u64,
    /// Tells that failed every attempt and became dead letters.
    pub dead_lettered: u64,
    /// Dead letters re-driven through this daemon.
    pub redriven: u64,
    /// Dead letters dropped through this daemon.
    pub dropped: u64,
}

impl DeliveryCounts {
    /// The sum of `self` and `other`, field by field.
    pub fn plus(self, other: DeliveryCounts) -> DeliveryCounts {
        DeliveryCounts {
            inbox_depth: self.inbox_depth + other.inbox_depth,
            stored: self.stored + other.stored,
            delivered: self.delivered + other.delivered,
            retried: self.retried + other.retried,
            dead_lettered: self.dead_lettered + other.dead_lettered,
            redriven: self.redriven + other.redriven,
            dropped: self.dropped + other.dropped,
        }
    }
}

impl InboxCounters {
    fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn delivered(&self) {
        Self::add(&self.delivered);
    }

    pub(crate) fn retried(&self) {
        Self::add(&self.retried);
    }

    pub(crate) fn dead_lettered(&self) {
        Self::add(&self.dead_lettered);
    }

    pub(crate) fn redriven(&self) {
        Self::add(&self.redriven);
    }

    pub(crate) fn dropped(&self) {
        Self::add(&self.dropped);
    }

    /// A durable tell was appended to an inbox: counted as stored, and held
    /// until the returned guard is dropped.
    pub(crate) fn stored(&'static self) -> Held {
        Self::add(&self.stored);
        Held::new(self)
    }

    pub(crate) fn counts(&self) -> DeliveryCounts {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DeliveryCounts {
            // Never below zero: a guard's drop may be seen before its
            // creation by a reader on another core.
            inbox_depth: u64::try_from(self.held.load(Ordering::Relaxed)).unwrap_or(0),
            stored: load(&self.stored),
            delivered: load(&self.delivered),
            retried: load(&self.retried),
            dead_lettered: load(&self.dead_lettered),
            redriven: load(&self.redriven),
            dropped: load(&self.dropped),
        }
    }
}

/// Counts one durable tell as held here for as long as it lives; a clone
/// counts once more (a retry holds a copy while the failed turn's ends).
#[derive(Debug)]
pub(crate) struct Held(&'static InboxCounters);

impl Held {
    pub(crate) fn new(counters: &'static InboxCounters) -> Held {
        counters.held.fetch_add(1, Ordering::Relaxed);
        Held(counters)
    }

    pub(crate) fn counters(&self) -> &'static InboxCounters {
        self.0
    }
}

impl Clone for Held {
    fn clone(&self) -> Held {
        Held::new(self.0)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Every type's counters, created on first use and kept for the life of
/// the process: one small allocation per distinct type name, as the
/// per-type call bounds (`PendingCalls`), so tells can hold `&'static`
/// handles without reference counts.
#[derive(Debug, Default)]
pub(crate) struct InboxStats {
    types: RwLock<HashMap<Arc<str>, &'static InboxCounters>>,
}

impl InboxStats {
    /// The counters of `ty`. Takes a lock: for registration, activation,
    /// retries and admin calls, not for each tell.
    pub(crate) fn for_type(&self, ty: &str) -> &'static InboxCounters {
        if let Some(counters) = self.types.read().get(ty).copied() {
            return counters;
        }
        self.types
            .write()
            .entry(Arc::from(ty))
            .or_insert_with(|| &*Box::leak(Box::default()))
    }

    /// Every type's counts, sorted by type.
    pub(crate) fn per_type(&self) -> Vec<(String, DeliveryCounts)> {
        let mut out: Vec<(String, DeliveryCounts)> = self
            .types
            .read()
            .iter()
            .map(|(ty, counters)| (ty.to_string(), counters.counts()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The counts of every type added up.
    pub(crate) fn total(&self) -> DeliveryCounts {
        self.per_type()
            .into_iter()
            .fold(DeliveryCounts::default(), |sum, (_, c)| sum.plus(c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_tell_counts_until_every_copy_is_dropped() {
        let stats = InboxStats::default();
        let log = stats.for_type("log");
        let held = log.stored();
        let retry = held.clone();
        assert_eq!(log.counts().inbox_depth, 2);
        drop(held);
        assert_eq!(log.counts().inbox_depth, 1);
        drop(retry);
        assert_eq!(
            log.counts(),
            DeliveryCounts {
                stored: 1,
                ..DeliveryCounts::default()
            }
        );
    }

    #[test]
    fn types_are_counted_apart_and_summed() {
        let stats = InboxStats::default();
        let (a, b) = (stats.for_type("a"), stats.for_type("b"));
        assert!(std::ptr::eq(a, stats.for_type("a")), "one set per type");
        let _held = a.stored();
        a.delivered();
        b.retried();
        b.dead_lettered();
        b.redriven();
        b.dropped();
        let per_type = stats.per_type();
        assert_eq!(
            per_type.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(
            stats.total(),
            DeliveryCounts {
                inbox_depth: 1,
                stored: 1,
                delivered: 1,
                retried: 1,
                dead_lettered: 1,
                redriven: 1,
                dropped: 1,
            }
        );
    }
}
