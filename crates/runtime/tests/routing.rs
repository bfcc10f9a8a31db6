//! The runtime in a cluster, in process: calls go to their owner, wait out
//! a table change, stop when the lease lapses; hand-off flushes and fencing
//! drops without writing. Placement and the forwarder are scripted here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use troupe_placement::{Owner, Placement};
use troupe_runtime::{
    ActorId, BoxFuture, Call, CallError, FnHost, Forwarder, Payload, Runtime, RuntimeConfig,
    StateChange, TurnOutcome, TypeSpec, Unavailable,
};
use troupe_storage::{MemoryReminders, MemoryStore, StateStore};

/// Owners set by the test; `changes` ticks on every change.
#[derive(Debug)]
struct Scripted {
    owner: Mutex<Owner>,
    serving: AtomicBool,
    changes: watch::Sender<u64>,
}

impl Scripted {
    fn new(owner: Owner) -> Arc<Self> {
        Arc::new(Self {
            owner: Mutex::new(owner),
            serving: AtomicBool::new(true),
            changes: watch::Sender::new(1),
        })
    }

    fn set(&self, owner: Owner) {
        *self.owner.lock() = owner;
        self.changes.send_modify(|v| *v += 1);
    }
}

impl Placement for Scripted {
    fn owner(&self, _ty: &str, _id: &str) -> Owner {
        self.owner.lock().clone()
    }

    fn table_version(&self) -> u64 {
        *self.changes.borrow()
    }

    fn may_serve(&self) -> bool {
        self.serving.load(Ordering::SeqCst)
    }

    fn changes(&self) -> Option<watch::Receiver<u64>> {
        Some(self.changes.subscribe())
    }
}

/// Answers every forwarded call with where it was sent.
#[derive(Debug, Default)]
struct Recorder {
    sent: Mutex<Vec<(String, String, u32)>>,
    told: tokio::sync::Notify,
}

impl Forwarder for Recorder {
    fn invoke(
        &self,
        address: &str,
        call: Call,
        hops: u32,
    ) -> BoxFuture<Result<Payload, CallError>> {
        self.sent
            .lock()
            .push((address.to_owned(), call.actor.to_string(), hops));
        let answer = format!("\"from {address}\"");
        Box::pin(async move { Ok(Payload::json(answer)) })
    }

    fn tell(&self, address: &str, call: Call, hops: u32) -> BoxFuture<Result<(), CallError>> {
        self.sent
            .lock()
            .push((address.to_owned(), call.actor.to_string(), hops));
        self.told.notify_one();
        Box::pin(async { Ok(()) })
    }
}

fn setup(placement: Arc<Scripted>) -> Result<(Runtime, Arc<MemoryStore>), CallError> {
    let store = Arc::new(MemoryStore::new());
    let rt = Runtime::create(
        RuntimeConfig {
            // Flushes happen on hand-off, not on a timer, in these tests.
            flush_interval: Duration::from_secs(3600),
            ..RuntimeConfig::default()
        },
        store.clone(),
        Arc::new(MemoryReminders::new()),
        placement,
    )
    .map_err(|e| CallError::Internal(e.to_string()))?;
    rt.start();
    let host = FnHost::new("app", |_actor: &ActorId, req| TurnOutcome {
        result: Ok(Payload::json("\"local\"")),
        changes: vec![StateChange::set("last", req.payload.data.clone())],
    });
    rt.register_host(
        Arc::new(host),
        vec![TypeSpec {
            name: "t".into(),
            ..TypeSpec::default()
        }],
    )?;
    Ok((rt, store))
}

fn call(id: &str) -> Call {
    Call::new(ActorId::new("t", id), "m", Payload::json("1"))
}

fn remote() -> Owner {
    Owner::Remote {
        node: "b".into(),
        address: "127.0.0.1:9".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_for_remote_actors_are_forwarded_once() -> Result<(), CallError> {
    let placement = Scripted::new(remote());
    let (rt, _) = setup(placement)?;
    // Without a forwarder the owner is named.
    let refused = rt.invoke(call("x")).await;
    assert!(
        matches!(&refused, Err(CallError::Unavailable(Unavailable::NotOwner { node, .. })) if node == "b"),
        "{refused:?}"
    );
    let recorder = Arc::new(Recorder::default());
    rt.set_forwarder(recorder.clone());
    let answer = rt.invoke(call("x")).await?;
    assert_eq!(&answer.data[..], b"\"from 127.0.0.1:9\"");
    rt.tell(call("y"))?;
    // A one-way call is forwarded in the background.
    tokio::time::timeout(Duration::from_secs(5), recorder.told.notified())
        .await
        .map_err(|_| CallError::Internal("the tell was never forwarded".into()))?;
    // A call already forwarded twice is not forwarded again.
    let mut bounced = call("z");
    bounced.extra = Some(Box::new(troupe_runtime::CallExtra {
        hops: 2,
        ..Default::default()
    }));
    assert!(matches!(
        rt.invoke(bounced).await,
        Err(CallError::Unavailable(_))
    ));
    let sent = recorder.sent.lock().clone();
    assert_eq!(sent[0], ("127.0.0.1:9".into(), "t/x".into(), 1));
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(rt.list_actors(None, None, 10).len(), 0, "nothing ran here");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moving_actor_waits_for_the_table_then_runs_here() -> Result<(), CallError> {
    let placement = Scripted::new(Owner::Moving);
    let (rt, _) = setup(placement.clone())?;
    let waiting = tokio::spawn({
        let rt = rt.clone();
        async move { rt.invoke(call("m")).await }
    });
    // The call waits while the actor moves: nothing activates anywhere.
    tokio::task::yield_now().await;
    assert!(rt.list_actors(None, None, 10).is_empty());
    placement.set(Owner::Local);
    let answer = waiting
        .await
        .map_err(|e| CallError::Internal(e.to_string()))??;
    assert_eq!(&answer.data[..], b"\"local\"");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_off_flushes_and_fencing_writes_nothing() -> Result<(), CallError> {
    let placement = Scripted::new(Owner::Local);
    let (rt, store) = setup(placement.clone())?;
    rt.invoke(call("keep")).await?;
    rt.invoke(call("go")).await?;
    let moved = rt.hand_off(|actor| &*actor.id == "keep").await?;
    assert_eq!(moved, 1);
    let ids: Vec<String> = rt
        .list_actors(None, None, 10)
        .into_iter()
        .map(|a| a.actor.id.to_string())
        .collect();
    assert_eq!(ids, ["keep"]);
    assert_eq!(
        store
            .load("t", "go")
            .await
            .map_err(|e| CallError::Internal(e.to_string()))?
            .len(),
        1,
        "handed-off state is stored"
    );
    assert!(
        store
            .load("t", "keep")
            .await
            .map_err(|e| CallError::Internal(e.to_string()))?
            .is_empty(),
        "kept actor still dirty in memory (write-behind)"
    );

    // The lease lapses: nothing is served or written any more.
    placement.serving.store(false, Ordering::SeqCst);
    rt.fence();
    assert!(rt.list_actors(None, None, 10).is_empty());
    assert!(matches!(
        rt.invoke(call("keep")).await,
        Err(CallError::Unavailable(Unavailable::LeaseLapsed))
    ));
    rt.flush().await.ok();
    assert!(
        store
            .load("t", "keep")
            .await
            .map_err(|e| CallError::Internal(e.to_string()))?
            .is_empty(),
        "a fenced daemon must not write"
    );
    Ok(())
}
