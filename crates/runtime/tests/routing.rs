//! The runtime in a cluster, in process: calls go to their owner, wait out
//! a table change, stop when the lease lapses; hand-off flushes, and
//! fencing writes what it held only under epochs the store can check.
//! Placement and the forwarder are scripted here.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use troupe_placement::{Owner, OwnerEpoch, Placement};
use troupe_runtime::{
    ActorId, ActorRequest, ActorResponse, BoxFuture, Call, CallError, FnHost, Forwarder, Payload,
    Peer, RequestContext, Runtime, RuntimeConfig, StateChange, TurnKind, TurnOutcome, TypeSpec,
    Unavailable,
};
use troupe_storage::{MemoryReminders, MemoryStore, StateStore};

/// Owners set by the test; `changes` ticks on every change.
#[derive(Debug)]
struct Scripted {
    owner: Mutex<Owner>,
    serving: AtomicBool,
    /// The epoch a local actor is owned under; 0: none (unfenced).
    epoch: AtomicU64,
    changes: watch::Sender<u64>,
}

impl Scripted {
    fn new(owner: Owner) -> Arc<Self> {
        Arc::new(Self {
            owner: Mutex::new(owner),
            serving: AtomicBool::new(true),
            epoch: AtomicU64::new(0),
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

    fn epoch(&self, _ty: &str, _id: &str) -> OwnerEpoch {
        match (self.epoch.load(Ordering::SeqCst), &*self.owner.lock()) {
            (0, _) => OwnerEpoch::Unfenced,
            (epoch, Owner::Local) => OwnerEpoch::Owned(epoch),
            _ => OwnerEpoch::NotOwned,
        }
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
    /// Durable tells forwarded, by method.
    durable: Mutex<Vec<String>>,
}

impl Forwarder for Recorder {
    fn forward(
        &self,
        owner: &Peer,
        request: ActorRequest,
        context: RequestContext,
    ) -> BoxFuture<Result<ActorResponse, CallError>> {
        let address = owner.address.clone();
        self.sent
            .lock()
            .push((address.clone(), request.actor().to_string(), context.hops));
        let answer = match request {
            ActorRequest::Invoke(_) => {
                ActorResponse::Payload(Payload::json(format!("\"from {address}\"")))
            }
            ActorRequest::Tell(_) => {
                self.told.notify_one();
                ActorResponse::Accepted
            }
            ActorRequest::TellDurable(call) => {
                self.durable.lock().push(call.method.to_string());
                ActorResponse::Accepted
            }
            ActorRequest::GetState { .. } => ActorResponse::State {
                entries: vec![("from".into(), address.into())],
                active: true,
                expires: Box::default(),
            },
            ActorRequest::DeleteTimer { .. } => ActorResponse::Deleted(true),
            _ => ActorResponse::Reminder(None),
        };
        Box::pin(async move { Ok(answer) })
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
        Err(CallError::Unavailable(Unavailable::TooManyHops {
            hops: 2,
            ..
        }))
    ));
    let sent = recorder.sent.lock().clone();
    assert_eq!(sent[0], ("127.0.0.1:9".into(), "t/x".into(), 1));
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(rt.list_actors(None, None, 10).len(), 0, "nothing ran here");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_tells_for_remote_actors_are_acknowledged_by_the_owner() -> Result<(), CallError> {
    let placement = Scripted::new(remote());
    let (rt, store) = setup(placement)?;
    // Without a forwarder nobody can store it: refused, naming the owner,
    // never acknowledged.
    let refused = rt.tell_durable(call("d")).await;
    assert!(
        matches!(&refused, Err(CallError::Unavailable(Unavailable::NotOwner { node, .. })) if node == "b"),
        "{refused:?}"
    );
    let recorder = Arc::new(Recorder::default());
    rt.set_forwarder(recorder.clone());
    // Forwarded as a durable tell, and awaited: the answer is the owner's.
    rt.tell_durable(call("d")).await?;
    assert_eq!(recorder.durable.lock().clone(), ["m"]);
    assert_eq!(
        recorder.sent.lock().clone(),
        [("127.0.0.1:9".into(), "t/d".into(), 1)]
    );
    // Nothing was stored here: the owner's inbox holds it.
    assert!(store
        .inbox_actors(None, 10)
        .await
        .map_err(|e| CallError::Internal(e.to_string()))?
        .is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_request_takes_the_same_path_to_the_owner() -> Result<(), CallError> {
    let placement = Scripted::new(remote());
    let (rt, _) = setup(placement)?;
    let recorder = Arc::new(Recorder::default());
    rt.set_forwarder(recorder.clone());
    let actor = ActorId::new("t", "s");
    let (state, active) = rt.get_state(&actor, &[]).await?;
    assert_eq!(state, vec![("from".to_owned(), "127.0.0.1:9".into())]);
    assert!(active);
    assert_eq!(rt.get_alarm(&actor).await?, None);
    assert!(rt.delete_timer(&actor, "tick").await?);
    let hops: Vec<u32> = recorder.sent.lock().iter().map(|s| s.2).collect();
    assert_eq!(hops, [1, 1, 1], "each forwarded once, as a first hop");
    // Bad names are refused where they arrive, before any forward.
    let refused = rt.get_state(&ActorId::new("t", ""), &[]).await;
    assert!(matches!(refused, Err(CallError::InvalidArgument(_))));
    // A reminder firing is never forwarded: the owner fires its reminders.
    let firing = Call {
        kind: TurnKind::Reminder,
        ..call("s")
    };
    assert!(matches!(
        rt.invoke(firing).await,
        Err(CallError::Unavailable(Unavailable::NotOwner { .. }))
    ));
    assert_eq!(recorder.sent.lock().len(), 3);
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

/// How many state keys the store holds for actor `id` of type `t`.
async fn stored(store: &MemoryStore, id: &str) -> Result<usize, CallError> {
    store
        .load("t", id)
        .await
        .map(|state| state.len())
        .map_err(|e| CallError::Internal(e.to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_off_flushes_and_fencing_without_epochs_writes_nothing() -> Result<(), CallError> {
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
    assert_eq!(stored(&store, "go").await?, 1, "handed-off state is stored");
    assert_eq!(
        stored(&store, "keep").await?,
        0,
        "kept actor still dirty in memory (write-behind)"
    );

    // The lease lapses: nothing is served or written any more.
    placement.serving.store(false, Ordering::SeqCst);
    rt.fence(troupe_runtime::clock::unix_now_ms()).await;
    assert!(rt.list_actors(None, None, 10).is_empty());
    assert!(matches!(
        rt.invoke(call("keep")).await,
        Err(CallError::Unavailable(Unavailable::LeaseLapsed))
    ));
    rt.flush().await.ok();
    assert_eq!(
        stored(&store, "keep").await?,
        0,
        "a fenced daemon must not write"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_writes_what_no_newer_owner_claimed_under_its_epoch() -> Result<(), CallError> {
    let placement = Scripted::new(Owner::Local);
    placement.epoch.store(7, Ordering::SeqCst);
    let (rt, store) = setup(placement.clone())?;
    rt.invoke(call("kept")).await?;
    rt.invoke(call("taken")).await?;
    assert_eq!(stored(&store, "kept").await?, 0, "write-behind: not yet");
    // While this daemon was cut off, another owned "taken" under table 8
    // and claimed it; nobody took "kept".
    store
        .claim("t", "taken", 8)
        .await
        .map_err(|e| CallError::Internal(e.to_string()))?;

    placement.serving.store(false, Ordering::SeqCst);
    rt.fence(troupe_runtime::clock::unix_now_ms()).await;
    assert!(rt.list_actors(None, None, 10).is_empty());
    assert_eq!(
        stored(&store, "kept").await?,
        1,
        "the change acknowledged before the lapse is kept"
    );
    assert_eq!(
        stored(&store, "taken").await?,
        0,
        "the store refuses the write under the older epoch"
    );
    assert!(matches!(
        rt.invoke(call("kept")).await,
        Err(CallError::Unavailable(Unavailable::LeaseLapsed))
    ));
    Ok(())
}
