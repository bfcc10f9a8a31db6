//! Purging an actor: everything stored for it goes, and calls that arrive
//! while the store removes it wait, then find it empty — none sees, or
//! writes back, what the actor held before.

use std::sync::Arc;
use std::time::Duration;

use troupe_runtime::{ActorId, Call, CallError, Payload, Purged, Runtime, RuntimeConfig};
use troupe_storage::StateStore;

mod common;
use common::{marking_counter, one_shot_reminder, runtime_hosting_t, HookedStore, PurgePause};

fn write_behind() -> RuntimeConfig {
    RuntimeConfig {
        flush_interval: Duration::from_secs(3600),
        ..RuntimeConfig::default()
    }
}

/// A store whose purges stop at `pause`.
fn pausing_store() -> (PurgePause, Arc<HookedStore>) {
    let pause = PurgePause::default();
    let store = Arc::new(
        HookedStore::new(Box::new(|_| Box::pin(async { Ok(()) }))).pausing_purges(pause.clone()),
    );
    (pause, store)
}

fn spawn_purge(
    rt: &Runtime,
    actor: &ActorId,
) -> tokio::task::JoinHandle<Result<Purged, CallError>> {
    let (rt, actor) = (rt.clone(), actor.clone());
    tokio::spawn(async move { rt.purge_actor(&actor).await })
}

#[tokio::test]
async fn a_call_during_a_purge_waits_and_finds_the_actor_empty() -> Result<(), CallError> {
    let (pause, store) = pausing_store();
    let rt = runtime_hosting_t(write_behind(), store.clone(), marking_counter)?;
    let a = ActorId::new("t", "a");
    for _ in 0..3 {
        rt.invoke(Call::new(a.clone(), "mark", Payload::default()))
            .await?;
    }
    let in_an_hour = troupe_runtime::clock::unix_now_ms() + 3_600_000;
    rt.set_reminder(one_shot_reminder(a.clone(), "tick", in_an_hour))
        .await?;

    let purging = spawn_purge(&rt, &a);
    // The purge holds the store's writes and its activation off here.
    pause.reached.notified().await;
    let during = common::spawn_call(&rt, &a, "incr");
    // The call waits in the actor's mailbox until the purge ends.
    common::until_waiting(&rt, &a, 1).await?;
    pause.release.notify_one();
    let purged = purging
        .await
        .map_err(|e| CallError::Internal(e.to_string()))??;
    assert!(purged.was_active);
    // Flushed by the purge's deactivation, then removed.
    assert_eq!(purged.stored.state_keys, 2);
    assert_eq!(purged.reminders, 1);

    // Without the gate, this call activated the actor on the state the
    // store still held (3) while it was being purged.
    let answer = during
        .await
        .map_err(|e| CallError::Internal(e.to_string()))??;
    assert_eq!(answer, Payload::json("1"));
    let (state, active) = rt.get_state(&a, &[]).await?;
    assert!(active);
    assert_eq!(state.len(), 1, "only the new count: {state:?}");
    assert!(rt
        .list_reminders(Some("t"), Some("a"), None, 10)
        .await?
        .is_empty());
    rt.flush().await?;
    let stored = store
        .inner
        .load("t", "a")
        .await
        .map_err(|e| CallError::Internal(e.to_string()))?;
    assert_eq!(stored.len(), 1, "{stored:?}");
    Ok(())
}

#[tokio::test]
async fn purging_an_unknown_actor_removes_nothing_and_a_second_purge_waits_its_turn(
) -> Result<(), CallError> {
    let (pause, store) = pausing_store();
    let rt = runtime_hosting_t(write_behind(), store, marking_counter)?;
    let b = ActorId::new("t", "b");
    let first = spawn_purge(&rt, &b);
    pause.reached.notified().await;
    // One purge of an actor at a time: the second is refused, not queued.
    assert!(matches!(
        rt.purge_actor(&b).await,
        Err(CallError::FailedPrecondition(_))
    ));
    pause.release.notify_one();
    let purged = first
        .await
        .map_err(|e| CallError::Internal(e.to_string()))??;
    assert!(!purged.was_active);
    assert!(purged.stored.is_empty());
    assert_eq!(purged.reminders, 0);
    Ok(())
}

#[tokio::test]
async fn a_reminder_firing_that_queued_behind_a_purge_is_dropped_with_its_schedule(
) -> Result<(), CallError> {
    let (pause, store) = pausing_store();
    let rt = runtime_hosting_t(write_behind(), store, marking_counter)?;
    let a = ActorId::new("t", "a");
    rt.invoke(Call::new(a.clone(), "mark", Payload::default()))
        .await?;
    let purging = spawn_purge(&rt, &a);
    pause.reached.notified().await;
    // Due now: its firing reaches the mailbox and waits behind the gate.
    let now = troupe_runtime::clock::unix_now_ms();
    rt.set_reminder(one_shot_reminder(a.clone(), "late", now))
        .await?;
    common::until_waiting(&rt, &a, 1).await?;
    pause.release.notify_one();
    let purged = purging
        .await
        .map_err(|e| CallError::Internal(e.to_string()))??;
    assert_eq!(purged.reminders, 1);

    // Without the sweep, the firing ran first on the emptied actor (count
    // 1), and this call answered 2.
    let answer = rt
        .invoke(Call::new(a.clone(), "incr", Payload::default()))
        .await?;
    assert_eq!(answer, Payload::json("1"));
    assert_eq!(rt.reminders_fired(), 0);
    Ok(())
}

#[tokio::test]
async fn other_actors_flush_while_the_store_removes_a_purged_one() -> Result<(), CallError> {
    let (pause, store) = pausing_store();
    let rt = runtime_hosting_t(write_behind(), store.clone(), marking_counter)?;
    let (a, b) = (ActorId::new("t", "a"), ActorId::new("t", "b"));
    rt.invoke(Call::new(a.clone(), "mark", Payload::default()))
        .await?;
    let purging = spawn_purge(&rt, &a);
    pause.reached.notified().await;
    rt.invoke(Call::new(b.clone(), "mark", Payload::default()))
        .await?;
    // Before, the purge held every store write until it ended: this flush
    // waited for the release below, which never came first.
    tokio::time::timeout(Duration::from_secs(10), rt.flush())
        .await
        .map_err(|_| CallError::Internal("b's flush waited for a's purge".into()))??;
    let stored = store
        .inner
        .load("t", "b")
        .await
        .map_err(|e| CallError::Internal(e.to_string()))?;
    assert_eq!(stored.len(), 2, "{stored:?}");
    pause.release.notify_one();
    let purged = purging
        .await
        .map_err(|e| CallError::Internal(e.to_string()))??;
    assert_eq!(purged.stored.state_keys, 2);
    Ok(())
}
