//! A `set` or `delete` of a reminder while the scheduler reads the store
//! (a load) wins over what that read returns: the read may predate the
//! write. Each test holds a load open right after its read, changes the
//! reminder it read, then lets the load finish.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};
use troupe_runtime::{
    ActorId, CallError, FnHost, Payload, ReminderSpec, Runtime, TurnOutcome, TypeSpec,
};
use troupe_storage::conformance::{HookedReminders, ReminderHooks};
use troupe_storage::ReminderRecord;

const SECOND: Duration = Duration::from_secs(1);

/// Holds the next load that returns reminder `name` after its read, until
/// released.
#[derive(Debug)]
struct HeldLoad {
    name: &'static str,
    armed: AtomicBool,
    /// Told when the held load has read.
    read: Notify,
    release: Mutex<Option<oneshot::Receiver<()>>>,
}

#[async_trait]
impl ReminderHooks for HeldLoad {
    async fn read_due(&self, records: &[ReminderRecord], limit: usize) {
        // Only a load reads more than one (`earliest_due` reads one).
        let held = limit > 1
            && records.iter().any(|r| r.key.name == self.name)
            && self.armed.swap(false, Ordering::SeqCst);
        if held {
            let release = self.release.lock().take();
            self.read.notify_one();
            if let Some(release) = release {
                let _ = release.await;
            }
        }
    }
}

type HeldLoads = HookedReminders<HeldLoad>;

/// The names of the turns the host ran, with the scheduling time of each.
type Turns = Arc<Mutex<Vec<(String, u64)>>>;

struct Setup {
    rt: Arc<Runtime>,
    turns: Turns,
    store: Arc<HeldLoads>,
    /// Lets the held load go on; taken when used.
    release: Option<oneshot::Sender<()>>,
}

fn setup(name: &'static str) -> Result<Setup, CallError> {
    let (release, released) = oneshot::channel();
    let store = Arc::new(HookedReminders::new(HeldLoad {
        name,
        armed: AtomicBool::new(false),
        read: Notify::new(),
        release: Mutex::new(Some(released)),
    }));
    let rt = common::on_test_clock(store.clone())?;
    let turns = Turns::default();
    let (seen, clock) = (turns.clone(), rt.clone());
    let host = FnHost::new("loads-app", move |_actor: &ActorId, req| {
        seen.lock()
            .push((req.name.to_string(), clock.schedule_now_ms()));
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
    Ok(Setup {
        rt,
        turns,
        store,
        release: Some(release),
    })
}

fn reminder(name: &str, due_unix_ms: u64) -> ReminderSpec {
    common::one_shot_reminder(ActorId::new("box", "b1"), name, due_unix_ms)
}

/// Sets `name` beyond the loaded horizon (30 s), and a "marker" 10 s after
/// it on the same actor, moves the clock so the next load reads both, and
/// runs `change` while that load is held after its read. Returns the setup
/// and the reminder's first due time. Once the marker's turn ran, every
/// firing before it ran too (one actor's turns run in order), so the tests
/// see a stale firing the store no longer knows of.
async fn change_during_a_load<F, Fut>(
    name: &'static str,
    change: F,
) -> Result<(Setup, u64), CallError>
where
    F: FnOnce(Arc<Runtime>, u64) -> Fut,
    Fut: std::future::Future<Output = Result<(), CallError>>,
{
    let mut setup = setup(name)?;
    let rt = setup.rt.clone();
    let due = rt.schedule_now_ms() + 40_000;
    rt.set_reminder(reminder(name, due)).await?;
    rt.set_reminder(reminder("marker", due + 10_000)).await?;
    setup.store.hooks.armed.store(true, Ordering::SeqCst);
    let read = setup.store.hooks.read.notified();
    // 20 s on: past the horizon's half, so the scheduler loads up to 50 s.
    let advancing = tokio::spawn({
        let rt = rt.clone();
        async move { rt.advance_clock(20 * SECOND).await }
    });
    read.await;
    change(rt.clone(), due).await?;
    if let Some(release) = setup.release.take() {
        let _ = release.send(());
    }
    advancing
        .await
        .map_err(|e| CallError::Internal(e.to_string()))??;
    Ok((setup, due))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_deleted_during_a_load_never_fires() -> Result<(), CallError> {
    let (setup, _) = change_during_a_load("gone", |rt, _| async move {
        let existed = rt
            .delete_reminder(&ActorId::new("box", "b1"), "gone")
            .await?;
        assert!(existed);
        Ok(())
    })
    .await?;
    setup.rt.advance_clock(60 * SECOND).await?;
    let turns = setup.turns.lock().clone();
    let names: Vec<&str> = turns.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["marker"], "{turns:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_moved_within_the_load_fires_as_moved() -> Result<(), CallError> {
    // Moved 8 s later, inside what the held load covers (up to 50 s), and
    // made periodic: the stale version's firing would write its own next
    // due time (first due + period) over the moved one's.
    let (moved_by, period) = (8_000, 100 * SECOND);
    let (setup, due) = change_during_a_load("moved", |rt, due| async move {
        let mut moved = reminder("moved", due + moved_by);
        moved.period = Some(period);
        rt.set_reminder(moved).await?;
        Ok(())
    })
    .await?;
    setup.rt.advance_clock(60 * SECOND).await?;
    let turns = setup.turns.lock().clone();
    let names: Vec<&str> = turns.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["moved", "marker"], "{turns:?}");
    let stored = setup
        .rt
        .get_reminder(&ActorId::new("box", "b1"), "moved")
        .await?
        .map(|info| info.next_due_unix_ms);
    assert_eq!(stored, Some(due + moved_by + 100_000));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_moved_past_the_load_fires_once_at_its_new_time() -> Result<(), CallError> {
    // Moved past the marker and past what the held load covers.
    let moved_by = 15_000;
    let (setup, due) = change_during_a_load("moved", |rt, due| async move {
        rt.set_reminder(reminder("moved", due + moved_by)).await?;
        Ok(())
    })
    .await?;
    setup.rt.advance_clock(60 * SECOND).await?;
    let turns = setup.turns.lock().clone();
    let names: Vec<&str> = turns.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["marker", "moved"], "{turns:?}");
    assert!(turns[1].1 >= due + moved_by, "{turns:?} (first due {due})");
    Ok(())
}
