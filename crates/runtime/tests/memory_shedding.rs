//! Load shedding for memory, in process: while resident memory is near the
//! limit, new work is refused with a typed error, work already under way
//! (a running turn's own calls, reminder firings) and reads go on, and the
//! actors idle longest are deactivated to give memory back.

mod common;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use troupe_runtime::{
    ActivateDone, ActivateRequest, ActorFailure, ActorHost, ActorId, Call, CallError, CallExtra,
    DeactivateDone, DeactivateReason, DeactivateRequest, MemoryShedding, MemoryTransition, Payload,
    ReminderSpec, Runtime, RuntimeConfig, TurnDone, TurnOutcome, TurnRequest, TypeSpec,
};
use troupe_storage::MemoryStore;

const MIB: u64 = 1 << 20;

/// `outer`: tells the test it runs, waits for `go`, then calls `b`'s
/// `ping` on its chain and answers with that. Everything else: "pong".
struct Nesting {
    rt: std::sync::OnceLock<Runtime>,
    started: mpsc::UnboundedSender<()>,
    go: Arc<Notify>,
    fired: mpsc::UnboundedSender<String>,
    deactivated: mpsc::UnboundedSender<(ActorId, DeactivateReason)>,
}

impl ActorHost for Nesting {
    fn name(&self) -> &str {
        "nesting"
    }

    fn activate(&self, _request: ActivateRequest, done: ActivateDone) {
        done.finish(Ok(Vec::new()));
    }

    fn turn(&self, request: TurnRequest, mut done: TurnDone) {
        if request.kind != troupe_runtime::TurnKind::Call {
            let _ = self.fired.send(request.name.to_string());
        }
        if &*request.name != "outer" {
            return done.finish(TurnOutcome {
                result: Ok(Payload::json("\"pong\"")),
                changes: Vec::new(),
            });
        }
        let Some(rt) = self.rt.get().cloned() else {
            return done.fail(CallError::Internal("no runtime".into()));
        };
        let chain = done.chain_for_calls(request.extra.as_ref().and_then(|e| e.chain.as_ref()));
        let (started, go) = (self.started.clone(), self.go.clone());
        tokio::spawn(async move {
            let _ = started.send(());
            go.notified().await;
            let mut call = Call::new(ActorId::new("t", "b"), "ping", Payload::json("null"));
            call.extra = Some(Box::new(CallExtra {
                chain: Some(chain),
                ..CallExtra::default()
            }));
            let result = rt.invoke(call).await.map_err(|e| ActorFailure {
                ty: "CallFailed".into(),
                message: e.to_string(),
                ..ActorFailure::default()
            });
            done.finish(TurnOutcome {
                result,
                changes: Vec::new(),
            });
        });
    }

    fn deactivate(&self, request: DeactivateRequest, done: DeactivateDone) {
        let _ = self.deactivated.send((request.actor, request.reason));
        done.finish(Vec::new());
    }
}

fn call(id: &str, method: &str) -> Call {
    Call::new(ActorId::new("t", id), method, Payload::json("null"))
}

fn reminder(rt: &Runtime, name: &str) -> ReminderSpec {
    common::one_shot_reminder(ActorId::new("t", "r"), name, rt.schedule_now_ms() + 60_000)
}

fn is_shed<T>(result: &Result<T, CallError>) -> bool {
    matches!(result, Err(CallError::MemoryPressure(p)) if p.percent == 90 && p.limit_bytes == 100 * MIB)
}

struct Setup {
    rt: Runtime,
    started: mpsc::UnboundedReceiver<()>,
    go: Arc<Notify>,
    fired: mpsc::UnboundedReceiver<String>,
    deactivated: mpsc::UnboundedReceiver<(ActorId, DeactivateReason)>,
}

/// A runtime that sheds from 90% of a 100 MiB limit, hosting type `t`.
fn setup() -> Result<Setup, CallError> {
    let rt = common::single_node(
        RuntimeConfig {
            memory_shedding: Some(MemoryShedding {
                limit_bytes: 100 * MIB,
                percent: 90,
            }),
            test_clock: true,
            ..RuntimeConfig::default()
        },
        Arc::new(MemoryStore::new()),
    )?;
    let (started_tx, started) = mpsc::unbounded_channel();
    let (fired_tx, fired) = mpsc::unbounded_channel();
    let (deactivated_tx, deactivated) = mpsc::unbounded_channel();
    let go = Arc::new(Notify::new());
    let host = Arc::new(Nesting {
        rt: std::sync::OnceLock::new(),
        started: started_tx,
        go: go.clone(),
        fired: fired_tx,
        deactivated: deactivated_tx,
    });
    let _ = host.rt.set(rt.clone());
    rt.register_host(
        host,
        vec![TypeSpec {
            name: "t".into(),
            ..TypeSpec::default()
        }],
    )?;
    Ok(Setup {
        rt,
        started,
        go,
        fired,
        deactivated,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_the_limit_new_work_is_refused_and_work_under_way_finishes() -> Result<(), CallError> {
    let Setup {
        rt,
        mut started,
        go,
        mut fired,
        ..
    } = setup()?;

    assert_eq!(rt.observe_memory(80 * MIB), None);
    rt.invoke(call("a", "ping")).await?;
    rt.set_reminder(reminder(&rt, "set-before")).await?;
    let outer = tokio::spawn({
        let rt = rt.clone();
        async move { rt.invoke(call("a", "outer")).await }
    });
    started
        .recv()
        .await
        .ok_or_else(|| CallError::Internal("the outer turn never ran".into()))?;

    assert_eq!(
        rt.observe_memory(91 * MIB),
        Some(MemoryTransition::Shedding {
            resident_bytes: 91 * MIB
        })
    );
    // New work: refused, typed, saying why.
    let refused = rt.invoke(call("c", "ping")).await;
    assert!(is_shed(&refused), "{refused:?}");
    let text = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        text.contains("91.0 MiB") && text.contains("below 85%"),
        "{text}"
    );
    assert!(is_shed(&rt.tell(call("c", "ping"))));
    assert!(is_shed(&rt.tell_durable(call("c", "ping")).await));
    assert!(is_shed(&rt.set_reminder(reminder(&rt, "set-during")).await));
    // Reads are answered.
    rt.get_state(&ActorId::new("t", "a"), &[]).await?;
    // The running turn's own call goes through, so its caller is answered.
    go.notify_one();
    let answer = outer
        .await
        .map_err(|e| CallError::Internal(e.to_string()))??;
    assert_eq!(answer, Payload::json("\"pong\""));
    // A reminder set before fires.
    let advanced = rt.advance_clock(Duration::from_secs(120)).await?;
    assert_eq!(advanced.reminders_fired, 1);
    assert_eq!(fired.recv().await.as_deref(), Some("set-before"));

    let status = rt.status().memory.shedding;
    assert!(status.shedding);
    assert_eq!((status.refused, status.episodes), (4, 1));
    assert_eq!(status.shed_at_bytes, 90 * MIB);

    // Still above the resume point (85%): still shedding.
    assert_eq!(rt.observe_memory(86 * MIB), None);
    assert!(is_shed(&rt.invoke(call("c", "ping")).await));
    assert_eq!(
        rt.observe_memory(84 * MIB),
        Some(MemoryTransition::Resumed {
            resident_bytes: 84 * MIB
        })
    );
    rt.invoke(call("c", "ping")).await?;
    assert!(!rt.status().memory.shedding.shedding);
    Ok(())
}

/// Refusing work frees nothing: as shedding begins, as large a share of the
/// activations as memory is over the resume point goes, of the ones idle a
/// second at least (those called since would come straight back). The test waits that second: the
/// time passing is what it tests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shedding_deactivates_the_actors_idle_longest() -> Result<(), CallError> {
    let Setup {
        rt,
        mut deactivated,
        ..
    } = setup()?;
    for i in 0..20 {
        rt.invoke(call(&format!("a{i:02}"), "ping")).await?;
    }
    // All but two called again once the first calls are a second old: only
    // those two are cold.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    for i in 2..20 {
        rt.invoke(call(&format!("a{i:02}"), "ping")).await?;
    }
    // 100 MiB resident against a resume point of 85: 15% over it, so 3 of
    // 20 would go, but only the two cold ones may.
    assert!(rt.observe_memory(100 * MIB).is_some());
    let mut gone = Vec::new();
    for _ in 0..2 {
        let (actor, reason) = deactivated
            .recv()
            .await
            .ok_or_else(|| CallError::Internal("the host went away".into()))?;
        assert_eq!(reason, DeactivateReason::Memory);
        gone.push(actor.id.to_string());
    }
    gone.sort();
    assert_eq!(gone, ["a00", "a01"]);
    // Counted for memory, apart from --max-activations' deactivations.
    let memory = rt.status().memory;
    assert_eq!(
        (memory.shedding.deactivated, memory.capacity_deactivations),
        (2, 0)
    );
    // Within the next ten seconds, no more give-backs.
    assert_eq!(rt.observe_memory(100 * MIB), None);
    assert!(deactivated.try_recv().is_err());
    Ok(())
}

#[test]
fn a_threshold_outside_1_to_100_is_refused_naming_the_flag() {
    let config = RuntimeConfig {
        memory_shedding: Some(MemoryShedding {
            limit_bytes: 100 * MIB,
            percent: 101,
        }),
        ..RuntimeConfig::default()
    };
    let err = config
        .check()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("--memory-shed-percent"), "{err}");
}
