//! Write-behind: dirty actor state reaches the store in batches.
//!
//! Turns mark keys dirty and put their activation on the dirty list. The
//! flusher writes every dirty actor's changed keys as one batch when the
//! flush interval passes, when dirty bytes pass a threshold, or at once when
//! a `durable` call waits for its writes (group commit). All writes to the
//! store go through one lock, so a batch can never overtake an older one:
//! the store never sees an older value after a newer one.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tracing::{debug, warn};
use troupe_placement::Placement;
use troupe_storage::{ActorWrite, StateStore};

use crate::activation::{Activation, Inner};
use crate::error::{CallError, Unavailable};
use crate::metrics::Metrics;
use crate::reply::Reply;
use crate::types::{Payload, TRACE_TARGET};
use tracing::Instrument;

/// A `durable` reply held until its writes are stored.
type HeldReply = (Reply, Result<Payload, CallError>);

pub(crate) struct Flusher {
    store: Arc<dyn StateStore>,
    dirty: Mutex<Vec<Arc<Activation>>>,
    dirty_bytes: AtomicUsize,
    max_dirty_bytes: usize,
    held: Mutex<Vec<HeldReply>>,
    wake: Notify,
    /// Serialises every write to the store (see module doc).
    write_lock: tokio::sync::Mutex<()>,
    /// The batch the store is writing, until it answers: when a shutdown
    /// gives up on a write that hangs, these changes are not confirmed.
    in_flight: Mutex<Option<Arc<Vec<ActorWrite>>>>,
    pub(crate) batches: AtomicU64,
    pub(crate) keys_written: AtomicU64,
    /// The last write to the store failed (cleared by the next success).
    failing: AtomicBool,
    /// Why the last failed write failed, as durable callers are told.
    last_failure: Mutex<Option<Unavailable>>,
    /// Wall-clock time of the last stored batch (0: none yet).
    last_flush_unix_ms: AtomicU64,
    metrics: Option<Arc<Metrics>>,
    /// Writes stop when this daemon may no longer serve (its placement lease
    /// lapsed): the actors may be another daemon's by now.
    placement: Arc<dyn Placement>,
}

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

impl std::fmt::Debug for Flusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flusher")
            .field("store", &self.store.describe())
            .finish_non_exhaustive()
    }
}

impl Flusher {
    pub(crate) fn new(
        store: Arc<dyn StateStore>,
        max_dirty_bytes: usize,
        metrics: Option<Arc<Metrics>>,
        placement: Arc<dyn Placement>,
    ) -> Self {
        Self {
            store,
            dirty: Mutex::new(Vec::new()),
            dirty_bytes: AtomicUsize::new(0),
            max_dirty_bytes,
            held: Mutex::new(Vec::new()),
            wake: Notify::new(),
            write_lock: tokio::sync::Mutex::new(()),
            in_flight: Mutex::new(None),
            batches: AtomicU64::new(0),
            keys_written: AtomicU64::new(0),
            failing: AtomicBool::new(false),
            last_failure: Mutex::new(None),
            last_flush_unix_ms: AtomicU64::new(0),
            metrics,
            placement,
        }
    }

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

    pub(crate) fn dirty_bytes(&self) -> usize {
        self.dirty_bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn store(&self) -> &Arc<dyn StateStore> {
        &self.store
    }

    /// Called with the activation locked (`inner`), after a turn made it dirty.
    pub(crate) fn mark_dirty(&self, act: &Arc<Activation>, inner: &mut Inner, bytes: usize) {
        if !inner.in_dirty_list() {
            inner.set_in_dirty_list(true);
            self.dirty.lock().push(act.clone());
        }
        let total = self.dirty_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if total >= self.max_dirty_bytes {
            self.wake.notify_one();
        }
    }

    pub(crate) fn hold_reply(&self, reply: Reply, result: Result<Payload, CallError>) {
        // While the store is failing, a durable caller learns it at once
        // instead of waiting out the retry backoff; its change stays dirty
        // and is written when the store is back.
        if self.failing.load(Ordering::Relaxed) {
            if let Some(failure) = self.last_failure.lock().clone() {
                reply.send(Err(failure.into()));
                return;
            }
        }
        self.held.lock().push((reply, result));
        self.wake.notify_one();
    }

    /// Actors with unflushed changes. The list may hold actors a
    /// deactivation already flushed, so each one is asked; the list is copied
    /// first because activations are locked before the list elsewhere.
    pub(crate) fn dirty_actors(&self) -> usize {
        let listed = self.dirty.lock().clone();
        listed.iter().filter(|a| a.inner.lock().is_dirty()).count()
    }

    /// Flushes on the interval, on the byte threshold and for held replies,
    /// until `stop` completes; retries failed batches with backoff. Stops
    /// only between flushes, never in the middle of a store write.
    pub(crate) async fn run(self: Arc<Self>, interval: Duration, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        let mut backoff = Duration::ZERO;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(interval.max(backoff)) => {}
                _ = self.wake.notified(), if backoff.is_zero() => {}
                () = &mut stop => return,
            }
            match self.flush_dirty().await {
                Ok(()) => backoff = Duration::ZERO,
                Err(e) => {
                    backoff =
                        (backoff * 2).clamp(Duration::from_millis(50), Duration::from_secs(5));
                    warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "state flush failed; dirty state kept in memory");
                }
            }
        }
    }

    /// Writes every dirty actor's changed keys as one batch.
    pub(crate) async fn flush_dirty(&self) -> Result<(), CallError> {
        let _guard = self.write_lock.lock().await;
        // Replies held before the snapshot are covered by it: their changes
        // were applied before they were held.
        let held = std::mem::take(&mut *self.held.lock());
        let acts = std::mem::take(&mut *self.dirty.lock());
        self.dirty_bytes.store(0, Ordering::Relaxed);
        let mut batch = Vec::with_capacity(acts.len());
        let mut written = Vec::with_capacity(acts.len());
        for act in acts {
            let mut inner = act.inner.lock();
            inner.set_in_dirty_list(false);
            if let Some(write) = take_dirty(&act, &mut inner) {
                batch.push(write);
                drop(inner);
                written.push(act);
            }
        }
        self.write(batch, written, held).await
    }

    /// Writes one actor's dirty keys now (deactivation, hand-off).
    pub(crate) async fn flush_actor(&self, act: &Arc<Activation>) -> Result<(), CallError> {
        let _guard = self.write_lock.lock().await;
        let write = take_dirty(act, &mut act.inner.lock());
        match write {
            Some(w) => {
                // These bytes no longer wait for the periodic flush.
                let bytes = write_bytes(&w);
                let _ = self
                    .dirty_bytes
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| {
                        Some(d.saturating_sub(bytes))
                    });
                self.write(vec![w], vec![act.clone()], Vec::new()).await
            }
            None => Ok(()),
        }
    }

    async fn write(
        &self,
        batch: Vec<ActorWrite>,
        acts: Vec<Arc<Activation>>,
        held: Vec<HeldReply>,
    ) -> Result<(), CallError> {
        let result = if batch.is_empty() {
            Ok(())
        } else if !self.placement.may_serve() {
            // Another daemon may own these actors now: not written.
            Err((Unavailable::LeaseLapsed, batch))
        } else {
            let keys: usize = batch.iter().map(|w| w.changes.len()).sum();
            let bytes: usize = batch.iter().map(write_bytes).sum();
            let actors = batch.len();
            let started = tokio::time::Instant::now();
            let span = tracing::info_span!(
                target: TRACE_TARGET,
                parent: None,
                "troupe.flush",
                troupe.flush.actors = actors,
                troupe.flush.keys = keys,
                troupe.flush.bytes = bytes,
                otel.status_code = tracing::field::Empty,
                error = tracing::field::Empty,
            );
            let batch = Arc::new(batch);
            *self.in_flight.lock() = Some(batch.clone());
            let result = self
                .store
                .write_batch(&batch)
                .instrument(span.clone())
                .await;
            // Not reached when the write is abandoned (its future dropped):
            // the batch then stays in flight, for `unwritten`.
            self.in_flight.lock().take();
            let batch = Arc::unwrap_or_clone(batch);
            let took = started.elapsed();
            match &result {
                Ok(()) => {
                    self.batches.fetch_add(1, Ordering::Relaxed);
                    self.keys_written.fetch_add(keys as u64, Ordering::Relaxed);
                    self.last_flush_unix_ms
                        .store(crate::clock::unix_now_ms(), Ordering::Relaxed);
                    if let Some(metrics) = &self.metrics {
                        metrics.flushed(keys, took);
                    }
                    debug!(
                        actors,
                        keys,
                        bytes,
                        latency_us = took.as_micros() as u64,
                        "flushed state batch"
                    );
                }
                Err(e) => {
                    span.record("otel.status_code", "ERROR");
                    span.record("error", tracing::field::display(e));
                    if let Some(metrics) = &self.metrics {
                        metrics.flush_failed();
                    }
                }
            }
            result.map_err(|source| {
                let failure = Unavailable::Store {
                    what: "the state store failed".into(),
                    source,
                    remedy: "the change is kept in memory and retried, but was not confirmed \
                             durable",
                };
                (failure, batch)
            })
        };
        self.failing.store(result.is_err(), Ordering::Relaxed);
        match result {
            Ok(()) => {
                for (reply, result) in held {
                    reply.send(result);
                }
                Ok(())
            }
            Err((failure, batch)) => {
                // Put the keys back so the next flush writes them (with
                // whatever value is current by then: never an older one).
                for (act, write) in acts.iter().zip(batch) {
                    let mut inner = act.inner.lock();
                    let dirty = inner.dirty.get_or_insert_with(Default::default);
                    dirty.extend(write.changes.into_iter().map(|(k, _)| k));
                    self.mark_dirty(act, &mut inner, 0);
                }
                // A durable caller must not wait for the store to come back:
                // tell it now. The write may or may not have happened; the
                // state stays dirty and is retried.
                *self.last_failure.lock() = Some(failure.clone());
                for (reply, _) in held {
                    reply.send(Err(failure.clone().into()));
                }
                Err(failure.into())
            }
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
                    .extend(dirty.iter().cloned());
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

/// Key and value bytes a write carries, for the flush threshold and logs.
fn write_bytes(w: &ActorWrite) -> usize {
    w.changes
        .iter()
        .map(|(k, v)| k.len() + v.as_ref().map_or(0, |v| v.len()))
        .sum()
}

fn take_dirty(act: &Activation, inner: &mut Inner) -> Option<ActorWrite> {
    let dirty = inner.dirty.take()?;
    if dirty.is_empty() {
        return None;
    }
    let changes = dirty
        .into_iter()
        .map(|key| {
            let value = inner.state.get(&key).cloned();
            (key, value)
        })
        .collect();
    Some(ActorWrite {
        actor_type: act.id.ty.to_string(),
        actor_id: act.id.id.to_string(),
        changes,
    })
}
