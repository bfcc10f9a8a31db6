//! The bound on activations (`max_activations`): past it, the actors idle
//! longest are deactivated before their idle timeout, through the same path
//! as an idle one (the host told, the state flushed), and come back with
//! their state at their next call.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use troupe_placement::SingleNode;
use troupe_runtime::{
    ActivateDone, ActivateRequest, ActorHost, ActorId, Call, CallError, DeactivateDone,
    DeactivateReason, DeactivateRequest, Payload, Runtime, RuntimeConfig, StateChange, TurnDone,
    TurnOutcome, TurnRequest, TypeSpec,
};
use troupe_storage::{MemoryReminders, MemoryStore, StateStore};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Counts calls per actor in state `n`; tells the test of every
/// deactivation it is asked for.
struct Watching {
    deactivated: mpsc::UnboundedSender<(ActorId, DeactivateReason)>,
}

impl ActorHost for Watching {
    fn name(&self) -> &str {
        "watching"
    }

    fn activate(&self, _request: ActivateRequest, done: ActivateDone) {
        done.finish(Ok(Vec::new()));
    }

    fn turn(&self, request: TurnRequest, done: TurnDone) {
        let n: u64 = request
            .state
            .get("n")
            .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
            .unwrap_or(0)
            + 1;
        done.finish(TurnOutcome {
            result: Ok(Payload::json(n.to_string())),
            changes: vec![StateChange::set("n", n.to_string())],
        });
    }

    fn deactivate(&self, request: DeactivateRequest, done: DeactivateDone) {
        let _ = self.deactivated.send((request.actor, request.reason));
        done.finish(Vec::new());
    }
}

fn call(id: &str) -> Call {
    Call::new(ActorId::new("c", id), "incr", Payload::json("null"))
}

#[tokio::test]
async fn past_the_bound_the_actors_idle_longest_go_first_and_come_back_with_their_state(
) -> TestResult {
    const MAX: usize = 50;
    let store = Arc::new(MemoryStore::new());
    let rt = common::single_node(
        RuntimeConfig {
            max_activations: Some(MAX),
            // Only a deactivation writes state during the test.
            flush_interval: Duration::from_secs(3600),
            ..RuntimeConfig::default()
        },
        store.clone(),
    )?;
    let (tx, mut deactivated) = mpsc::unbounded_channel();
    rt.register_host(
        Arc::new(Watching { deactivated: tx }),
        vec![TypeSpec {
            name: "c".into(),
            // Far beyond the test: no actor goes for being idle.
            idle_timeout: Some(Duration::from_secs(3600)),
            ..TypeSpec::default()
        }],
    )?;

    let old: Vec<String> = (0..40).map(|i| format!("old{i}")).collect();
    let new: Vec<String> = (0..60).map(|i| format!("new{i}")).collect();
    for id in &old {
        rt.invoke(call(id)).await?;
    }
    // Idle time is the subject: the old ones must have been idle longer
    // than the daemon's coarse clock (100 ms ticks) can blur.
    tokio::time::sleep(Duration::from_millis(250)).await;
    for id in &new {
        rt.invoke(call(id)).await?;
    }

    // 100 activations for room for 50: at least 50 go, the old ones first.
    let mut gone = HashSet::new();
    while gone.len() < old.len() + new.len() - MAX {
        let next = tokio::time::timeout(Duration::from_secs(30), deactivated.recv()).await;
        let Ok(Some((actor, reason))) = next else {
            return Err(format!(
                "{} deactivations, {} activations",
                gone.len(),
                rt.status().active_actors
            )
            .into());
        };
        assert_eq!(reason, DeactivateReason::Capacity, "{actor}");
        gone.insert(actor.id.to_string());
    }
    for id in &old {
        assert!(gone.contains(id), "{id} stayed, idle longer than {gone:?}");
    }

    // A deactivated actor's state was written on its way out, and its next
    // call finds it.
    let stored = store.load("c", "old0").await?;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(&rt.invoke(call("old0")).await?.data[..], b"2");
    let _ = rt.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn the_bound_must_allow_an_activation() -> Result<(), CallError> {
    let refused = Runtime::create(
        RuntimeConfig {
            max_activations: Some(0),
            ..RuntimeConfig::default()
        },
        Arc::new(MemoryStore::new()),
        Arc::new(MemoryReminders::new()),
        Arc::new(SingleNode),
    );
    let Err(e) = refused else {
        panic!("max_activations 0 was accepted");
    };
    assert!(e.to_string().contains("max_activations"), "{e}");
    Ok(())
}
