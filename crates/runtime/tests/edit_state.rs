//! Editing an actor's state: the edit lands whole in the store, the
//! activation that held the old state ends first, and calls that arrive
//! meanwhile wait, then see the edited state — none sees a mix, and none
//! writes the old state back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use troupe_runtime::{
    ActorId, Call, CallError, EditedState, Payload, Runtime, RuntimeConfig, StateChange,
};
use troupe_storage::StateStore;

mod common;
use common::{marking_counter, runtime_hosting_t, HookedStore, PurgePause};

/// A runtime hosting `marking_counter` on a store whose next state read, once
/// armed, waits at the pause (the edit's read of what it replaces).
fn runtime() -> Result<(Runtime, Arc<HookedStore>, PurgePause, Arc<AtomicBool>), CallError> {
    let pause = PurgePause::default();
    let armed = Arc::new(AtomicBool::new(false));
    let mut store = HookedStore::new(Box::new(|_| Box::pin(async { Ok(()) })));
    store.load_pause = Some((pause.clone(), armed.clone()));
    let store = Arc::new(store);
    let config = RuntimeConfig {
        flush_interval: Duration::from_secs(3600),
        ..RuntimeConfig::default()
    };
    let rt = runtime_hosting_t(config, store.clone(), marking_counter)?;
    Ok((rt, store, pause, armed))
}

fn spawn_edit(
    rt: &Runtime,
    actor: &ActorId,
    changes: Vec<StateChange>,
) -> tokio::task::JoinHandle<Result<EditedState, CallError>> {
    let (rt, actor) = (rt.clone(), actor.clone());
    tokio::spawn(async move { rt.edit_actor_state(&actor, &changes, &[]).await })
}

fn joined<T>(r: Result<Result<T, CallError>, tokio::task::JoinError>) -> Result<T, CallError> {
    r.map_err(|e| CallError::Internal(e.to_string()))?
}

#[tokio::test]
async fn a_call_during_an_edit_waits_and_sees_the_edited_state() -> Result<(), CallError> {
    let (rt, store, pause, armed) = runtime()?;
    let a = ActorId::new("t", "a");
    for _ in 0..3 {
        rt.invoke(Call::new(a.clone(), "mark", Payload::default()))
            .await?;
    }
    // Unflushed (write-behind for an hour): the edit must write them first
    // and replace them, not be overwritten by them later.
    armed.store(true, Ordering::SeqCst);
    let editing = spawn_edit(
        &rt,
        &a,
        vec![StateChange::set("n", "10"), StateChange::delete("marked")],
    );
    pause.reached.notified().await;
    let during = common::spawn_call(&rt, &a, "incr");
    // Without the hold, this call activated the actor on the old state.
    common::until_waiting(&rt, &a, 1).await?;
    pause.release.notify_one();
    let edited = joined(editing.await)?;
    assert!(edited.was_active);
    assert_eq!(
        edited.before,
        vec![
            StateChange::set("n", "3"),
            StateChange::set("marked", "yes")
        ]
    );

    assert_eq!(joined(during.await)?, Payload::json("11"));
    let (state, active) = rt.get_state(&a, &[]).await?;
    assert!(active);
    assert_eq!(state.len(), 1, "only the count: {state:?}");
    rt.flush().await?;
    let stored = store
        .inner
        .load("t", "a")
        .await
        .map_err(|e| CallError::Internal(e.to_string()))?;
    assert_eq!(stored, vec![("n".to_owned(), bytes::Bytes::from("11"))]);
    Ok(())
}

#[tokio::test]
async fn one_edit_of_an_actor_at_a_time_and_an_unknown_actor_had_nothing() -> Result<(), CallError>
{
    let (rt, _store, pause, armed) = runtime()?;
    let b = ActorId::new("t", "b");
    armed.store(true, Ordering::SeqCst);
    let first = spawn_edit(&rt, &b, vec![StateChange::set("n", "1")]);
    pause.reached.notified().await;
    // Refused, not queued: the second would edit what the first is about
    // to replace. A purge meanwhile is refused alike.
    assert!(matches!(
        rt.edit_actor_state(&b, &[StateChange::set("n", "2")], &[])
            .await,
        Err(CallError::FailedPrecondition(_))
    ));
    assert!(matches!(
        rt.purge_actor(&b).await,
        Err(CallError::FailedPrecondition(_))
    ));
    pause.release.notify_one();
    let edited = joined(first.await)?;
    assert!(!edited.was_active);
    assert_eq!(edited.before, vec![StateChange::delete("n")]);
    // The next call activates it on the edit.
    assert_eq!(
        rt.invoke(Call::new(b, "incr", Payload::default())).await?,
        Payload::json("2")
    );
    Ok(())
}

#[tokio::test]
async fn a_refused_edit_leaves_the_actor_active_and_its_state_alone() -> Result<(), CallError> {
    let (rt, _store, _pause, _armed) = runtime()?;
    let c = ActorId::new("t", "c");
    rt.invoke(Call::new(c.clone(), "mark", Payload::default()))
        .await?;
    for bad in [
        vec![],
        vec![StateChange::set("n", "5"), StateChange::set("n", "6")],
        vec![StateChange::set("", "5")],
        vec![StateChange::set("n", vec![b'1'; 5 << 20])],
    ] {
        assert!(
            matches!(
                rt.edit_actor_state(&c, &bad, &[]).await,
                Err(CallError::InvalidArgument(_))
            ),
            "accepted {} changes",
            bad.len()
        );
    }
    let (state, active) = rt.get_state(&c, &[]).await?;
    assert!(active, "a refused edit ended the activation");
    assert_eq!(state.len(), 2, "{state:?}");
    Ok(())
}

#[tokio::test]
async fn an_edit_applies_only_while_what_it_expects_holds() -> Result<(), CallError> {
    let (rt, _store, _pause, _armed) = runtime()?;
    let d = ActorId::new("t", "d");
    rt.invoke(Call::new(d.clone(), "mark", Payload::default()))
        .await?;
    let set_five = [StateChange::set("n", "5")];
    // The count moved on since it was read as 0; "marked" appeared.
    for stale in [
        vec![StateChange::set("n", "0")],
        vec![StateChange::delete("marked")],
        vec![StateChange::set("n", "1"), StateChange::set("gone", "x")],
    ] {
        assert!(
            matches!(
                rt.edit_actor_state(&d, &set_five, &stale).await,
                Err(CallError::Conflict(_))
            ),
            "{stale:?}"
        );
    }
    let (state, active) = rt.get_state(&d, &[]).await?;
    assert!(
        state.contains(&("n".to_owned(), bytes::Bytes::from("1"))) && state.len() == 2,
        "{state:?}"
    );
    // Refused against the activation's state: it was not ended for nothing.
    assert!(active, "a stale compare-and-set ended the activation");

    // What a read said, fed back as it came: the edit applies.
    let expect = [StateChange::set("n", "1"), StateChange::delete("gone")];
    let edited = rt.edit_actor_state(&d, &set_five, &expect).await?;
    assert_eq!(edited.before, vec![StateChange::set("n", "1")]);
    assert_eq!(
        rt.invoke(Call::new(d, "incr", Payload::default())).await?,
        Payload::json("6")
    );
    Ok(())
}
