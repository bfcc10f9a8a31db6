//! Owner epochs end to end inside one runtime: a write the store refuses
//! because a newer owner claimed the actor drops the activation and fails
//! its durable caller, and a refusal caused by this daemon's own newer
//! epoch is written again instead.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use troupe_placement::{Owner, OwnerEpoch, Placement};
use troupe_runtime::{
    ActorId, Call, CallError, FnHost, Payload, Runtime, RuntimeConfig, StateChange, StateMode,
    TurnOutcome, TurnRequest, TypeSpec, Unavailable,
};
use troupe_storage::{MemoryStore, StateStore};

mod common;
use common::HookedStore;

/// Owns every actor under a table version the test moves.
#[derive(Debug)]
struct Table(AtomicU64);

impl Placement for Table {
    fn owner(&self, _actor_type: &str, _actor_id: &str) -> Owner {
        Owner::Local
    }

    fn table_version(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    fn epoch(&self, _actor_type: &str, _actor_id: &str) -> OwnerEpoch {
        OwnerEpoch::Owned(self.0.load(Ordering::SeqCst))
    }
}

fn counter(_actor: &ActorId, req: TurnRequest) -> TurnOutcome {
    let count: u64 = req
        .state
        .get("count")
        .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
        .unwrap_or(0);
    TurnOutcome {
        result: Ok(Payload::json((count + 1).to_string())),
        changes: vec![StateChange::set("count", (count + 1).to_string())],
    }
}

fn runtime(store: Arc<dyn StateStore>, table: Arc<Table>) -> Result<Runtime, CallError> {
    let reminders = Arc::new(MemoryStore::new().reminders());
    let rt = Runtime::create(RuntimeConfig::default(), store, reminders, table)
        .map_err(|e| CallError::Internal(e.to_string()))?;
    rt.start();
    rt.register_host(
        Arc::new(FnHost::new("test", counter)),
        vec![TypeSpec {
            name: "counter".into(),
            state_mode: Some(StateMode::Durable),
            ..TypeSpec::default()
        }],
    )?;
    Ok(rt)
}

fn incr() -> Call {
    Call::new(ActorId::new("counter", "c"), "incr", Payload::default())
}

fn is_fenced(result: &Result<Payload, CallError>) -> bool {
    matches!(
        result,
        Err(CallError::Unavailable(Unavailable::Fenced { .. }))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_refused_for_a_newer_owner_drops_the_activation_and_fails_the_caller(
) -> Result<(), CallError> {
    let store = Arc::new(MemoryStore::new());
    let table = Arc::new(Table(AtomicU64::new(1)));
    let rt = runtime(store.clone(), table.clone())?;
    rt.invoke(incr()).await?;

    // Another daemon takes the actor over under table 2 (this one was
    // paused and missed it): its claim reads count 1.
    let taken = store
        .claim("counter", "c", 2)
        .await
        .map_err(|e| CallError::Internal(e.to_string()))?;
    assert_eq!(taken, vec![("count".to_string(), Bytes::from("1"))]);

    // This daemon's next durable write is refused, and its caller told.
    let refused = rt.invoke(incr()).await;
    assert!(is_fenced(&refused), "{refused:?}");
    let stored = store
        .load("counter", "c")
        .await
        .map_err(|e| CallError::Internal(e.to_string()))?;
    assert_eq!(stored, vec![("count".to_string(), Bytes::from("1"))]);

    // Its activation is gone: the next call activates anew, and the claim
    // under the old table is refused too.
    let again = rt.invoke(incr()).await;
    assert!(is_fenced(&again), "{again:?}");

    // Under a newer table than the other owner's it is this daemon's again,
    // with the stored state.
    table.0.store(3, Ordering::SeqCst);
    let count = rt.invoke(incr()).await?;
    assert_eq!(count.data, Bytes::from("2"));
    Ok(())
}

/// The refused activation is out before its caller hears of the refusal:
/// a call made at once, under a table that gives the actor back to this
/// daemon, activates anew from the stored state instead of landing in the
/// stale activation (which would write its own count under the new epoch).
/// Many rounds: when the drop was a task of its own, the caller won the
/// race to the directory within a few hundred.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_right_after_a_refusal_never_reaches_the_refused_activation() -> Result<(), CallError>
{
    for round in 0..500 {
        let store = Arc::new(MemoryStore::new());
        let table = Arc::new(Table(AtomicU64::new(1)));
        let rt = runtime(store.clone(), table.clone())?;
        rt.invoke(incr()).await?;
        rt.invoke(incr()).await?;
        store
            .claim("counter", "c", 2)
            .await
            .map_err(|e| CallError::Internal(e.to_string()))?;
        let refused = rt.invoke(incr()).await;
        assert!(is_fenced(&refused), "round {round}: {refused:?}");
        table.0.store(3, Ordering::SeqCst);
        // Stored: 2. The stale activation would answer 4.
        let count = rt.invoke(incr()).await?;
        assert_eq!(count.data, Bytes::from("3"), "round {round}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_by_this_daemons_own_newer_epoch_is_written_again() -> Result<(), CallError> {
    let table = Arc::new(Table(AtomicU64::new(1)));
    // Just before the first batch lands, this daemon moves on to table 2
    // and its own write under it (a reminder's) raises the actor's epoch.
    let raised = Arc::new(AtomicBool::new(false));
    let newer = table.clone();
    let store = Arc::new(HookedStore::new(Box::new(move |inner| {
        let first = !raised.swap(true, Ordering::SeqCst);
        let newer = newer.clone();
        Box::pin(async move {
            if first {
                newer.0.store(2, Ordering::SeqCst);
                inner.claim("counter", "c", 2).await?;
            }
            Ok(())
        })
    })));
    let rt = runtime(store.clone(), table)?;
    // The batch goes out under epoch 1 and is refused for epoch 2, which
    // this daemon holds: the caller still gets its answer once written.
    let count = rt.invoke(incr()).await?;
    assert_eq!(count.data, Bytes::from("1"));
    let stored = store
        .load("counter", "c")
        .await
        .map_err(|e| CallError::Internal(e.to_string()))?;
    assert_eq!(stored, vec![("count".to_string(), Bytes::from("1"))]);
    assert_eq!(rt.invoke(incr()).await?.data, Bytes::from("2"));
    Ok(())
}
