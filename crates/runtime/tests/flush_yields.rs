//! A write-behind flush of many actors shares its worker: it yields while
//! it takes their changes, and a flush dropped part-way loses none of them.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use troupe_placement::SingleNode;
use troupe_runtime::{
    ActorId, Call, CallError, FnHost, Payload, Runtime, RuntimeConfig, StateChange, TurnOutcome,
    TypeSpec,
};
use troupe_storage::{MemoryReminders, StateStore};

mod common;
use common::HookedStore;

const ACTORS: usize = 2_000;

/// A runtime whose store counts the batches it is handed, with `ACTORS`
/// actors each holding one unwritten key.
async fn dirty_runtime() -> Result<(Runtime, Arc<HookedStore>, Arc<AtomicU64>), CallError> {
    let writes = Arc::new(AtomicU64::new(0));
    let counted = writes.clone();
    let store = Arc::new(HookedStore::new(Box::new(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(()) })
    })));
    let config = RuntimeConfig {
        flush_interval: Duration::from_secs(3600),
        ..RuntimeConfig::default()
    };
    let rt = Runtime::create(
        config,
        store.clone(),
        Arc::new(MemoryReminders::new()),
        Arc::new(SingleNode),
    )
    .map_err(|e| CallError::Internal(e.to_string()))?;
    rt.start();
    let host = FnHost::new("test", |_: &ActorId, _| TurnOutcome {
        result: Ok(Payload::json("null")),
        changes: vec![StateChange::set("n", "1")],
    });
    rt.register_host(
        Arc::new(host),
        vec![TypeSpec {
            name: "t".into(),
            ..TypeSpec::default()
        }],
    )?;
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
