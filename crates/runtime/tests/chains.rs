//! Actors calling actors, in process: call chains, re-entrancy, deadlock
//! detection and read-only turns on the real dispatch path.
//!
//! The host here runs each turn as a task, so a turn can call other actors
//! and wait, the way an app does.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use troupe_placement::SingleNode;
use troupe_runtime::{
    ActivateDone, ActivateRequest, ActorHost, ActorId, Call, CallChain, CallError, CallExtra,
    DeactivateDone, DeactivateRequest, Payload, Runtime, RuntimeConfig, StateChange, TurnDone,
    TurnOutcome, TurnRequest, TypeSpec,
};
use troupe_storage::{MemoryReminders, MemoryStore};

/// `ping N`: calls the other actor's `ping N-1` (a ↔ b) until N is 0, then
/// returns the depth reached. `self N`: calls itself N times deep.
/// `read`: read-only, tracks overlap. `write`: a writer, tracks overlap.
/// `sneaky`: read-only but writes.
#[derive(Debug)]
struct ChainHost {
    rt: std::sync::OnceLock<Runtime>,
    seen: Arc<Seen>,
}

/// What the turns observed about each other.
#[derive(Debug, Default)]
struct Seen {
    readers: AtomicUsize,
    max_readers: AtomicUsize,
    writers: AtomicUsize,
    reader_beside_writer: AtomicUsize,
}

fn number(payload: &Payload) -> u64 {
    std::str::from_utf8(&payload.data)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

impl ActorHost for ChainHost {
    fn name(&self) -> &str {
        "chain-app"
    }

    fn activate(&self, _request: ActivateRequest, done: ActivateDone) {
        done.finish(Ok(Vec::new()));
    }

    fn turn(&self, request: TurnRequest, done: TurnDone) {
        let Some(rt) = self.rt.get().cloned() else {
            return done.fail(CallError::Internal("no runtime".into()));
        };
        let me = done.actor().clone();
        let seen = self.seen.clone();
        tokio::spawn(async move {
            let chain = CallChain::for_calls_from(
                request.extra.as_ref().and_then(|e| e.chain.as_ref()),
                &me,
            );
            let n = number(&request.payload);
            let outcome = match &*request.name {
                "ping" | "self" if n > 0 => {
                    let target = if &*request.name == "self" {
                        me.clone()
                    } else {
                        ActorId::new(me.ty.clone(), if &*me.id == "a" { "b" } else { "a" })
                    };
                    let mut call = Call::new(
                        target,
                        request.name.clone(),
                        Payload::json((n - 1).to_string()),
                    );
                    call.extra = Some(Box::new(CallExtra {
                        chain: Some(chain),
                        ..CallExtra::default()
                    }));
                    call.timeout = Some(Duration::from_secs(5));
                    match rt.invoke(call).await {
                        Ok(p) => Ok(Payload::json((number(&p) + 1).to_string())),
                        Err(e) => Err(troupe_runtime::ActorFailure {
                            ty: "CallFailed".into(),
                            message: e.to_string(),
                            details: String::new(),
                        }),
                    }
                }
                "read" | "sneaky" => {
                    let now = seen.readers.fetch_add(1, Ordering::SeqCst) + 1;
                    seen.max_readers.fetch_max(now, Ordering::SeqCst);
                    if seen.writers.load(Ordering::SeqCst) > 0 {
                        seen.reader_beside_writer.fetch_add(1, Ordering::SeqCst);
                    }
                    // Long enough for the other readers to arrive meanwhile.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    seen.readers.fetch_sub(1, Ordering::SeqCst);
                    Ok(Payload::json("0"))
                }
                "write" => {
                    seen.writers.fetch_add(1, Ordering::SeqCst);
                    if seen.readers.load(Ordering::SeqCst) > 0 {
                        seen.reader_beside_writer.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    seen.writers.fetch_sub(1, Ordering::SeqCst);
                    Ok(Payload::json("0"))
                }
                _ => Ok(Payload::json("0")),
            };
            let changes = match &*request.name {
                "write" | "sneaky" => vec![StateChange::set("k", "1")],
                _ => Vec::new(),
            };
            done.finish(TurnOutcome {
                result: outcome,
                changes,
            });
        });
    }

    fn deactivate(&self, _request: DeactivateRequest, done: DeactivateDone) {
        done.finish(Vec::new());
    }
}

fn setup(reentrant: bool, readonly: &[&str]) -> Result<(Runtime, Arc<Seen>), CallError> {
    let rt = Runtime::create(
        RuntimeConfig::default(),
        Arc::new(MemoryStore::new()),
        Arc::new(MemoryReminders::new()),
        Arc::new(SingleNode),
    )
    .map_err(|e| CallError::Internal(e.to_string()))?;
    rt.start();
    let seen = Arc::new(Seen::default());
    let host = Arc::new(ChainHost {
        rt: std::sync::OnceLock::new(),
        seen: seen.clone(),
    });
    let _ = host.rt.set(rt.clone());
    rt.register_host(
        host,
        vec![TypeSpec {
            name: "node".into(),
            reentrant,
            readonly_methods: readonly.iter().map(|m| m.to_string()).collect(),
            ..TypeSpec::default()
        }],
    )?;
    Ok((rt, seen))
}

fn call(id: &str, method: &str, n: u64) -> Call {
    Call::new(
        ActorId::new("node", id),
        method,
        Payload::json(n.to_string()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_without_reentrancy_fails_at_once_naming_it() -> Result<(), CallError> {
    let (rt, _) = setup(false, &[])?;
    let started = Instant::now();
    let result = rt.invoke(call("a", "ping", 2)).await;
    let took = started.elapsed();
    let Err(CallError::Actor(failure)) = result else {
        panic!("expected the cycle to fail the outer turn, got {result:?}");
    };
    assert!(
        failure
            .message
            .contains("deadlock: node/a → node/b → node/a"),
        "{}",
        failure.message
    );
    assert!(took < Duration::from_secs(1), "took {took:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_with_reentrancy_runs_nested() -> Result<(), CallError> {
    let (rt, _) = setup(true, &[])?;
    // a → b → a → b → a: four nested calls, each adds one.
    let result = rt.invoke(call("a", "ping", 4)).await?;
    assert_eq!(number(&result), 4);
    // The actors are usable afterwards: nothing left running.
    assert_eq!(number(&rt.invoke(call("a", "ping", 0)).await?), 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runaway_recursion_hits_the_depth_limit() -> Result<(), CallError> {
    let (rt, _) = setup(true, &[])?;
    assert_eq!(number(&rt.invoke(call("r", "self", 30)).await?), 30);
    let result = rt.invoke(call("r", "self", 100)).await;
    let Err(CallError::Actor(failure)) = result else {
        panic!("expected the depth limit, got {result:?}");
    };
    assert!(
        failure.message.contains("32 calls deep, the limit (32)"),
        "{}",
        failure.message
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_overlap_and_writers_exclude_them() -> Result<(), CallError> {
    let (rt, seen) = setup(false, &["read", "sneaky"])?;
    let mut calls = Vec::new();
    for i in 0..50 {
        let rt = rt.clone();
        let method = if i % 10 == 9 { "write" } else { "read" };
        calls.push(tokio::spawn(async move {
            rt.invoke(call("x", method, 0)).await
        }));
    }
    for c in calls {
        c.await.map_err(|e| CallError::Internal(e.to_string()))??;
    }
    let max = seen.max_readers.load(Ordering::SeqCst);
    assert!(max > 1, "read-only calls never overlapped (max {max})");
    assert_eq!(
        seen.reader_beside_writer.load(Ordering::SeqCst),
        0,
        "a writer ran beside a reader"
    );

    let refused = rt.invoke(call("y", "sneaky", 0)).await;
    let Err(CallError::FailedPrecondition(message)) = refused else {
        panic!("a read-only turn that writes must fail, got {refused:?}");
    };
    assert!(
        message.contains("'sneaky'") && message.contains("read-only"),
        "{message}"
    );
    let (state, _) = rt.get_state(&ActorId::new("node", "y"), &[]).await?;
    assert!(state.is_empty());
    Ok(())
}
