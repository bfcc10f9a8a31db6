//! What the runtime's watchers hear. A `durable` type's watchers hear of a
//! turn only once its writes are stored, as its caller does, and in the
//! order the turns ended: a crash must not undo what a watcher was told
//! happened. A type watch of an id prefix hears those actors only, and its
//! poll waits on past the others' events instead of answering with none.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use troupe_placement::Owner;
use troupe_runtime::{
    ActivateDone, ActivateRequest, ActorHost, ActorId, ActorRequest, ActorResponse, Call,
    CallError, DeactivateDone, DeactivateRequest, Payload, RequestContext, Runtime, RuntimeConfig,
    StateChange, StateMode, TurnDone, TurnOutcome, TurnRequest, TypeSpec,
};
use troupe_runtime::{Cursor, Polled, TypeFrom, WatchedType};
use troupe_storage::StoreError;

mod common;
use common::{single_node, HookedStore};

/// `set` writes a key and publishes "set"; `read` writes nothing and
/// publishes "read".
#[derive(Debug)]
struct Publishing;

impl ActorHost for Publishing {
    fn name(&self) -> &str {
        "test"
    }

    fn activate(&self, _request: ActivateRequest, done: ActivateDone) {
        done.finish(Ok(Vec::new()));
    }

    fn turn(&self, request: TurnRequest, mut done: TurnDone) {
        let changes = match &*request.name {
            "set" => vec![StateChange::set("v", "1")],
            _ => Vec::new(),
        };
        done.publish(vec![Payload::json(format!("\"{}\"", request.name))]);
        done.finish(TurnOutcome {
            result: Ok(Payload::json("null")),
            changes,
        });
    }

    fn deactivate(&self, _request: DeactivateRequest, done: DeactivateDone) {
        done.finish(Vec::new());
    }
}

const PASS: u8 = 0;
const HOLD: u8 = 1;
const FAIL: u8 = 2;

/// How the store answers the next batches, and the hold's two sides.
#[derive(Clone, Default)]
struct Gate {
    mode: Arc<AtomicU8>,
    reached: Arc<Notify>,
    release: Arc<Notify>,
}

fn durable_runtime(gate: &Gate) -> Result<Runtime, CallError> {
    let hook = gate.clone();
    let store = Arc::new(HookedStore::new(Box::new(move |_| {
        let hook = hook.clone();
        Box::pin(async move {
            match hook.mode.load(Ordering::SeqCst) {
                HOLD => {
                    hook.reached.notify_one();
                    hook.release.notified().await;
                    Ok(())
                }
                FAIL => Err(StoreError::Io("the test broke the store".into())),
                _ => Ok(()),
            }
        })
    })));
    let rt = single_node(RuntimeConfig::default(), store)?;
    rt.register_host(
        Arc::new(Publishing),
        vec![TypeSpec {
            name: "d".into(),
            state_mode: Some(StateMode::Durable),
            ..TypeSpec::default()
        }],
    )?;
    Ok(rt)
}

/// What has been published after `after`, without waiting.
async fn events_now(rt: &Runtime, actor: &ActorId, after: Option<Cursor>) -> Polled {
    let answer = rt
        .request(
            ActorRequest::PollEvents {
                actor: actor.clone(),
                after,
                wait: Duration::ZERO,
            },
            RequestContext::default(),
        )
        .await;
    match answer {
        Ok(ActorResponse::Events(polled)) => *polled,
        other => panic!("a poll answered {other:?}"),
    }
}

fn texts(polled: &Polled) -> Vec<String> {
    polled
        .events
        .iter()
        .map(|e| String::from_utf8_lossy(&e.payload.data).into_owned())
        .collect()
}

fn call(actor: &ActorId, method: &str) -> Call {
    Call::new(actor.clone(), method, Payload::default())
}

#[tokio::test]
async fn watchers_hear_of_a_durable_turn_once_its_write_is_stored() -> Result<(), CallError> {
    let gate = Gate::default();
    let rt = Arc::new(durable_runtime(&gate)?);
    let actor = ActorId::new("d", "a1");
    let start = events_now(&rt, &actor, None).await.cursor;

    gate.mode.store(HOLD, Ordering::SeqCst);
    let reached = gate.reached.notified();
    let set = tokio::spawn({
        let (rt, actor) = (rt.clone(), actor.clone());
        async move { rt.invoke(call(&actor, "set")).await }
    });
    reached.await;
    // A later turn that writes nothing is answered at once, but its events
    // wait behind the unstored ones.
    rt.invoke(call(&actor, "read")).await?;
    let early = events_now(&rt, &actor, Some(start)).await;
    assert_eq!(
        texts(&early),
        Vec::<String>::new(),
        "a watcher heard of a durable turn before its write was stored"
    );

    gate.mode.store(PASS, Ordering::SeqCst);
    gate.release.notify_one();
    set.await
        .map_err(|e| CallError::Internal(e.to_string()))??;
    let stored = events_now(&rt, &actor, Some(start)).await;
    assert_eq!(texts(&stored), ["\"set\"", "\"read\""]);
    assert!(!stored.missed);
    Ok(())
}

#[tokio::test]
async fn a_durable_turn_whose_write_fails_publishes_nothing() -> Result<(), CallError> {
    let gate = Gate::default();
    let rt = durable_runtime(&gate)?;
    let actor = ActorId::new("d", "a2");
    let start = events_now(&rt, &actor, None).await.cursor;

    gate.mode.store(FAIL, Ordering::SeqCst);
    let failed = rt.invoke(call(&actor, "set")).await;
    assert!(
        matches!(failed, Err(CallError::Unavailable(_))),
        "{failed:?}"
    );
    gate.mode.store(PASS, Ordering::SeqCst);
    rt.invoke(call(&actor, "read")).await?;
    let polled = events_now(&rt, &actor, Some(start)).await;
    assert_eq!(texts(&polled), ["\"read\""]);
    assert!(!polled.missed, "a failed turn's events never happened");
    Ok(())
}

#[tokio::test]
async fn a_type_poll_of_an_id_prefix_waits_on_past_other_actors_events() -> Result<(), CallError> {
    let rt = durable_runtime(&Gate::default())?;
    let watched = WatchedType {
        ty: Arc::from("d"),
        id_prefix: Arc::from("mine-"),
    };
    let start = rt
        .poll_type_events(&Owner::Local, &watched, &TypeFrom::Now, Duration::ZERO)
        .await?
        .cursor;
    let after = TypeFrom::After(vec![start]);
    let poll = rt.poll_type_events(&Owner::Local, &watched, &after, Duration::from_secs(30));
    tokio::pin!(poll);
    // Polled once, it waits for the type's next event.
    assert!(futures::poll!(&mut poll).is_pending());
    rt.invoke(call(&ActorId::new("d", "other-1"), "set"))
        .await?;
    assert!(
        futures::poll!(&mut poll).is_pending(),
        "a poll woken by an event it does not want answered"
    );
    rt.invoke(call(&ActorId::new("d", "mine-1"), "read"))
        .await?;
    let polled = poll.await?;
    assert_eq!(texts(&polled), ["\"read\""]);
    assert_eq!(&*polled.events[0].actor.id, "mine-1");
    assert_eq!(polled.events[0].cursor.seq, start.seq + 2, "past other-1's");
    Ok(())
}

#[tokio::test]
async fn a_new_host_poll_says_events_may_be_missing_only_if_the_type_published_before(
) -> Result<(), CallError> {
    let watched = WatchedType::all("d");
    // A daemon whose actors of the type published nothing yet.
    let quiet = durable_runtime(&Gate::default())?;
    let first = poll_as_new_host(&quiet, &watched).await?;
    assert!(first.events.is_empty() && !first.missed, "{first:?}");
    quiet.invoke(call(&ActorId::new("d", "x"), "set")).await?;
    let after = TypeFrom::After(vec![first.cursor]);
    let next = quiet
        .poll_type_events(&Owner::Local, &watched, &after, Duration::ZERO)
        .await?;
    assert_eq!(
        (texts(&next), next.missed),
        (vec!["\"set\"".to_owned()], false)
    );

    // One whose actor published before the watch reached it: unheld, so
    // maybe missed.
    let published = durable_runtime(&Gate::default())?;
    published
        .invoke(call(&ActorId::new("d", "x"), "set"))
        .await?;
    let first = poll_as_new_host(&published, &watched).await?;
    assert!(first.events.is_empty() && first.missed, "{first:?}");
    Ok(())
}

/// A type poll from a watch that reaches this daemon for the first time.
async fn poll_as_new_host(rt: &Runtime, watched: &WatchedType) -> Result<Polled, CallError> {
    rt.poll_type_events(&Owner::Local, watched, &TypeFrom::NewHost, Duration::ZERO)
        .await
}
