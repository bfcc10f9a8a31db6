//! A type's retention, on the test clock: an actor nothing reached for it
//! is erased (state and reminders); one active at its due time, one whose
//! daemon stopped without writing its end, and one whose `$retain` an
//! operator paused are kept.

mod common;

use std::sync::Arc;
use std::time::Duration;

use troupe_runtime::{
    ActorId, Call, CallError, FnHost, Payload, Runtime, RuntimeConfig, StateChange, TurnOutcome,
    TypeSpec, RETAIN_NAME,
};
use troupe_storage::{MemoryReminders, MemoryStore, ReminderStore, StateStore};

const HOUR: Duration = Duration::from_secs(3_600);
const MINUTE: Duration = Duration::from_secs(60);

/// A started runtime on its test clock over `store` and `reminders`,
/// hosting "cart" (retention an hour), whose every turn sets `items`.
fn runtime(
    store: Arc<dyn StateStore>,
    reminders: Arc<dyn ReminderStore>,
) -> Result<Runtime, CallError> {
    let rt = common::on_test_clock_over(store, reminders)?;
    let host = FnHost::new("cart-app", |_actor: &ActorId, _req| TurnOutcome {
        result: Ok(Payload::json("null")),
        changes: vec![StateChange::set("items", "[\"tea\"]")],
    });
    rt.register_host(
        Arc::new(host),
        vec![TypeSpec {
            name: "cart".into(),
            retention: Some(HOUR),
            ..TypeSpec::default()
        }],
    )?;
    Ok(rt)
}

fn fresh() -> Result<Runtime, CallError> {
    runtime(
        Arc::new(MemoryStore::new()),
        Arc::new(MemoryReminders::new()),
    )
}

fn cart(id: &str) -> ActorId {
    ActorId::new("cart", id)
}

async fn add(rt: &Runtime, id: &str) -> Result<(), CallError> {
    rt.invoke(Call::new(cart(id), "add", Payload::json("null")))
        .await
        .map(drop)
}

async fn state_keys(rt: &Runtime, id: &str) -> Result<usize, CallError> {
    Ok(rt.get_state(&cart(id), &[]).await?.0.len())
}

/// Waits (bounded) until the actor's `$retain` says `seen`; returns its due.
async fn mark(rt: &Runtime, id: &str, seen: &str) -> Result<u64, CallError> {
    let wanted = format!("\"seen\":\"{seen}\"");
    for _ in 0..500 {
        if let Some(info) = rt.get_reminder(&cart(id), RETAIN_NAME).await? {
            if String::from_utf8_lossy(&info.payload.data).contains(&wanted) {
                return Ok(info.next_due_unix_ms);
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(CallError::Internal(format!(
        "cart/{id}'s {RETAIN_NAME} never said {seen}"
    )))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_nothing_reached_for_its_retention_is_erased() -> Result<(), CallError> {
    let rt = fresh()?;
    add(&rt, "c1").await?;
    mark(&rt, "c1", "active").await?;
    let before_end = rt.schedule_now_ms();
    assert!(rt.deactivate_actor(&cart("c1")).await?);
    let due = mark(&rt, "c1", "idle").await?;
    assert!(
        due >= before_end + 3_600_000,
        "due {due}, ended after {before_end}"
    );

    rt.advance_clock(HOUR - MINUTE).await?;
    assert_eq!(state_keys(&rt, "c1").await?, 1, "erased before its time");

    rt.advance_clock(2 * MINUTE).await?;
    assert_eq!(state_keys(&rt, "c1").await?, 0, "kept past its retention");
    let left = rt
        .list_reminders(Some("cart"), Some("c1"), None, 10)
        .await?;
    assert!(left.is_empty(), "{left:?}");

    // Used again, it starts over.
    add(&rt, "c1").await?;
    mark(&rt, "c1", "active").await?;
    assert_eq!(state_keys(&rt, "c1").await?, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_active_at_its_due_time_is_kept() -> Result<(), CallError> {
    let rt = fresh()?;
    add(&rt, "c1").await?;
    let first = mark(&rt, "c1", "active").await?;
    // Still active (its idle timeout runs on the system clock).
    rt.advance_clock(HOUR + MINUTE).await?;
    assert_eq!(state_keys(&rt, "c1").await?, 1);
    let Some(again) = rt.get_reminder(&cart("c1"), RETAIN_NAME).await? else {
        return Err(CallError::Internal("the mark is gone".into()));
    };
    assert!(again.next_due_unix_ms > first, "not moved on: {again:?}");
    Ok(())
}

/// A daemon that stops without writing the end of an activation (a crash)
/// leaves the mark `active`: the next owner keeps the actor a retention
/// more, then erases it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_crash_the_actor_is_kept_a_retention_more() -> Result<(), CallError> {
    let store = Arc::new(MemoryStore::new());
    let reminders = Arc::new(MemoryReminders::new());
    let crashed = runtime(store.clone(), reminders.clone())?;
    add(&crashed, "c1").await?;
    mark(&crashed, "c1", "active").await?;
    // Its state reaches the store; its activation is never ended.
    crashed.flush().await?;

    let next = runtime(store, reminders)?;
    next.advance_clock(HOUR + MINUTE).await?;
    assert_eq!(state_keys(&next, "c1").await?, 1, "erased after the crash");
    mark(&next, "c1", "idle").await?;
    next.advance_clock(HOUR + MINUTE).await?;
    assert_eq!(state_keys(&next, "c1").await?, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_retention_keeps_the_actor() -> Result<(), CallError> {
    let rt = fresh()?;
    add(&rt, "c1").await?;
    assert!(rt.deactivate_actor(&cart("c1")).await?);
    mark(&rt, "c1", "idle").await?;
    let paused = rt.pause_reminder(&cart("c1"), RETAIN_NAME).await?;
    assert!(paused.is_some_and(|p| p.paused));
    rt.advance_clock(3 * HOUR).await?;
    assert_eq!(state_keys(&rt, "c1").await?, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retention_under_a_minute_is_refused() -> Result<(), CallError> {
    let rt = common::single_node(RuntimeConfig::default(), Arc::new(MemoryStore::new()))?;
    let host = FnHost::new("cart-app", |_actor: &ActorId, _req| TurnOutcome {
        result: Ok(Payload::json("null")),
        changes: Vec::new(),
    });
    let refused = rt.register_host(
        Arc::new(host),
        vec![TypeSpec {
            name: "cart".into(),
            retention: Some(Duration::from_secs(30)),
            ..TypeSpec::default()
        }],
    );
    match refused {
        Err(CallError::InvalidArgument(_)) => Ok(()),
        other => Err(CallError::Internal(format!(
            "expected INVALID_ARGUMENT, got {other:?}"
        ))),
    }
}
