//! Deleting a reminder, an alarm or a timer whose firing already waits in the
//! actor's mailbox, behind a long turn: once the delete returned, the
//! firing's turn does not start.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use troupe_runtime::{
    ActivateDone, ActivateRequest, ActorHost, ActorId, AlarmSpec, Call, CallError, DeactivateDone,
    DeactivateRequest, Payload, RetryPolicy, RuntimeConfig, TimerSpec, TurnDone, TurnOutcome,
    TurnRequest, TypeSpec,
};
use troupe_storage::MemoryStore;

mod common;

/// Method `hold` says it started, then waits for `go`; every turn's method
/// is told to `ran` as it starts.
struct Holding {
    started: mpsc::UnboundedSender<()>,
    go: Arc<Notify>,
    ran: mpsc::UnboundedSender<String>,
}

impl ActorHost for Holding {
    fn name(&self) -> &str {
        "holding"
    }

    fn activate(&self, _request: ActivateRequest, done: ActivateDone) {
        done.finish(Ok(Vec::new()));
    }

    fn turn(&self, request: TurnRequest, done: TurnDone) {
        let _ = self.ran.send(request.name.to_string());
        let answer = TurnOutcome {
            result: Ok(Payload::json("null")),
            changes: Vec::new(),
        };
        if &*request.name != "hold" {
            return done.finish(answer);
        }
        let (started, go) = (self.started.clone(), self.go.clone());
        tokio::spawn(async move {
            let _ = started.send(());
            go.notified().await;
            done.finish(answer);
        });
    }

    fn deactivate(&self, _request: DeactivateRequest, done: DeactivateDone) {
        done.finish(Vec::new());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firing_waiting_behind_a_turn_does_not_run_once_its_reminder_is_deleted(
) -> Result<(), CallError> {
    let rt = common::single_node(RuntimeConfig::default(), Arc::new(MemoryStore::new()))?;
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (ran_tx, mut ran) = mpsc::unbounded_channel();
    let go = Arc::new(Notify::new());
    rt.register_host(
        Arc::new(Holding {
            started: started_tx,
            go: go.clone(),
            ran: ran_tx,
        }),
        vec![TypeSpec {
            name: "t".into(),
            ..TypeSpec::default()
        }],
    )?;
    let a = ActorId::new("t", "a");
    let holding = tokio::spawn({
        let rt = rt.clone();
        let a = a.clone();
        async move { rt.invoke(Call::new(a, "hold", Payload::default())).await }
    });
    started.recv().await;

    // All three due now: their firings queue behind `hold`.
    let now = troupe_runtime::clock::unix_now_ms();
    rt.set_reminder(common::one_shot_reminder(a.clone(), "tick", now))
        .await?;
    rt.set_alarm(AlarmSpec {
        actor: a.clone(),
        at_unix_ms: now,
        payload: Payload::json("null"),
        retry: RetryPolicy::default(),
    })
    .await?;
    // A timer lives in the activation, which `hold` keeps.
    rt.set_timer(TimerSpec {
        actor: a.clone(),
        name: "soon".into(),
        due: Duration::ZERO,
        period: None,
        payload: Payload::json("null"),
        keep_alive: false,
    })
    .await?;
    common::until_waiting(&rt, &a, 3).await?;
    assert!(rt.delete_reminder(&a, "tick").await?);
    assert!(rt.delete_alarm(&a).await?);
    assert!(rt.delete_timer(&a, "soon").await?);
    go.notify_one();
    holding
        .await
        .map_err(|e| CallError::Internal(e.to_string()))??;

    // Turns run in order: once `after` ran, anything queued before it has.
    rt.invoke(Call::new(a.clone(), "after", Payload::default()))
        .await?;
    let mut methods = Vec::new();
    while let Ok(method) = ran.try_recv() {
        methods.push(method);
    }
    assert_eq!(methods, ["hold", "after"]);
    assert_eq!(rt.reminders_fired(), 0);
    Ok(())
}
