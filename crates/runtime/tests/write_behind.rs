//! Write-behind flushes: one of many actors shares its worker (it yields
//! while it takes their changes), one dropped part-way loses none of them,
//! and what a failed one could not write stays counted in the backlog and is
//! written again as if never written.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use troupe_runtime::{
    ActorId, Call, CallError, CallExtra, Payload, Runtime, RuntimeConfig, StateChange, TurnOutcome,
};
use troupe_storage::{StateStore, StoreError};

mod common;
use common::{runtime_hosting_t, HookedStore};

const ACTORS: usize = 2_000;

/// A runtime with `ACTORS` actors each holding one unwritten key, whose
/// store counts the batches it is handed and fails them while `failing`.
async fn dirty_runtime_failing_with(
    failing: Arc<AtomicBool>,
) -> Result<(Runtime, Arc<HookedStore>, Arc<AtomicU64>), CallError> {
    let writes = Arc::new(AtomicU64::new(0));
    let counted = writes.clone();
    let store = Arc::new(HookedStore::new(Box::new(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
        let failing = failing.load(Ordering::SeqCst);
        Box::pin(async move {
            if failing {
                return Err(StoreError::Io("the test broke the store".into()));
            }
            Ok(())
        })
    })));
    let config = RuntimeConfig {
        flush_interval: Duration::from_secs(3600),
        ..RuntimeConfig::default()
    };
    let rt = runtime_hosting_t(config, store.clone(), |_: &ActorId, _| TurnOutcome {
        result: Ok(Payload::json("null")),
        changes: vec![StateChange::set("n", "1")],
    })?;
    for i in 0..ACTORS {
        rt.invoke(Call::new(
            ActorId::new("t", format!("a{i}")),
            "set",
            Payload::default(),
        ))
        .await?;
    }
    Ok((rt, store, writes))
}

async fn dirty_runtime() -> Result<(Runtime, Arc<HookedStore>, Arc<AtomicU64>), CallError> {
    dirty_runtime_failing_with(Arc::new(AtomicBool::new(false))).await
}

/// Polls `future` once.
async fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(std::pin::Pin::new(&mut *future).poll(cx))).await
}

async fn stored_actors(store: &HookedStore) -> Result<usize, CallError> {
    let mut stored = 0;
    for i in 0..ACTORS {
        let state = store
            .inner
            .load("t", &format!("a{i}"))
            .await
            .map_err(|e| CallError::Internal(e.to_string()))?;
        stored += usize::from(!state.is_empty());
    }
    Ok(stored)
}

/// Taking 60,000 actors' changes held a worker 40-75 ms once a flush
/// interval, and every turn queued behind it waited as long.
#[tokio::test]
async fn a_flush_of_many_actors_yields_before_it_writes() -> Result<(), CallError> {
    let (rt, store, writes) = dirty_runtime().await?;
    let mut flush = Box::pin(rt.flush());
    assert!(poll_once(&mut flush).await.is_pending());
    assert_eq!(
        writes.load(Ordering::SeqCst),
        0,
        "the flush took every actor in one poll"
    );
    flush.await?;
    assert_eq!(writes.load(Ordering::SeqCst), 1);
    assert_eq!(stored_actors(&store).await?, ACTORS);
    Ok(())
}

/// A flush dropped while it takes changes (a shutdown's timeout, an admin
/// call whose caller left) puts them back for the next one.
#[tokio::test]
async fn a_flush_dropped_while_taking_leaves_every_change_for_the_next() -> Result<(), CallError> {
    let (rt, store, writes) = dirty_runtime().await?;
    let mut flush = Box::pin(rt.flush());
    assert!(poll_once(&mut flush).await.is_pending());
    drop(flush);
    assert_eq!(writes.load(Ordering::SeqCst), 0);
    // A turn on an actor the dropped flush had taken, and on one it had not.
    for id in ["a0", "a1999"] {
        rt.invoke(Call::new(ActorId::new("t", id), "set", Payload::default()))
            .await?;
    }
    rt.flush().await?;
    assert_eq!(stored_actors(&store).await?, ACTORS);
    rt.flush().await?;
    assert_eq!(
        writes.load(Ordering::SeqCst),
        1,
        "a change was left dirty after the flush"
    );
    Ok(())
}

/// After a failed write the backlog read 0 dirty bytes beside thousands of
/// dirty actors, in `troupe status` and the metrics, just when a store is
/// down and memory holds what it could not take.
#[tokio::test]
async fn a_failed_flushs_call_records_are_looked_for_when_written_again() -> Result<(), CallError> {
    let failing = Arc::new(AtomicBool::new(false));
    let (rt, store, _) = dirty_runtime_failing_with(failing.clone()).await?;
    // An SDK's first attempt: a key it made, marked new.
    let mut call = Call::new(ActorId::new("t", "keyed"), "set", Payload::default());
    call.extra = Some(Box::new(CallExtra {
        idempotency_key: Some("fresh".into()),
        new_key: true,
        ..CallExtra::default()
    }));
    rt.invoke(call).await?;
    failing.store(true, Ordering::SeqCst);
    assert!(rt.flush().await.is_err());
    failing.store(false, Ordering::SeqCst);
    rt.flush().await?;
    // The failed batch may have stored the record before it failed: the
    // store that writes it again must look for it, so a store that applied
    // part of a batch keeps one record and one index entry of it.
    assert_eq!(
        *store.records_sent.lock(),
        [("fresh".to_owned(), true), ("fresh".to_owned(), false)]
    );
    Ok(())
}

#[tokio::test]
async fn a_failed_flush_keeps_its_bytes_in_the_backlog() -> Result<(), CallError> {
    let failing = Arc::new(AtomicBool::new(false));
    let (rt, store, _) = dirty_runtime_failing_with(failing.clone()).await?;
    let before = rt.status().flush;
    // "n" = "1" on each actor.
    assert_eq!(before.dirty_bytes, 2 * ACTORS);
    failing.store(true, Ordering::SeqCst);
    assert!(rt.flush().await.is_err());
    let after = rt.status().flush;
    assert!(after.failing);
    assert_eq!(after.dirty_actors, ACTORS);
    assert_eq!(after.dirty_bytes, before.dirty_bytes);
    failing.store(false, Ordering::SeqCst);
    rt.flush().await?;
    assert_eq!(rt.status().flush.dirty_bytes, 0);
    assert_eq!(stored_actors(&store).await?, ACTORS);
    Ok(())
}
