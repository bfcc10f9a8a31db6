//! Durable tells through the runtime on a shared in-memory store: stored
//! before acknowledged, removed with the state of the turn that handled
//! them, retried then dead-lettered, re-driven, and delivered by the next
//! runtime on the store when the first stopped with them pending.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use troupe_runtime::{
    ActorFailure, ActorId, Call, CallError, FailureKind, FnHost, Payload, Runtime, RuntimeConfig,
    StateChange, TurnOutcome, TypeSpec,
};
use troupe_storage::{MemoryStore, StateStore};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A host whose `append` adds its payload to the `log` key (comma
/// separated), failing while `failing` is set; every handled turn is sent
/// on `handled`.
fn start(
    store: Arc<MemoryStore>,
    failing: Arc<AtomicBool>,
    handled: mpsc::UnboundedSender<String>,
) -> Result<Runtime, CallError> {
    let config = RuntimeConfig {
        // Only group commits for acknowledgements write: a tell applied
        // and not yet removed would show in the checks below.
        flush_interval: Duration::from_secs(3600),
        ..RuntimeConfig::default()
    };
    let rt = common::single_node(config, store)?;
    let host = FnHost::new(
        "test",
        move |_actor: &ActorId, req: troupe_runtime::TurnRequest| {
            let item = String::from_utf8_lossy(&req.payload.data).into_owned();
            let _ = handled.send(item.clone());
            if &*req.name != "append" {
                return TurnOutcome {
                    result: Err(ActorFailure {
                        ty: "AttributeError".into(),
                        message: format!("no method {}", req.name),
                        kind: FailureKind::NoSuchMethod,
                        ..Default::default()
                    }),
                    changes: Vec::new(),
                };
            }
            if failing.load(Ordering::SeqCst) {
                return TurnOutcome {
                    result: Err(ActorFailure {
                        ty: "ValueError".into(),
                        message: format!("refusing {item}"),
                        details: String::new(),
                        ..Default::default()
                    }),
                    changes: Vec::new(),
                };
            }
            let log = match req.state.get("log") {
                Some(v) => format!("{},{item}", String::from_utf8_lossy(v)),
                None => item,
            };
            TurnOutcome {
                result: Ok(Payload::json("null")),
                changes: vec![StateChange::set("log", log)],
            }
        },
    );
    rt.register_host(
        Arc::new(host),
        vec![TypeSpec {
            name: "t".into(),
            ..TypeSpec::default()
        }],
    )?;
    Ok(rt)
}

/// The dead letters of type "t" once there are some: a dead letter is
/// written with the actor's next flush, which deactivating it makes.
async fn flushed_dead_letters(
    rt: &Runtime,
    actor: &ActorId,
) -> Result<Vec<troupe_runtime::DeadLetterInfo>, CallError> {
    loop {
        rt.deactivate_actor(actor).await?;
        let letters = rt.list_dead_letters(Some("t"), None, 10).await?;
        if !letters.is_empty() {
            return Ok(letters);
        }
        tokio::task::yield_now().await;
    }
}

fn tell(actor: &ActorId, item: &str) -> Call {
    Call::new(actor.clone(), "append", Payload::json(item.to_owned()))
}

async fn stored_log(store: &MemoryStore, actor: &ActorId) -> Result<Vec<String>, CallError> {
    let state = store
        .load(&actor.ty, &actor.id)
        .await
        .map_err(|e| CallError::Internal(e.to_string()))?;
    Ok(state
        .iter()
        .find(|(k, _)| k == "log")
        .map(|(_, v)| {
            String::from_utf8_lossy(v)
                .split(',')
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default())
}

#[tokio::test]
async fn acknowledged_tells_are_stored_and_applied_once_in_order() -> TestResult {
    let store = Arc::new(MemoryStore::new());
    let (tx, _handled) = mpsc::unbounded_channel();
    let rt = start(store.clone(), Arc::new(AtomicBool::new(false)), tx)?;
    let actor = ActorId::new("t", "a");
    let mut senders = Vec::new();
    for sender in 0..3 {
        let (rt, actor) = (rt.clone(), actor.clone());
        senders.push(tokio::spawn(async move {
            for n in 0..10 {
                rt.tell_durable(tell(&actor, &format!("s{sender}-{n}")))
                    .await?;
            }
            Ok::<_, CallError>(())
        }));
    }
    for s in senders {
        s.await??;
    }
    // Every acknowledged tell is in the store: still in the inbox, or
    // applied to the stored state with its entry gone — never both, never
    // neither (the removal rides in the batch of the turn's state).
    let applied = stored_log(&store, &actor).await?;
    let pending = store.load_inbox("t", "a").await?.len();
    assert_eq!(
        applied.len() + pending,
        30,
        "applied {applied:?}, pending {pending}"
    );
    let _ = rt.shutdown().await;
    let applied = stored_log(&store, &actor).await?;
    assert_eq!(applied.len(), 30, "each tell applied once: {applied:?}");
    assert!(store.load_inbox("t", "a").await?.is_empty());
    for sender in 0..3 {
        let mine: Vec<_> = applied
            .iter()
            .filter(|i| i.starts_with(&format!("s{sender}-")))
            .cloned()
            .collect();
        let expected: Vec<_> = (0..10).map(|n| format!("s{sender}-{n}")).collect();
        assert_eq!(mine, expected, "order per sender");
    }
    Ok(())
}

#[tokio::test]
async fn failing_tells_retry_then_become_dead_letters_that_redrive() -> TestResult {
    let store = Arc::new(MemoryStore::new());
    let failing = Arc::new(AtomicBool::new(true));
    let (tx, mut handled) = mpsc::unbounded_channel();
    let rt = start(store.clone(), failing.clone(), tx)?;
    let actor = ActorId::new("t", "d");
    rt.tell_durable(tell(&actor, "x")).await?;
    // Three attempts, then the dead letter is written with the actor's next
    // flush: deactivating the actor flushes it.
    for _ in 0..3 {
        assert_eq!(handled.recv().await.as_deref(), Some("x"));
    }
    let letters = flushed_dead_letters(&rt, &actor).await?;
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].method, "append");
    assert_eq!(letters[0].attempts, 3);
    assert!(
        letters[0].error.contains("refusing x"),
        "{}",
        letters[0].error
    );
    assert!(store.load_inbox("t", "d").await?.is_empty());
    failing.store(false, Ordering::SeqCst);
    assert!(rt.redrive_dead_letter(&actor, letters[0].seq).await?);
    assert_eq!(handled.recv().await.as_deref(), Some("x"));
    assert!(rt.list_dead_letters(None, None, 10).await?.is_empty());
    let _ = rt.shutdown().await;
    assert_eq!(stored_log(&store, &actor).await?, vec!["x"]);
    Ok(())
}

#[tokio::test]
async fn a_tell_no_method_can_take_is_a_dead_letter_at_once() -> TestResult {
    let store = Arc::new(MemoryStore::new());
    let (tx, mut handled) = mpsc::unbounded_channel();
    let rt = start(store.clone(), Arc::new(AtomicBool::new(false)), tx)?;
    let actor = ActorId::new("t", "d");
    rt.tell_durable(Call::new(actor.clone(), "apend", Payload::json("x")))
        .await?;
    rt.tell_durable(tell(&actor, "y")).await?;
    // The misspelt method would fail alike every time, while each retry
    // held the tells behind it: it is not tried again.
    assert_eq!(handled.recv().await.as_deref(), Some("x"));
    assert_eq!(handled.recv().await.as_deref(), Some("y"));
    let letters = flushed_dead_letters(&rt, &actor).await?;
    assert_eq!(
        (
            letters.len(),
            letters[0].method.as_str(),
            letters[0].attempts
        ),
        (1, "apend", 1)
    );
    let _ = rt.shutdown().await;
    assert_eq!(stored_log(&store, &actor).await?, vec!["y"]);
    Ok(())
}

#[tokio::test]
async fn the_next_runtime_on_the_store_delivers_pending_tells() -> TestResult {
    let store = Arc::new(MemoryStore::new());
    let (tx, mut handled) = mpsc::unbounded_channel();
    let first = start(store.clone(), Arc::new(AtomicBool::new(true)), tx)?;
    let actor = ActorId::new("t", "p");
    first.tell_durable(tell(&actor, "kept")).await?;
    // The first attempt fails; the runtime stops with the tell pending.
    assert_eq!(handled.recv().await.as_deref(), Some("kept"));
    let _ = first.shutdown().await;
    assert_eq!(store.load_inbox("t", "p").await?.len(), 1);
    // Nothing calls the actor: the inbox scan activates it.
    let (tx, mut handled) = mpsc::unbounded_channel();
    let second = start(store.clone(), Arc::new(AtomicBool::new(false)), tx)?;
    assert_eq!(handled.recv().await.as_deref(), Some("kept"));
    let _ = second.shutdown().await;
    assert_eq!(stored_log(&store, &actor).await?, vec!["kept"]);
    assert!(store.load_inbox("t", "p").await?.is_empty());
    Ok(())
}
