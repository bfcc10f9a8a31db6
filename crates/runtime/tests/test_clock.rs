//! The test clock in process: `advance_clock` fires what is due on the way
//! in due order and returns after those turns ran; without a test clock it
//! is FAILED_PRECONDITION.

mod common;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use troupe_runtime::{
    ActorId, Call, CallError, FnHost, Payload, ReminderSpec, Runtime, RuntimeConfig, TimerSpec,
    TurnOutcome, TypeSpec,
};
use troupe_storage::MemoryStore;

const DAY: Duration = Duration::from_secs(24 * 3600);

/// The names of the turns a host ran, in order.
type Turns = Arc<Mutex<Vec<String>>>;

/// A runtime hosting type "box", whose turns are recorded by name, in order.
fn runtime(test_clock: bool) -> Result<(Runtime, Turns), CallError> {
    let rt = common::single_node(
        RuntimeConfig {
            test_clock,
            ..RuntimeConfig::default()
        },
        Arc::new(MemoryStore::new()),
    )?;
    let turns = Turns::default();
    let seen = turns.clone();
    let host = FnHost::new("clock-app", move |_actor: &ActorId, req| {
        seen.lock().push(req.name.to_string());
        TurnOutcome {
            result: Ok(Payload::json("null")),
            changes: Vec::new(),
        }
    });
    rt.register_host(
        Arc::new(host),
        vec![TypeSpec {
            name: "box".into(),
            ..TypeSpec::default()
        }],
    )?;
    Ok((rt, turns))
}

fn reminder(rt: &Runtime, name: &str, after: Duration) -> ReminderSpec {
    let due = rt.schedule_now_ms() + u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
    common::one_shot_reminder(ActorId::new("box", "b1"), name, due)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advancing_fires_what_is_due_in_due_order_and_nothing_later() -> Result<(), CallError> {
    let (rt, turns) = runtime(true)?;
    assert!(rt.has_test_clock());
    // Set out of order: firing follows due times, not the order of setting.
    rt.set_reminder(reminder(&rt, "twenty", 20 * DAY)).await?;
    rt.set_reminder(reminder(&rt, "ten", 10 * DAY)).await?;
    rt.set_reminder(reminder(&rt, "thirty", 30 * DAY)).await?;
    let start = rt.schedule_now_ms();

    let advanced = rt.advance_clock(25 * DAY).await?;
    assert_eq!(advanced.reminders_fired, 2);
    assert!(advanced.now_unix_ms >= start + 25 * 24 * 3600 * 1000);
    // Read at once: the call returned after the turns ran.
    assert_eq!(*turns.lock(), ["ten", "twenty"]);

    assert_eq!(rt.advance_clock(5 * DAY).await?.reminders_fired, 1);
    assert_eq!(*turns.lock(), ["ten", "twenty", "thirty"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_past_the_advances_step_bound_fires_once_for_the_rest() -> Result<(), CallError> {
    let (rt, turns) = runtime(true)?;
    let b1 = ActorId::new("box", "b1");
    // Timers live in an activation: a call makes one.
    rt.invoke(Call::new(b1.clone(), "wake", Payload::json("null")))
        .await?;
    rt.set_timer(TimerSpec {
        actor: b1.clone(),
        name: "tick".into(),
        due: Duration::from_secs(1),
        period: Some(Duration::from_secs(1)),
        payload: Payload::json("null"),
        keep_alive: true,
    })
    .await?;

    // A day of ticks is 86,400 of them, far past the 10,000 steps an
    // advance takes: it stops stepping, and the timer then fires once for
    // the rest. Before, it ran every tick it missed, and the advance ran
    // out of time.
    let advanced = rt.advance_clock(DAY).await?;
    let ticks = turns.lock().iter().filter(|name| *name == "tick").count();
    assert_eq!(u64::try_from(ticks).ok(), Some(advanced.timers_fired));
    assert!(
        (10_000..=10_002).contains(&ticks),
        "{ticks} ticks in an advance of a day"
    );
    // And on its grid a second later, as before the jump.
    assert_eq!(
        rt.advance_clock(Duration::from_secs(1)).await?.timers_fired,
        1
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_test_clock_time_cannot_be_moved() -> Result<(), CallError> {
    let (rt, _) = runtime(false)?;
    assert!(!rt.has_test_clock());
    match rt.advance_clock(DAY).await {
        Err(CallError::FailedPrecondition(_)) => Ok(()),
        other => Err(CallError::Internal(format!(
            "expected FAILED_PRECONDITION, got {other:?}"
        ))),
    }
}
