//! Helpers the runtime's integration tests share.

// Each test file uses some of them.
#![allow(dead_code)]

use std::future::Future;
use std::pin::Pin;

use std::sync::Arc;

use async_trait::async_trait;
use troupe_placement::SingleNode;
use troupe_runtime::{
    ActorId, Call, CallError, FnHost, Payload, ReminderSpec, RetryPolicy, Runtime, RuntimeConfig,
    StateChange, TurnOutcome, TurnRequest, TypeSpec,
};
use troupe_storage::{
    ActorWrite, Epoch, FencedActor, MemoryReminders, MemoryStore, ReminderStore, StateStore,
    StoreError, StoredState,
};

/// What runs before each batch: it may fail it, hang it, or change the
/// store first (a claim by "another daemon").
pub type BeforeWrite = Box<
    dyn for<'a> Fn(
            &'a MemoryStore,
        ) -> Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + 'a>>
        + Send
        + Sync,
>;

/// A started single-node runtime on `store`, its reminders in memory.
pub fn single_node(
    config: RuntimeConfig,
    store: Arc<dyn StateStore>,
) -> Result<Runtime, CallError> {
    let rt = Runtime::create(
        config,
        store,
        Arc::new(MemoryReminders::new()),
        Arc::new(SingleNode),
    )
    .map_err(|e| CallError::Internal(e.to_string()))?;
    rt.start();
    Ok(rt)
}

/// A started single-node runtime on its test clock, state in memory and
/// reminders in `reminders` (a hooked store, say).
pub fn on_test_clock(reminders: Arc<dyn ReminderStore>) -> Result<Arc<Runtime>, CallError> {
    on_test_clock_over(Arc::new(MemoryStore::new()), reminders).map(Arc::new)
}

/// A started single-node runtime on its test clock over `store` and
/// `reminders` (shared with a runtime before it, say, as a restart's).
pub fn on_test_clock_over(
    store: Arc<dyn StateStore>,
    reminders: Arc<dyn ReminderStore>,
) -> Result<Runtime, CallError> {
    let rt = Runtime::create(
        RuntimeConfig {
            test_clock: true,
            ..RuntimeConfig::default()
        },
        store,
        reminders,
        Arc::new(SingleNode),
    )
    .map_err(|e| CallError::Internal(e.to_string()))?;
    rt.start();
    Ok(rt)
}

/// [`single_node`] hosting actor type `t`, whose turns `turn` answers.
pub fn runtime_hosting_t<F>(
    config: RuntimeConfig,
    store: Arc<HookedStore>,
    turn: F,
) -> Result<Runtime, CallError>
where
    F: Fn(&ActorId, TurnRequest) -> TurnOutcome + Send + Sync + 'static,
{
    let rt = single_node(config, store)?;
    rt.register_host(
        Arc::new(FnHost::new("test", turn)),
        vec![TypeSpec {
            name: "t".into(),
            ..TypeSpec::default()
        }],
    )?;
    Ok(rt)
}

/// Holds a purge at the store: `reached` is told when one arrives there,
/// and it goes on once `release` is.
#[derive(Clone, Default)]
pub struct PurgePause {
    pub reached: Arc<tokio::sync::Notify>,
    pub release: Arc<tokio::sync::Notify>,
}

/// A [`MemoryStore`] whose batches go through a hook first.
pub struct HookedStore {
    pub inner: MemoryStore,
    before: BeforeWrite,
    purge_pause: Option<PurgePause>,
    /// Held at the next state read (`load`) once armed; it disarms as it
    /// holds one.
    pub load_pause: Option<(PurgePause, Arc<std::sync::atomic::AtomicBool>)>,
    /// Every call record a batch carried, failed or not: its key and
    /// whether the store was told it is new (`CallRecord::new_key`).
    pub records_sent: parking_lot::Mutex<Vec<(String, bool)>>,
}

impl HookedStore {
    pub fn new(before: BeforeWrite) -> Self {
        Self {
            inner: MemoryStore::new(),
            before,
            purge_pause: None,
            load_pause: None,
            records_sent: parking_lot::Mutex::default(),
        }
    }

    /// Holds each purge at `pause` before the store removes anything.
    pub fn pausing_purges(self, pause: PurgePause) -> Self {
        Self {
            purge_pause: Some(pause),
            ..self
        }
    }
}

impl std::fmt::Debug for HookedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookedStore").finish_non_exhaustive()
    }
}

#[async_trait]
impl StateStore for HookedStore {
    fn describe(&self) -> String {
        "hooked memory".into()
    }

    async fn load(&self, actor_type: &str, actor_id: &str) -> Result<StoredState, StoreError> {
        if let Some((pause, armed)) = &self.load_pause {
            if armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
                pause.reached.notify_one();
                pause.release.notified().await;
            }
        }
        self.inner.load(actor_type, actor_id).await
    }

    async fn claim(
        &self,
        actor_type: &str,
        actor_id: &str,
        epoch: Epoch,
    ) -> Result<StoredState, StoreError> {
        self.inner.claim(actor_type, actor_id, epoch).await
    }

    async fn write_batch(&self, batch: &[ActorWrite]) -> Result<Vec<FencedActor>, StoreError> {
        self.records_sent.lock().extend(
            batch
                .iter()
                .flat_map(|w| &w.records)
                .map(|r| (r.key.clone(), r.new_key)),
        );
        (self.before)(&self.inner).await?;
        self.inner.write_batch(batch).await
    }

    async fn list_actors(
        &self,
        actor_type: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        self.inner.list_actors(actor_type, after, limit).await
    }

    async fn load_inbox(
        &self,
        actor_type: &str,
        actor_id: &str,
    ) -> Result<Vec<troupe_storage::InboxEntry>, StoreError> {
        self.inner.load_inbox(actor_type, actor_id).await
    }

    async fn inbox_actors(
        &self,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        self.inner.inbox_actors(after, limit).await
    }

    async fn stored_actors(
        &self,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        self.inner.stored_actors(after, limit).await
    }

    async fn list_dead_letters(
        &self,
        actor_type: Option<&str>,
        after: Option<&troupe_storage::DeadLetterKey>,
        limit: usize,
    ) -> Result<Vec<troupe_storage::DeadLetter>, StoreError> {
        self.inner.list_dead_letters(actor_type, after, limit).await
    }

    async fn get_dead_letter(
        &self,
        key: &troupe_storage::DeadLetterKey,
    ) -> Result<Option<troupe_storage::DeadLetter>, StoreError> {
        self.inner.get_dead_letter(key).await
    }

    async fn remove_dead_letter(
        &self,
        key: &troupe_storage::DeadLetterKey,
    ) -> Result<bool, StoreError> {
        self.inner.remove_dead_letter(key).await
    }

    async fn load_record_keys(
        &self,
        actor_type: &str,
        actor_id: &str,
        since_unix_ms: u64,
        limit: usize,
    ) -> Result<Vec<troupe_storage::RecordedKey>, StoreError> {
        self.inner
            .load_record_keys(actor_type, actor_id, since_unix_ms, limit)
            .await
    }

    async fn load_record(
        &self,
        actor_type: &str,
        actor_id: &str,
        key: &str,
    ) -> Result<Option<troupe_storage::CallRecord>, StoreError> {
        self.inner.load_record(actor_type, actor_id, key).await
    }

    async fn purge_actor(
        &self,
        actor_type: &str,
        actor_id: &str,
        epoch: Option<Epoch>,
    ) -> Result<troupe_storage::PurgedActor, StoreError> {
        if let Some(pause) = &self.purge_pause {
            pause.reached.notify_one();
            pause.release.notified().await;
        }
        self.inner.purge_actor(actor_type, actor_id, epoch).await
    }

    async fn expire_records(&self, before_unix_ms: u64, limit: usize) -> Result<u64, StoreError> {
        self.inner.expire_records(before_unix_ms, limit).await
    }
}

/// A reminder of `actor` named `name` that fires once, at `due_unix_ms`.
pub fn one_shot_reminder(actor: ActorId, name: &str, due_unix_ms: u64) -> ReminderSpec {
    ReminderSpec::once(
        actor,
        name.into(),
        due_unix_ms,
        Payload::json("null"),
        RetryPolicy::default(),
    )
}

/// Until `check` gives a value; at most 10 s.
pub async fn poll<T, F, Fut>(mut check: F) -> Result<T, CallError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, CallError>>,
{
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            if let Some(found) = check().await? {
                return Ok(found);
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    })
    .await
    .map_err(|_| CallError::Internal("what was polled for did not come within 10 s".into()))?
}

/// Until `count` turns wait in `actor`'s mailbox.
pub async fn until_waiting(rt: &Runtime, actor: &ActorId, count: usize) -> Result<(), CallError> {
    poll(|| async {
        let details = rt.describe_actor(actor).await?;
        Ok(details.filter(|d| d.mailbox_depth == count).map(|_| ()))
    })
    .await
    .map_err(|_| CallError::Internal(format!("{count} turns never waited in {actor}'s mailbox")))
}

/// A counter in key "n"; method `mark` also sets key "marked".
pub fn marking_counter(_: &ActorId, turn: TurnRequest) -> TurnOutcome {
    let n: u64 = turn
        .state
        .get("n")
        .and_then(|b| std::str::from_utf8(b).ok()?.parse().ok())
        .unwrap_or(0);
    let next = (n + 1).to_string();
    let mut changes = vec![StateChange::set("n", next.clone())];
    if &*turn.name == "mark" {
        changes.push(StateChange::set("marked", "yes"));
    }
    TurnOutcome {
        result: Ok(Payload::json(next)),
        changes,
    }
}

/// Calls `method` of `actor` without arguments, in a task of its own.
pub fn spawn_call(
    rt: &Runtime,
    actor: &ActorId,
    method: &str,
) -> tokio::task::JoinHandle<Result<Payload, CallError>> {
    let (rt, call) = (
        rt.clone(),
        Call::new(actor.clone(), method, Payload::default()),
    );
    tokio::spawn(async move { rt.invoke(call).await })
}
