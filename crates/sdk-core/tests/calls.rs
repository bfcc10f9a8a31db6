//! Client calls against a fake daemon on loopback: invoke and tell keep
//! their idempotency key across retries, and the rarer RPCs go through as
//! bytes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prost::Message;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Code, Request, Response, Status};
use troupe_sdk_core::client::{ActorCalls, CallOptions};
use troupe_sdk_core::connect::{self, ConnectOptions};
use troupe_sdk_core::proto::actor_client_server::{ActorClient, ActorClientServer};
use troupe_sdk_core::proto::*;

/// What the fake answers and what it saw.
#[derive(Default)]
struct Script {
    /// Answer this many invokes and tells UNAVAILABLE before the next one.
    unavailable: usize,
    /// Answer invokes with this code instead (after the UNAVAILABLEs).
    fail_with: Option<Code>,
    /// The idempotency key of every invoke and tell received.
    keys: Vec<String>,
    /// Whether each said its key was new.
    new_keys: Vec<bool>,
    /// How long each asked its answer to be kept (0: the whole retention).
    key_retentions_ms: Vec<u64>,
}

#[derive(Clone, Default)]
struct Fake(Arc<Mutex<Script>>);

impl Fake {
    fn answer(&self, key: &str, new_key: bool, key_retention_ms: u64) -> Result<(), Status> {
        let mut script = self.0.lock().unwrap();
        script.keys.push(key.to_owned());
        script.new_keys.push(new_key);
        script.key_retentions_ms.push(key_retention_ms);
        if script.unavailable > 0 {
            script.unavailable -= 1;
            return Err(Status::unavailable("restarting"));
        }
        match script.fail_with {
            Some(code) => Err(Status::new(code, "as scripted")),
            None => Ok(()),
        }
    }

    fn keys(&self) -> Vec<String> {
        self.0.lock().unwrap().keys.clone()
    }

    fn new_keys(&self) -> Vec<bool> {
        self.0.lock().unwrap().new_keys.clone()
    }

    fn key_retentions_ms(&self) -> Vec<u64> {
        self.0.lock().unwrap().key_retentions_ms.clone()
    }
}

fn unimplemented<T>() -> Result<Response<T>, Status> {
    Err(Status::unimplemented("not in this fake"))
}

#[tonic::async_trait]
impl ActorClient for Fake {
    type WatchStream = tokio_stream::Empty<Result<troupe_proto::v1::ActorEvent, Status>>;

    async fn watch(
        &self,
        _: Request<troupe_proto::v1::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        unimplemented()
    }

    type WatchTypeStream = tokio_stream::Empty<Result<troupe_proto::v1::ActorEvent, Status>>;

    async fn watch_type(
        &self,
        _: Request<troupe_proto::v1::WatchTypeRequest>,
    ) -> Result<Response<Self::WatchTypeStream>, Status> {
        unimplemented()
    }

    async fn invoke(&self, r: Request<InvokeRequest>) -> Result<Response<InvokeResponse>, Status> {
        let r = r.get_ref();
        self.answer(&r.idempotency_key, r.new_key, r.key_retention_ms)?;
        Ok(Response::new(InvokeResponse::default()))
    }
    async fn tell(&self, r: Request<TellRequest>) -> Result<Response<TellResponse>, Status> {
        let r = r.get_ref();
        self.answer(&r.idempotency_key, r.new_key, r.key_retention_ms)?;
        Ok(Response::new(TellResponse::default()))
    }
    async fn get_state(
        &self,
        r: Request<GetStateRequest>,
    ) -> Result<Response<GetStateResponse>, Status> {
        // Echoes the keys asked for and the token, so the test sees both arrive.
        let token = r.metadata().get("authorization").map(|v| v.as_bytes());
        let token = bytes::Bytes::copy_from_slice(token.unwrap_or_default());
        let entries = r.get_ref().keys.iter().map(|k| (k.clone(), token.clone()));
        Ok(Response::new(GetStateResponse {
            entries: entries.collect(),
            active: true,
            expires_unix_ms: Default::default(),
        }))
    }
    async fn set_reminder(
        &self,
        _: Request<SetReminderRequest>,
    ) -> Result<Response<Reminder>, Status> {
        unimplemented()
    }
    async fn get_reminder(&self, r: Request<ReminderRef>) -> Result<Response<Reminder>, Status> {
        Err(Status::not_found(format!(
            "no reminder {:?}",
            r.get_ref().name
        )))
    }
    async fn delete_reminder(
        &self,
        _: Request<ReminderRef>,
    ) -> Result<Response<DeleteResponse>, Status> {
        unimplemented()
    }
    async fn pause_reminder(&self, _: Request<ReminderRef>) -> Result<Response<Reminder>, Status> {
        unimplemented()
    }
    async fn resume_reminder(&self, _: Request<ReminderRef>) -> Result<Response<Reminder>, Status> {
        unimplemented()
    }
    async fn list_reminders(
        &self,
        _: Request<ListRemindersRequest>,
    ) -> Result<Response<ListRemindersResponse>, Status> {
        unimplemented()
    }
    async fn set_alarm(&self, _: Request<SetAlarmRequest>) -> Result<Response<Reminder>, Status> {
        unimplemented()
    }
    async fn get_alarm(&self, _: Request<AlarmRef>) -> Result<Response<Reminder>, Status> {
        unimplemented()
    }
    async fn delete_alarm(&self, _: Request<AlarmRef>) -> Result<Response<DeleteResponse>, Status> {
        unimplemented()
    }
    async fn set_timer(
        &self,
        _: Request<SetTimerRequest>,
    ) -> Result<Response<SetTimerResponse>, Status> {
        unimplemented()
    }
    async fn delete_timer(&self, _: Request<TimerRef>) -> Result<Response<DeleteResponse>, Status> {
        unimplemented()
    }
}

/// The fake on 127.0.0.1:0 with `script`, and calls on a channel to it.
async fn start(script: Script) -> (Fake, ActorCalls) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let options = ConnectOptions {
        address: listener.local_addr().unwrap().to_string(),
        ..Default::default()
    };
    let fake = Fake(Arc::new(Mutex::new(script)));
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ActorClientServer::new(fake.clone()))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let calls = ActorCalls::new(connect::channel(&options).unwrap(), &options);
    (fake, calls)
}

fn call(retry: bool) -> CallOptions {
    CallOptions {
        timeout: Some(Duration::from_secs(10)),
        metadata: vec![("authorization".into(), "Bearer t0k".into())],
        retry,
    }
}

fn invoke_request(key: &str) -> InvokeRequest {
    InvokeRequest {
        method: "incr".into(),
        idempotency_key: key.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn an_invoke_retried_after_unavailable_resends_its_fresh_key() {
    let (fake, calls) = start(Script {
        unavailable: 3,
        ..Default::default()
    })
    .await;
    let mut notes = Vec::new();
    calls
        .invoke(invoke_request(""), call(true), |n| notes.push(n.retry))
        .await
        .unwrap();
    let keys = fake.keys();
    assert_eq!(keys.len(), 4, "three UNAVAILABLEs, then the answer");
    assert!(keys.iter().all(|k| *k == keys[0]), "one key: {keys:?}");
    assert_eq!(uuid_version(&keys[0]), Some('4'));
    assert_eq!(notes, [1, 2, 3]);
    // Only the first attempt says the key is new: a retry's may be recorded.
    assert_eq!(fake.new_keys(), [true, false, false, false]);
    // No one but this call sends the key: its answer need outlast only the
    // call's 10 s of retries, and a minute for the daemon's flush.
    assert_eq!(fake.key_retentions_ms(), [70_000; 4]);
}

/// A language layer that made the key itself (to check a caller's the same
/// way) says so; the core still sends it as new only once.
#[tokio::test]
async fn a_key_the_layer_made_is_new_on_the_first_attempt_only() {
    let (fake, calls) = start(Script {
        unavailable: 1,
        ..Default::default()
    })
    .await;
    let request = TellRequest {
        idempotency_key: "made-by-the-layer".into(),
        new_key: true,
        ..Default::default()
    };
    calls.tell(request, call(true), |_| {}).await.unwrap();
    assert_eq!(fake.new_keys(), [true, false]);
    assert_eq!(fake.key_retentions_ms(), [70_000; 2]);
}

#[tokio::test]
async fn a_tell_keeps_the_callers_key_across_retries() {
    let (fake, calls) = start(Script {
        unavailable: 1,
        ..Default::default()
    })
    .await;
    let request = TellRequest {
        idempotency_key: "mine".into(),
        ..Default::default()
    };
    calls.tell(request, call(true), |_| {}).await.unwrap();
    assert_eq!(fake.keys(), ["mine", "mine"]);
    assert_eq!(
        fake.new_keys(),
        [false, false],
        "a caller's key may be reused"
    );
    assert_eq!(
        fake.key_retentions_ms(),
        [0, 0],
        "so its answer keeps the daemon's whole retention"
    );
}

#[tokio::test]
async fn another_code_is_not_retried_and_retry_false_sends_once() {
    let script = Script {
        fail_with: Some(Code::NotFound),
        ..Default::default()
    };
    let (fake, calls) = start(script).await;
    let err = calls
        .invoke(invoke_request("k"), call(true), |_| {})
        .await
        .unwrap_err();
    assert_eq!((err.status.code, err.retries), (Code::NotFound, 0));
    assert_eq!(fake.keys().len(), 1);

    let (fake, calls) = start(Script {
        unavailable: 5,
        ..Default::default()
    })
    .await;
    let err = calls
        .invoke(invoke_request("k"), call(false), |_| {})
        .await
        .unwrap_err();
    assert_eq!((err.status.code, err.retries), (Code::Unavailable, 0));
    assert_eq!(fake.keys().len(), 1);
}

#[tokio::test]
async fn retries_end_at_the_deadline_saying_why() {
    let (fake, calls) = start(Script {
        unavailable: usize::MAX,
        ..Default::default()
    })
    .await;
    let mut options = call(true);
    options.timeout = Some(Duration::from_millis(400));
    let err = calls
        .invoke(invoke_request(""), options, |_| {})
        .await
        .unwrap_err();
    assert_eq!(err.status.code, Code::Unavailable);
    assert_eq!(err.gave_up, Some(troupe_sdk_core::retry::GaveUp::Deadline));
    assert_eq!(err.last_refusal.as_deref(), Some("UNAVAILABLE: restarting"));
    assert!(err.retries >= 2, "{err:?}");
    assert_eq!(fake.keys().len() as u32, err.retries + 1);
}

#[tokio::test]
async fn the_calls_on_one_channel_share_a_retry_budget() {
    use troupe_sdk_core::retry::GaveUp;
    let (fake, calls) = start(Script {
        unavailable: usize::MAX,
        ..Default::default()
    })
    .await;
    // A budget of 10 tokens (retries while more than 5 are left): 4
    // retries, then the budget ends them well before the 10 s deadline.
    let calls = calls
        .with_retry_budget(Some(troupe_sdk_core::retry::BudgetOptions {
            max_tokens: 10,
            token_ratio: 0.1,
        }))
        .unwrap();
    let err = calls
        .invoke(invoke_request(""), call(true), |_| {})
        .await
        .unwrap_err();
    assert_eq!((err.retries, err.gave_up), (4, Some(GaveUp::Budget)));
    // A clone spends the same budget: its call is sent once.
    let err = calls
        .clone()
        .tell(TellRequest::default(), call(true), |_| {})
        .await
        .unwrap_err();
    assert_eq!((err.retries, err.gave_up), (0, Some(GaveUp::Budget)));
    assert_eq!(fake.keys().len(), 6);
    // Without one, a call retries until its deadline.
    let calls = calls.with_retry_budget(None).unwrap();
    assert!(calls.retry_budget().is_none());
    let mut options = call(true);
    options.timeout = Some(Duration::from_millis(400));
    let err = calls
        .invoke(invoke_request(""), options, |_| {})
        .await
        .unwrap_err();
    assert_eq!(err.gave_up, Some(GaveUp::Deadline));
    assert!(err.retries >= 2, "{err:?}");
}

#[tokio::test]
async fn a_rarer_rpc_goes_through_as_bytes_with_its_metadata() {
    let (_, calls) = start(Script::default()).await;
    let request = GetStateRequest {
        actor: None,
        keys: vec!["count".into()],
    };
    let answer = calls
        .unary(
            "/troupe.v1.ActorClient/GetState",
            request.encode_to_vec().into(),
            call(false),
        )
        .await
        .unwrap();
    let answer = GetStateResponse::decode(answer).unwrap();
    assert_eq!(&answer.entries["count"][..], b"Bearer t0k");
    assert!(answer.active);
}

#[tokio::test]
async fn a_rarer_rpc_maps_its_status_and_only_client_methods_are_sent() {
    let (_, calls) = start(Script::default()).await;
    let request = ReminderRef {
        actor: None,
        name: "r".into(),
    };
    let err = calls
        .unary(
            "/troupe.v1.ActorClient/GetReminder",
            request.encode_to_vec().into(),
            call(false),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, Code::NotFound);
    assert_eq!(err.message, "no reminder \"r\"");

    let refused = calls
        .unary("/troupe.v1.Admin/Status", Vec::new().into(), call(false))
        .await
        .unwrap_err();
    assert_eq!(refused.code, Code::Unimplemented);
}

fn uuid_version(key: &str) -> Option<char> {
    // xxxxxxxx-xxxx-Vxxx-...: the version digit.
    (key.len() == 36)
        .then(|| key.chars().nth(14))
        .flatten()
        .filter(|_| key.matches('-').count() == 4)
}
