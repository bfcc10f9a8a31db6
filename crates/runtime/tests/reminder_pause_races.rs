//! A pause reads the reminder, then writes it paused. A `set` or `delete`
//! of the same reminder between that read and that write must not be lost:
//! each test holds the pause's read open, changes the reminder, then lets
//! the pause go on.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};
use troupe_runtime::{ActorId, CallError, Payload, Runtime};
use troupe_storage::conformance::{HookedReminders, ReminderHooks};
use troupe_storage::{ReminderKey, ReminderRecord};

/// Holds the next single-reminder read, until released.
#[derive(Debug, Default)]
struct HeldRead {
    armed: AtomicBool,
    /// Told when the held read has read.
    read: Notify,
    release: Mutex<Option<oneshot::Receiver<()>>>,
}

#[async_trait]
impl ReminderHooks for HeldRead {
    async fn read_one(&self, _key: &ReminderKey, _record: Option<&ReminderRecord>) {
        if self.armed.swap(false, Ordering::SeqCst) {
            let release = self.release.lock().take();
            self.read.notify_one();
            if let Some(release) = release {
                let _ = release.await;
            }
        }
    }
}

fn job() -> ActorId {
    ActorId::new("box", "b1")
}

/// A runtime whose store holds the next reminder read once armed, the
/// reminder "job" set with `data`, and the sender that releases the read.
async fn setup(
    data: &'static str,
) -> Result<
    (
        Arc<Runtime>,
        Arc<HookedReminders<HeldRead>>,
        oneshot::Sender<()>,
    ),
    CallError,
> {
    let (release, released) = oneshot::channel();
    let store = Arc::new(HookedReminders::new(HeldRead {
        release: Mutex::new(Some(released)),
        ..HeldRead::default()
    }));
    let rt = common::on_test_clock(store.clone())?;
    rt.set_reminder(job_with(&rt, data, 3_600_000)).await?;
    Ok((rt, store, release))
}

fn job_with(rt: &Runtime, data: &'static str, due_in_ms: u64) -> troupe_runtime::ReminderSpec {
    let mut spec = common::one_shot_reminder(job(), "job", rt.schedule_now_ms() + due_in_ms);
    spec.payload = Payload::json(data);
    spec
}

/// Pauses "job" while `change` runs between the pause's read and its write.
async fn pause_around<F, Fut>(
    rt: &Arc<Runtime>,
    store: &HookedReminders<HeldRead>,
    release: oneshot::Sender<()>,
    change: F,
) -> Result<Option<troupe_runtime::ReminderInfo>, CallError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<(), CallError>>,
{
    store.hooks.armed.store(true, Ordering::SeqCst);
    let read = store.hooks.read.notified();
    let pausing = tokio::spawn({
        let rt = rt.clone();
        async move { rt.pause_reminder(&job(), "job").await }
    });
    read.await;
    change().await?;
    let _ = release.send(());
    pausing
        .await
        .map_err(|e| CallError::Internal(e.to_string()))?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_between_the_pauses_read_and_write_is_kept_and_paused() -> Result<(), CallError> {
    let (rt, store, release) = setup("\"old\"").await?;
    let new_job = job_with(&rt, "\"new\"", 7_200_000);
    let new_due = new_job.due_unix_ms;
    let paused = pause_around(&rt, &store, release, || {
        let rt = rt.clone();
        async move { rt.set_reminder(new_job).await.map(|_| ()) }
    })
    .await?;
    let stored = rt.get_reminder(&job(), "job").await?;
    for info in [paused, stored] {
        let Some(info) = info else {
            panic!("the paused reminder is gone");
        };
        assert!(info.paused, "{info:?}");
        assert_eq!(info.payload, Payload::json("\"new\""), "the set was lost");
        assert_eq!(info.next_due_unix_ms, new_due);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_between_the_pauses_read_and_write_stays_deleted() -> Result<(), CallError> {
    let (rt, store, release) = setup("\"old\"").await?;
    let paused = pause_around(&rt, &store, release, || {
        let rt = rt.clone();
        async move { rt.delete_reminder(&job(), "job").await.map(|_| ()) }
    })
    .await?;
    assert_eq!(paused, None, "the pause found a deleted reminder");
    assert_eq!(rt.get_reminder(&job(), "job").await?, None, "resurrected");
    Ok(())
}
