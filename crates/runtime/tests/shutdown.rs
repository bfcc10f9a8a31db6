//! A shutdown whose store hangs or fails still ends, and says what it could
//! not write.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use troupe_runtime::{
    ActorId, Call, CallError, Payload, RuntimeConfig, ShutdownReport, StateChange, TurnOutcome,
    UnwrittenState,
};
use troupe_storage::StoreError;

mod common;
use common::{runtime_hosting_t, HookedStore};

/// How the store answers writes once the test flips it.
#[derive(Debug, Clone, Copy)]
enum Breakage {
    /// Never answers, as a frozen database server or a dead connection do.
    Hang,
    /// Answers with an error at once, as a server that refuses connections does.
    Fail,
}

/// Sets `count` and `other` on every call.
fn two_keys(_actor: &ActorId, _req: troupe_runtime::TurnRequest) -> TurnOutcome {
    TurnOutcome {
        result: Ok(Payload::json("null")),
        changes: vec![
            StateChange::set("count", "1"),
            StateChange::set("other", "2"),
        ],
    }
}

/// Dirties three actors, breaks the store and shuts down with a short grace period and
/// flush timeout. Returns the report; fails if the shutdown does not end.
async fn shut_down_with_broken_store(how: Breakage) -> Result<ShutdownReport, CallError> {
    let broken = Arc::new(AtomicBool::new(false));
    let flag = broken.clone();
    let store = Arc::new(HookedStore::new(Box::new(move |_| {
        let broken = flag.load(Ordering::SeqCst);
        Box::pin(async move {
            match (broken, how) {
                (false, _) => Ok(()),
                (true, Breakage::Hang) => std::future::pending().await,
                (true, Breakage::Fail) => Err(StoreError::Io("the test broke the store".into())),
            }
        })
    })));
    let config = RuntimeConfig {
        flush_interval: Duration::from_secs(3600),
        shutdown_grace: Duration::from_millis(200),
        shutdown_flush_timeout: Duration::from_millis(300),
        ..RuntimeConfig::default()
    };
    let rt = runtime_hosting_t(config, store.clone(), two_keys)?;
    for id in ["a", "b", "c"] {
        rt.invoke(Call::new(ActorId::new("t", id), "set", Payload::default()))
            .await?;
    }
    broken.store(true, Ordering::SeqCst);
    // Without the bound a hanging store holds the shutdown forever; this
    // limit only turns that hang into a failure.
    tokio::time::timeout(Duration::from_secs(30), rt.shutdown())
        .await
        .map_err(|_| CallError::Internal("the shutdown did not end".into()))
}

fn expected() -> Vec<UnwrittenState> {
    ["a", "b", "c"]
        .into_iter()
        .map(|id| UnwrittenState {
            actor_type: "t".into(),
            actor_id: id.into(),
            keys: vec!["count".into(), "other".into()],
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_hangs_cannot_hold_the_shutdown_and_the_report_names_every_key(
) -> Result<(), CallError> {
    let report = shut_down_with_broken_store(Breakage::Hang).await?;
    assert!(!report.is_complete());
    // A deactivation's write was in flight when the shutdown gave up on it:
    // its actor is reported along with those still dirty.
    assert_eq!(report.unwritten_state, expected());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_fails_ends_the_shutdown_with_what_was_not_written() -> Result<(), CallError> {
    let report = shut_down_with_broken_store(Breakage::Fail).await?;
    assert!(!report.is_complete());
    assert_eq!(report.unwritten_state, expected());
    assert!(
        !report.abandoned_tasks,
        "nothing hung, yet a task was abandoned"
    );
    Ok(())
}
