//! A reminder, an alarm or a timer set again or deleted while its firing
//! already waits in the actor's mailbox, behind a long turn: once the set
//! or delete returned, the old firing's turn does not start, and what the
//! newer call set is what stays.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use troupe_runtime::{
    ActivateDone, ActivateRequest, ActorHost, ActorId, AlarmSpec, Call, CallError, DeactivateDone,
    DeactivateRequest, MissedFirings, Payload, ReminderSpec, RetryPolicy, Runtime, RuntimeConfig,
    TimerSpec, TurnDone, TurnOutcome, TurnRequest, TypeSpec,
};
use troupe_storage::MemoryStore;

mod common;

/// Method `hold` says it started, then waits for `go`; every turn's method
/// and payload are told to `ran` as it starts.
struct Holding {
    started: mpsc::UnboundedSender<()>,
    go: Arc<Notify>,
    ran: mpsc::UnboundedSender<(String, Payload)>,
}

impl ActorHost for Holding {
    fn name(&self) -> &str {
        "holding"
    }

    fn activate(&self, _request: ActivateRequest, done: ActivateDone) {
        done.finish(Ok(Vec::new()));
    }

    fn turn(&self, request: TurnRequest, done: TurnDone) {
        let _ = self
            .ran
            .send((request.name.to_string(), request.payload.clone()));
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

/// A runtime hosting type `t` on [`Holding`], with actor `a` inside a
/// `hold` turn until `release`.
struct Held {
    rt: Runtime,
    a: ActorId,
    go: Arc<Notify>,
    ran: mpsc::UnboundedReceiver<(String, Payload)>,
    holding: tokio::task::JoinHandle<Result<Payload, CallError>>,
}

impl Held {
    async fn start() -> Result<Held, CallError> {
        let rt = common::single_node(RuntimeConfig::default(), Arc::new(MemoryStore::new()))?;
        let (started_tx, mut started) = mpsc::unbounded_channel();
        let (ran_tx, ran) = mpsc::unbounded_channel();
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
        Ok(Held {
            rt,
            a,
            go,
            ran,
            holding,
        })
    }

    /// Ends `hold`, then runs a call after everything queued behind it, and
    /// returns the methods of the turns that ran, with their payloads.
    async fn release(mut self) -> Result<Vec<(String, Payload)>, CallError> {
        self.go.notify_one();
        self.holding
            .await
            .map_err(|e| CallError::Internal(e.to_string()))??;
        // Turns run in order: once `after` ran, anything queued before it has.
        self.rt
            .invoke(Call::new(self.a.clone(), "after", Payload::default()))
            .await?;
        let mut ran = Vec::new();
        while let Ok(turn) = self.ran.try_recv() {
            ran.push(turn);
        }
        Ok(ran)
    }
}

fn methods(ran: &[(String, Payload)]) -> Vec<&str> {
    ran.iter().map(|(m, _)| m.as_str()).collect()
}

fn hourly(actor: &ActorId, name: &str, due_unix_ms: u64, payload: &'static str) -> ReminderSpec {
    ReminderSpec {
        actor: actor.clone(),
        name: name.into(),
        due_unix_ms,
        period: Some(Duration::from_secs(3600)),
        cron: None,
        jitter: None,
        repeat: None,
        until_unix_ms: None,
        payload: Payload::json(payload),
        retry: RetryPolicy::default(),
        missed: MissedFirings::FireOnce,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firing_waiting_behind_a_turn_does_not_run_once_its_reminder_is_deleted(
) -> Result<(), CallError> {
    let held = Held::start().await?;
    let (rt, a) = (held.rt.clone(), held.a.clone());
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

    let ran = held.release().await?;
    assert_eq!(methods(&ran), ["hold", "after"]);
    assert_eq!(rt.reminders_fired(), 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_set_again_while_its_firing_waits_fires_and_stays_as_set_again(
) -> Result<(), CallError> {
    let held = Held::start().await?;
    let (rt, a) = (held.rt.clone(), held.a.clone());
    let now = troupe_runtime::clock::unix_now_ms();
    rt.set_reminder(hourly(&a, "r", now, "\"old\"")).await?;
    common::until_waiting(&rt, &a, 1).await?;
    // Set again, due now too: the new firing queues behind the old one,
    // which stays in the mailbox, superseded, until the worker skips it.
    rt.set_reminder(hourly(&a, "r", now, "\"new\"")).await?;
    common::until_waiting(&rt, &a, 2).await?;

    let ran = held.release().await?;
    assert_eq!(methods(&ran), ["hold", "r", "after"]);
    assert_eq!(ran[1].1, Payload::json("\"new\""));
    // Before, the old firing's bookkeeping, written last, put its own
    // payload back over the one set again.
    let moved_on = common::poll(|| async {
        let info = rt.get_reminder(&a, "r").await?;
        Ok(info.filter(|i| i.next_due_unix_ms > now))
    })
    .await?;
    assert_eq!(moved_on.payload, Payload::json("\"new\""));
    assert_eq!(moved_on.fired, 1);
    Ok(())
}
