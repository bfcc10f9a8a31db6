//! Write-behind: dirty actor state reaches the store in batches.
//!
//! Turns mark keys dirty and put their activation on the dirty list. The
//! flusher writes every dirty actor's changed keys as one batch when the
//! flush interval passes, when dirty bytes pass a threshold, or at once when
//! a `durable` call waits for its writes (group commit). All writes to the
//! store go through one lock, so a batch can never overtake an older one:
//! the store never sees an older value after a newer one.

mod batch;
mod fenced;
mod operator_writes;
mod report;
mod take;

use batch::Batch;
pub(crate) use fenced::DropRefused;
pub(crate) use operator_writes::check_expected;
pub use report::{FlushBacklog, UnwrittenState};

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tracing::{debug, warn};
use troupe_placement::Placement;
use troupe_storage::{ActorWrite, CallRecord, StateStore};

use crate::activation::{Activation, Inner, Status};
use crate::error::{CallError, Unavailable};
use crate::idempotency::table::CallRecords;
use crate::metrics::Metrics;
use crate::reply::Reply;
use crate::types::{Payload, TRACE_TARGET};
use tracing::Instrument;

/// Whether a write is made while the lease is held or after it lapsed.
#[derive(Clone, Copy)]
enum Lease {
    /// Written only while the lease lets this daemon serve.
    Held,
    /// The fence's last write: admitted only with epochs, since only the
    /// store's epoch check can tell it from a newer owner's.
    Lapsed,
}

impl Lease {
    fn may_write(self, writes: &[ActorWrite], placement: &dyn Placement) -> bool {
        match self {
            Lease::Held => placement.may_serve(),
            Lease::Lapsed => writes.iter().all(|w| w.epoch.is_some()),
        }
    }
}

/// A `durable` reply held until its actor's writes are stored.
type HeldReply = (Arc<Activation>, Reply, Result<Payload, CallError>);

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
    /// lapsed): the actors may be another daemon's by now. Also gives each
    /// write its owner epoch.
    placement: Arc<dyn Placement>,
    /// Drops the activations whose writes the store refused (a newer owner
    /// has the actor): the runtime, once it exists.
    dropper: fenced::Dropper,
    /// The live actors' call records, told which ones are stored.
    records: Arc<CallRecords>,
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
        records: Arc<CallRecords>,
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
            dropper: fenced::Dropper::new(),
            records,
        }
    }

    /// Who drops refused activations; set once, when the runtime is made.
    pub(crate) fn set_dropper(&self, dropper: std::sync::Weak<dyn DropRefused>) {
        let _ = self.dropper.set(dropper);
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

    pub(crate) fn hold_reply(
        &self,
        act: &Arc<Activation>,
        reply: Reply,
        result: Result<Payload, CallError>,
    ) {
        // While the store is failing, a durable caller learns it at once
        // instead of waiting out the retry backoff; its change stays dirty
        // and is written when the store is back.
        if self.failing.load(Ordering::Relaxed) {
            if let Some(failure) = self.last_failure.lock().clone() {
                reply.send(Err(failure.into()));
                return;
            }
        }
        self.held.lock().push((act.clone(), reply, result));
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
                    // At most 2 s apart: a store that recovers (PostgreSQL
                    // back, disk space freed) is written again within
                    // seconds, while one that stays down costs a write
                    // attempt every 2 s.
                    backoff =
                        (backoff * 2).clamp(Duration::from_millis(50), Duration::from_secs(2));
                    warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "state flush failed; dirty state kept in memory");
                }
            }
        }
    }

    /// Writes every dirty actor's changed keys as one batch.
    pub(crate) async fn flush_dirty(&self) -> Result<(), CallError> {
        self.flush_all(Lease::Held).await
    }

    /// Writes every dirty actor's changed keys once the lease has lapsed,
    /// before the fence drops the activations: each under the epoch this
    /// daemon owned the actor with, so the store refuses the ones a newer
    /// owner has claimed since and keeps the rest, which would otherwise be
    /// lost although nobody else took them (a placement election longer
    /// than the lease). Refused when the placement gives no epochs.
    pub(crate) async fn flush_after_lapse(&self) -> Result<(), CallError> {
        self.flush_all(Lease::Lapsed).await
    }

    async fn flush_all(&self, lease: Lease) -> Result<(), CallError> {
        let _guard = self.write_lock.lock().await;
        // Replies held before the snapshot are covered by it: their changes
        // were applied before they were held.
        let held = std::mem::take(&mut *self.held.lock());
        let acts = std::mem::take(&mut *self.dirty.lock());
        self.dirty_bytes.store(0, Ordering::Relaxed);
        let batch = self.take_batch(acts, held).await;
        self.write(batch, lease).await.map(drop)
    }

    /// Writes one actor's dirty keys now (deactivation, hand-off).
    pub(crate) async fn flush_actor(&self, act: &Arc<Activation>) -> Result<(), CallError> {
        let _guard = self.write_lock.lock().await;
        self.write_actor_locked(act).await
    }

    /// `flush_actor`'s write, for a caller that holds the write lock.
    async fn write_actor_locked(&self, act: &Arc<Activation>) -> Result<(), CallError> {
        let mut batch = Batch::with_capacity(1, Vec::new());
        batch.take(act, &mut act.inner.lock(), &*self.placement);
        // These bytes no longer wait for the periodic flush.
        let bytes: usize = batch.writes.iter().map(write_bytes).sum();
        let _ = self
            .dirty_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| {
                Some(d.saturating_sub(bytes))
            });
        let refused = self.write(batch, Lease::Held).await?;
        if refused > 0 {
            return Err(Unavailable::Fenced {
                actor: act.id.clone(),
            }
            .into());
        }
        Ok(())
    }

    /// Writes `batch`, answers its held replies and hands the activations
    /// whose writes the store refused to the runtime; returns how many.
    async fn write(&self, batch: Batch, lease: Lease) -> Result<usize, CallError> {
        let Batch {
            writes,
            acts,
            held,
            not_owned,
        } = batch;
        let result = if writes.is_empty() {
            Ok(Vec::new())
        } else if !lease.may_write(&writes, &*self.placement) {
            // Another daemon may own these actors now: not written.
            Err((Unavailable::LeaseLapsed, writes))
        } else {
            let keys: usize = writes
                .iter()
                .map(|w| w.changes.len() + w.inbox.len() + w.records.len())
                .sum();
            let bytes: usize = writes.iter().map(write_bytes).sum();
            let actors = writes.len();
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
            let writes = Arc::new(writes);
            *self.in_flight.lock() = Some(writes.clone());
            let result = self
                .store
                .write_batch(&writes)
                .instrument(span.clone())
                .await;
            // Not reached when the write is abandoned (its future dropped):
            // the batch then stays in flight, for `unwritten`.
            self.in_flight.lock().take();
            let writes = Arc::unwrap_or_clone(writes);
            let took = started.elapsed();
            match &result {
                Ok(_) => {
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
            match result {
                Ok(fenced) => {
                    let verdicts = self.sort_fenced(&writes, &acts, fenced);
                    self.records_stored(&writes, &acts, &verdicts);
                    Ok(verdicts)
                }
                Err(source) => {
                    let failure = Unavailable::Store {
                        what: "the state store failed".into(),
                        source,
                        remedy: "the change is kept in memory and retried, but was not \
                                 confirmed durable",
                    };
                    Err((failure, writes))
                }
            }
        };
        self.failing.store(result.is_err(), Ordering::Relaxed);
        match result {
            Ok(fenced) => {
                let mut refused = not_owned;
                let mut retried = Vec::new();
                for (i, verdict) in fenced {
                    match verdict {
                        fenced::Verdict::Retry(write) => {
                            self.restore(&acts[i], write);
                            retried.push(acts[i].clone());
                        }
                        fenced::Verdict::Refused => refused.push(acts[i].clone()),
                    }
                }
                self.refuse(&refused);
                self.answer_held(held, &refused, &retried);
                Ok(refused.len())
            }
            Err((failure, writes)) => {
                self.give_back(&acts, writes, &not_owned);
                // A durable caller must not wait for the store to come back:
                // tell it now. The write may or may not have happened; the
                // state stays dirty and is retried.
                *self.last_failure.lock() = Some(failure.clone());
                for (_, reply, _) in held {
                    reply.send(Err(failure.clone().into()));
                }
                Err(failure.into())
            }
        }
    }

    /// Tells memory which call records the store holds now, so that it
    /// may let them go (`idempotency::table`): all but a refused write's.
    /// Memory keeps their keys, within its bound (`idempotency::budget`).
    fn records_stored(
        &self,
        writes: &[ActorWrite],
        acts: &[Arc<Activation>],
        verdicts: &[(usize, fenced::Verdict)],
    ) {
        for (i, (write, act)) in writes.iter().zip(acts).enumerate() {
            if write.records.is_empty() || verdicts.iter().any(|(refused, _)| *refused == i) {
                continue;
            }
            self.records
                .stored(&act.id, write.records.iter().map(|r| r.key.as_str()));
        }
        self.shed_records();
    }

    /// Keeps the memory of stored keys within its bound.
    pub(crate) fn shed_records(&self) {
        let shed = self.records.shed_over_budget();
        if shed > 0 {
            debug!(
                actors = shed,
                held_bytes = self.records.held_bytes(),
                "live actors gave back memory of their stored keys to stay within --idempotency-memory-bytes"
            );
        }
    }

    /// Puts back a batch that was not written: its keys dirty again, so
    /// that the next flush writes them (with whatever value is current by
    /// then: never an older one), and the actors no longer owned refused.
    fn give_back(
        &self,
        acts: &[Arc<Activation>],
        writes: Vec<ActorWrite>,
        not_owned: &[Arc<Activation>],
    ) {
        for (act, write) in acts.iter().zip(writes) {
            self.restore(act, write);
        }
        self.refuse(not_owned);
    }

    /// Marks `write`'s keys dirty again, to be written with whatever value
    /// is current at the next flush (never an older one). Not for an
    /// activation that is gone: its state may be stale.
    fn restore(&self, act: &Arc<Activation>, write: ActorWrite) {
        let mut inner = act.inner.lock();
        if inner.status == Status::Gone {
            return;
        }
        // Counted again: the backlog a status shows must not read 0 while
        // a failing store holds these bytes in memory.
        let bytes = write_bytes(&write);
        let dirty = inner.dirty.get_or_insert_with(Default::default);
        dirty.keys.extend(write.changes.into_iter().map(|(k, _)| k));
        crate::inbox::ops::restore_ops(&mut dirty.inbox, write.inbox);
        // A key recorded twice keeps its first answer in every store. The
        // failed flush may have stored some of these records, so the next
        // one looks for each, whatever its caller said of the key.
        let looked_for = write.records.into_iter().map(|r| CallRecord {
            new_key: false,
            ..r
        });
        dirty.records.splice(0..0, looked_for);
        self.mark_dirty(act, &mut inner, bytes);
    }
}

/// Key and value bytes a write carries, for the flush threshold and logs.
fn write_bytes(w: &ActorWrite) -> usize {
    w.changes
        .iter()
        .map(|(k, v)| k.len() + v.as_ref().map_or(0, |v| v.len()))
        .sum()
}
