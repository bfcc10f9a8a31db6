//! The dispatch path with an in-process host: turn order, bounds, state,
//! deactivation and flushing, with no sockets involved.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use troupe_runtime::{
    ActorId, Call, CallError, FnHost, Payload, Runtime, RuntimeConfig, StateChange, StateMode,
    TurnOutcome, TurnRequest, TypeSpec,
};
use troupe_storage::{MemoryStore, StateStore};

fn counter_turn(_actor: &ActorId, req: TurnRequest) -> TurnOutcome {
    let count: u64 = req
        .state
        .get("count")
        .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
        .unwrap_or(0);
    let next = if &*req.name == "incr" {
        count + 1
    } else {
        count
    };
    let changes = if next != count {
        vec![StateChange::set("count", next.to_string())]
    } else {
        Vec::new()
    };
    TurnOutcome {
        result: Ok(Payload::json(next.to_string())),
        changes,
    }
}

fn runtime(store: Arc<MemoryStore>, config: RuntimeConfig) -> Runtime {
    common::single_node(config, store).unwrap_or_else(|e| panic!("{e}"))
}

fn spec(name: &str) -> TypeSpec {
    TypeSpec {
        name: name.into(),
        ..TypeSpec::default()
    }
}

fn call(id: &str, method: &str) -> Call {
    Call::new(ActorId::new("counter", id), method, Payload::default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_on_one_actor_run_one_at_a_time() -> Result<(), CallError> {
    let store = Arc::new(MemoryStore::new());
    let rt = runtime(store, RuntimeConfig::default());
    let in_turn = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let (i, o) = (in_turn.clone(), overlaps.clone());
    let host = FnHost::new("test", move |actor: &ActorId, req| {
        if i.fetch_add(1, Ordering::SeqCst) != 0 {
            o.fetch_add(1, Ordering::SeqCst);
        }
        std::thread::yield_now();
        let out = counter_turn(actor, req);
        i.fetch_sub(1, Ordering::SeqCst);
        out
    });
    rt.register_host(Arc::new(host), vec![spec("counter")])?;
    let calls = (0..200).map(|_| {
        let rt = rt.clone();
        async move { rt.invoke(call("c1", "incr")).await }
    });
    futures_join_all(calls).await?;
    let result = rt.invoke(call("c1", "get")).await?;
    assert_eq!(result.data, Bytes::from_static(b"200"));
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    Ok(())
}

#[tokio::test]
async fn a_full_mailbox_answers_overloaded() -> Result<(), CallError> {
    let store = Arc::new(MemoryStore::new());
    let rt = runtime(store, RuntimeConfig::default());
    // A host that never answers keeps the first call running forever.
    let parked = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let p = parked.clone();
    struct Parking(Arc<parking_lot::Mutex<Vec<troupe_runtime::TurnDone>>>);
    impl troupe_runtime::ActorHost for Parking {
        fn name(&self) -> &str {
            "parking"
        }
        fn activate(&self, _: troupe_runtime::ActivateRequest, done: troupe_runtime::ActivateDone) {
            done.finish(Ok(Vec::new()));
        }
        fn turn(&self, _: TurnRequest, done: troupe_runtime::TurnDone) {
            self.0.lock().push(done);
        }
        fn deactivate(
            &self,
            _: troupe_runtime::DeactivateRequest,
            done: troupe_runtime::DeactivateDone,
        ) {
            done.finish(Vec::new());
        }
    }
    let mut s = spec("counter");
    s.max_mailbox = Some(2);
    rt.register_host(Arc::new(Parking(p)), vec![s])?;
    rt.tell(call("c1", "incr"))?;
    // Wait until the first call is running, so the next two are queued.
    while parked.lock().is_empty() {
        tokio::task::yield_now().await;
    }
    rt.tell(call("c1", "incr"))?;
    rt.tell(call("c1", "incr"))?;
    match rt.tell(call("c1", "incr")) {
        Err(CallError::Overloaded(m)) => assert!(m.contains("mailbox"), "{m}"),
        other => panic!("expected Overloaded, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn idle_actors_are_deactivated_and_their_state_flushed() -> Result<(), CallError> {
    let store = Arc::new(MemoryStore::new());
    let config = RuntimeConfig {
        flush_interval: Duration::from_secs(3600),
        ..RuntimeConfig::default()
    };
    let rt = runtime(store.clone(), config);
    let mut s = spec("counter");
    s.idle_timeout = Some(Duration::from_millis(30));
    rt.register_host(Arc::new(FnHost::new("test", counter_turn)), vec![s])?;
    rt.invoke(call("c1", "incr")).await?;
    // Only deactivation can have written it: the interval is an hour.
    loop {
        let stored = store
            .load("counter", "c1")
            .await
            .map_err(|e| CallError::Internal(e.to_string()))?;
        if !stored.is_empty() {
            assert_eq!(
                stored,
                vec![("count".to_string(), Bytes::from_static(b"1"))]
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(rt.list_actors(None, None, 10).is_empty() || rt.status().active_actors <= 1);
    // Reactivation loads the flushed state.
    assert_eq!(
        rt.invoke(call("c1", "incr")).await?.data,
        Bytes::from_static(b"2")
    );
    Ok(())
}

#[tokio::test]
async fn durable_replies_wait_for_the_store() -> Result<(), CallError> {
    let store = Arc::new(MemoryStore::new());
    let config = RuntimeConfig {
        flush_interval: Duration::from_secs(3600),
        ..RuntimeConfig::default()
    };
    let rt = runtime(store.clone(), config);
    let mut s = spec("counter");
    s.state_mode = Some(StateMode::Durable);
    rt.register_host(Arc::new(FnHost::new("test", counter_turn)), vec![s])?;
    rt.invoke(call("c1", "incr")).await?;
    // Acknowledged means stored, even though the flush interval is an hour.
    let stored = store
        .load("counter", "c1")
        .await
        .map_err(|e| CallError::Internal(e.to_string()))?;
    assert_eq!(
        stored,
        vec![("count".to_string(), Bytes::from_static(b"1"))]
    );
    Ok(())
}

#[tokio::test]
async fn write_behind_coalesces_hot_keys_and_shutdown_flushes() -> Result<(), CallError> {
    let store = Arc::new(MemoryStore::new());
    let config = RuntimeConfig {
        flush_interval: Duration::from_secs(3600),
        ..RuntimeConfig::default()
    };
    let rt = runtime(store.clone(), config);
    rt.register_host(
        Arc::new(FnHost::new("test", counter_turn)),
        vec![spec("counter")],
    )?;
    for _ in 0..100 {
        rt.invoke(call("c1", "incr")).await?;
    }
    assert_eq!(store.key_writes(), 0, "write-behind wrote before a flush");
    assert!(rt.shutdown().await.is_complete());
    assert_eq!(
        store.key_writes(),
        1,
        "100 updates of one key should be one write"
    );
    let stored = store
        .load("counter", "c1")
        .await
        .map_err(|e| CallError::Internal(e.to_string()))?;
    assert_eq!(
        stored,
        vec![("count".to_string(), Bytes::from_static(b"100"))]
    );
    assert!(matches!(
        rt.tell(call("c1", "incr")),
        Err(CallError::Unavailable(_))
    ));
    Ok(())
}

#[tokio::test]
async fn unknown_types_and_bad_names_are_refused() -> Result<(), CallError> {
    let store = Arc::new(MemoryStore::new());
    let config = RuntimeConfig {
        host_wait: Duration::ZERO,
        max_payload_bytes: 8,
        ..RuntimeConfig::default()
    };
    let rt = runtime(store, config);
    rt.register_host(
        Arc::new(FnHost::new("test", counter_turn)),
        vec![spec("counter")],
    )?;
    let unknown = Call::new(ActorId::new("nope", "x"), "m", Payload::default());
    match rt.invoke(unknown).await {
        Err(e @ CallError::UnknownType { .. }) => assert!(e.to_string().contains("counter")),
        other => panic!("expected UnknownType, got {other:?}"),
    }
    assert!(matches!(
        rt.invoke(call("", "incr")).await,
        Err(CallError::InvalidArgument(_))
    ));
    let big = Call::new(
        ActorId::new("counter", "c"),
        "incr",
        Payload::json("123456789"),
    );
    assert!(matches!(
        rt.invoke(big).await,
        Err(CallError::InvalidArgument(_))
    ));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_never_registered_type_waits_only_out_the_start_up_window() -> Result<(), CallError> {
    let config = RuntimeConfig {
        host_wait: Duration::from_secs(10),
        ..RuntimeConfig::default()
    };
    let rt = runtime(Arc::new(MemoryStore::new()), config);
    rt.register_host(
        Arc::new(FnHost::new("test", counter_turn)),
        vec![spec("counter")],
    )?;
    // Near the window's end a misspelled type is still waited for, but only
    // until the window closes: refused from then on, it is no likelier to
    // come later for a call that came in it.
    tokio::time::advance(Duration::from_millis(9_500)).await;
    let asked = tokio::time::Instant::now();
    let unknown = Call::new(ActorId::new("countr", "x"), "incr", Payload::default());
    match rt.invoke(unknown).await {
        Err(CallError::UnknownType { .. }) => {}
        other => panic!("expected UnknownType, got {other:?}"),
    }
    let waited = asked.elapsed();
    assert!(
        waited <= Duration::from_millis(500),
        "waited {waited:?}, past the start-up window's end"
    );
    Ok(())
}

async fn futures_join_all<F, T>(futures: impl Iterator<Item = F>) -> Result<Vec<T>, CallError>
where
    F: std::future::Future<Output = Result<T, CallError>> + Send + 'static,
    T: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.map_err(|e| CallError::Internal(e.to_string()))??);
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_turn_fails_only_its_own_call() -> Result<(), CallError> {
    let store = Arc::new(MemoryStore::new());
    let rt = runtime(store, RuntimeConfig::default());
    let host = FnHost::new("app", |actor: &ActorId, req: TurnRequest| {
        if &*req.name == "panic" {
            panic!("injected panic in a handler of {actor}");
        }
        counter_turn(actor, req)
    });
    rt.register_host(Arc::new(host), vec![spec("counter")])?;
    assert_eq!(&rt.invoke(call("p", "incr")).await?.data[..], b"1");
    // The panic becomes INTERNAL for its caller only...
    let panicked = rt.invoke(call("p", "panic")).await;
    assert!(
        matches!(&panicked, Err(CallError::Internal(m)) if m.contains("panicked")),
        "{panicked:?}"
    );
    // ...its changes are discarded, and the actor, the worker and every
    // other actor go on.
    assert_eq!(&rt.invoke(call("p", "incr")).await?.data[..], b"2");
    for i in 0..20 {
        rt.invoke(call(&format!("other-{i}"), "incr")).await?;
    }
    Ok(())
}
