//! Actors calling actors, in process: call chains, re-entrancy, deadlock
//! detection and read-only turns on the real dispatch path.
//!
//! The host here runs each turn as a task, so a turn can call other actors
//! and wait, the way an app does.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use troupe_runtime::{
    ActivateDone, ActivateRequest, ActorHost, ActorId, Call, CallChain, CallError, CallExtra,
    DeactivateDone, DeactivateRequest, Payload, Runtime, RuntimeConfig, StateChange, TurnDone,
    TurnOutcome, TurnRequest, TypeSpec,
};
use troupe_storage::MemoryStore;

/// `ping N`: calls the other actor's `ping N-1` (a ↔ b) until N is 0, then
/// returns the depth reached. `self N`: calls itself N times deep.
/// `read`: read-only, tracks overlap. `write`: a writer, tracks overlap.
/// `sneaky`: read-only but writes. `hold`: hands the test the chain issued
/// to it and runs until the test releases it. `mark`: counts itself; with
/// `hold`, tracks overlap.
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
    /// `hold` and `mark` turns running now; times one started beside another.
    busy: AtomicUsize,
    overlapped: AtomicUsize,
    marks: AtomicUsize,
    /// The chains issued to `hold` turns, in order; `held` says one came.
    held_chains: parking_lot::Mutex<Vec<CallChain>>,
    held: tokio::sync::Notify,
    /// Per actor id: ends its running `hold` turn.
    release: parking_lot::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Notify>>>,
}

impl Seen {
    fn enter(&self) {
        if self.busy.fetch_add(1, Ordering::SeqCst) > 0 {
            self.overlapped.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn leave(&self) {
        self.busy.fetch_sub(1, Ordering::SeqCst);
    }

    /// Ends the `hold` turn of actor `id` (now or, if it has not begun to
    /// wait, as soon as it does).
    fn release(&self, id: &str) -> Arc<tokio::sync::Notify> {
        self.release
            .lock()
            .entry(id.to_owned())
            .or_default()
            .clone()
    }

    /// The chain issued to the `n`th `hold` turn (from 1), once it runs.
    async fn held_chain(&self, n: usize) -> CallChain {
        loop {
            let notified = self.held.notified();
            if let Some(chain) = self.held_chains.lock().get(n - 1) {
                return chain.clone();
            }
            notified.await;
        }
    }
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

    fn turn(&self, request: TurnRequest, mut done: TurnDone) {
        let Some(rt) = self.rt.get().cloned() else {
            return done.fail(CallError::Internal("no runtime".into()));
        };
        let me = done.actor().clone();
        let seen = self.seen.clone();
        // The chain the daemon issues to this turn, as an app gets it.
        let chain = done.chain_for_calls(request.extra.as_ref().and_then(|e| e.chain.as_ref()));
        tokio::spawn(async move {
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
                            ..Default::default()
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
                "hold" => {
                    seen.enter();
                    seen.held_chains.lock().push(chain);
                    seen.held.notify_one();
                    seen.release(&me.id).notified().await;
                    seen.leave();
                    Ok(Payload::json("0"))
                }
                "mark" => {
                    seen.enter();
                    seen.marks.fetch_add(1, Ordering::SeqCst);
                    seen.leave();
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
    let rt = common::single_node(RuntimeConfig::default(), Arc::new(MemoryStore::new()))?;
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

fn with_chain(mut call: Call, chain: CallChain) -> Call {
    call.extra = Some(Box::new(CallExtra {
        chain: Some(chain),
        ..CallExtra::default()
    }));
    call.timeout = Some(Duration::from_secs(5));
    call
}

/// The attack issue 16 describes: a caller outside any turn names a
/// re-entrant actor on a chain, and its call ran beside that actor's
/// running turn. No chain the daemon did not issue to a running turn is
/// honoured: none without a token, made up, moved to another chain, or of
/// a turn that ended. The last call shows what honouring one looks like.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_chain_never_runs_beside_a_running_turn() -> Result<(), CallError> {
    let (rt, seen) = setup(true, &[])?;
    // A turn of h that ends: its chain goes stale.
    let first = tokio::spawn({
        let rt = rt.clone();
        async move { rt.invoke(call("h", "hold", 0)).await }
    });
    let ended = seen.held_chain(1).await;
    seen.release("h").notify_one();
    first
        .await
        .map_err(|e| CallError::Internal(e.to_string()))??;
    // Another actor's turn, running throughout.
    let other = tokio::spawn({
        let rt = rt.clone();
        async move { rt.invoke(call("o", "hold", 0)).await }
    });
    let others = seen.held_chain(2).await;

    // h's turn runs until released.
    let held = tokio::spawn({
        let rt = rt.clone();
        async move { rt.invoke(call("h", "hold", 0)).await }
    });
    let live = seen.held_chain(3).await;
    assert_eq!(live.actors, [ActorId::new("node", "h")]);

    let made_up = CallChain {
        token: troupe_runtime::ChainToken::new(vec![0x5a; 24].into()),
        ..live.clone()
    };
    let unsigned = CallChain {
        token: Default::default(),
        ..live.clone()
    };
    // o's live token on a chain that names h: h → o.
    let moved = CallChain {
        actors: vec![ActorId::new("node", "h"), ActorId::new("node", "o")],
        ..others.clone()
    };
    let forged = [
        (unsigned, "no_token"),
        (made_up, "not_issued"),
        (moved, "not_issued"),
        (ended, "turn_ended"),
    ];
    for (chain, why) in forged {
        let result = rt
            .invoke(with_chain(call("h", "mark", 0), chain.clone()))
            .await;
        match result {
            Err(CallError::ChainRefused(refused)) => assert_eq!(refused.reason(), why),
            other => panic!("a forged chain ({why}) was not refused: {other:?}"),
        }
        let told = rt.tell(with_chain(call("h", "mark", 0), chain));
        assert!(matches!(told, Err(CallError::ChainRefused(_))), "{told:?}");
    }
    assert_eq!(seen.marks.load(Ordering::SeqCst), 0, "a forged call ran");
    assert_eq!(
        seen.overlapped.load(Ordering::SeqCst),
        1,
        "only o's turn beside h's"
    );

    // The chain issued to h's running turn does nest in it: that is what
    // the refused ones would have done.
    rt.invoke(with_chain(call("h", "mark", 0), live)).await?;
    assert_eq!(seen.marks.load(Ordering::SeqCst), 1);
    assert_eq!(seen.overlapped.load(Ordering::SeqCst), 2);

    seen.release("h").notify_one();
    held.await
        .map_err(|e| CallError::Internal(e.to_string()))??;
    seen.release("o").notify_one();
    other
        .await
        .map_err(|e| CallError::Internal(e.to_string()))??;
    Ok(())
}
