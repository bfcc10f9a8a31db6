//! The core against a fake daemon on loopback, over the real protocol: the
//! app stream's registration, pushes and answers, and a call's deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::pin::Pin;
use std::time::Duration;

use futures::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{TcpListenerStream, UnboundedReceiverStream};
use tonic::{Code, Request, Response, Status, Streaming};
use troupe_sdk_core::app::{self, AppEvent};
use troupe_sdk_core::client::{ActorCalls, CallOptions};
use troupe_sdk_core::connect::{self, ConnectOptions};
use troupe_sdk_core::proto::actor_client_server::{ActorClient, ActorClientServer};
use troupe_sdk_core::proto::app_host_server::{AppHost, AppHostServer};
use troupe_sdk_core::proto::*;
use troupe_sdk_core::AttachError;

/// What the fake daemon does with an app stream.
#[derive(Clone, Copy)]
enum Daemon {
    /// Registers the app, pushes two turns in one batch, collects two
    /// answers, then closes the stream cleanly.
    Serve,
    /// Refuses the app before reading anything, as for a missing token.
    Refuse,
}

#[derive(Clone)]
struct Fake {
    mode: Daemon,
    /// The call ids of the answers the app sent, in order.
    answers: mpsc::UnboundedSender<u64>,
}

type DaemonStream = Pin<Box<dyn Stream<Item = Result<DaemonMessage, Status>> + Send>>;

fn turn(call_id: u64) -> DaemonMessage {
    let turn = Turn {
        call_id,
        name: "incr".into(),
        ..Default::default()
    };
    DaemonMessage {
        kind: Some(daemon_message::Kind::Turn(turn)),
    }
}

fn answer_ids(msg: AppMessage) -> Vec<u64> {
    match msg.kind {
        Some(app_message::Kind::TurnResult(r)) => vec![r.call_id],
        Some(app_message::Kind::Batch(b)) => b.messages.into_iter().flat_map(answer_ids).collect(),
        _ => Vec::new(),
    }
}

#[tonic::async_trait]
impl AppHost for Fake {
    type AttachStream = DaemonStream;

    async fn attach(
        &self,
        request: Request<Streaming<AppMessage>>,
    ) -> Result<Response<DaemonStream>, Status> {
        if let Daemon::Refuse = self.mode {
            return Err(Status::unauthenticated("this daemon wants an app token"));
        }
        let mut incoming = request.into_inner();
        let first = incoming.message().await?.and_then(|m| m.kind);
        let Some(app_message::Kind::Register(register)) = first else {
            return Err(Status::invalid_argument("Register must come first"));
        };
        assert_eq!(register.app_name, "wire-test");
        let (tx, rx) = mpsc::unbounded_channel();
        let registered = Registered {
            accepts_batches: true,
            api_version: 1,
            ..Default::default()
        };
        let _ = tx.send(Ok(DaemonMessage {
            kind: Some(daemon_message::Kind::Registered(registered)),
        }));
        let batch = DaemonBatch {
            messages: vec![turn(1), turn(2)],
        };
        let _ = tx.send(Ok(DaemonMessage {
            kind: Some(daemon_message::Kind::Batch(batch)),
        }));
        let answers = self.answers.clone();
        tokio::spawn(async move {
            let mut seen = 0;
            while seen < 2 {
                let Ok(Some(msg)) = incoming.message().await else {
                    return;
                };
                for id in answer_ids(msg) {
                    seen += 1;
                    let _ = answers.send(id);
                }
            }
            // Dropping the sender ends the response stream with OK.
            drop(tx);
        });
        Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
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

    async fn invoke(
        &self,
        request: Request<InvokeRequest>,
    ) -> Result<Response<InvokeResponse>, Status> {
        if request.get_ref().method == "hang" {
            std::future::pending::<()>().await;
        }
        // Echoes the token the call carried, so the test sees its metadata arrive.
        let token = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        let data = token.unwrap_or_default().as_bytes().to_vec().into();
        Ok(Response::new(InvokeResponse {
            payload: Some(Payload {
                data,
                ..Default::default()
            }),
        }))
    }
    async fn tell(&self, _: Request<TellRequest>) -> Result<Response<TellResponse>, Status> {
        Ok(Response::new(TellResponse::default()))
    }
    async fn get_state(
        &self,
        _: Request<GetStateRequest>,
    ) -> Result<Response<GetStateResponse>, Status> {
        unimplemented()
    }
    async fn set_reminder(
        &self,
        _: Request<SetReminderRequest>,
    ) -> Result<Response<Reminder>, Status> {
        unimplemented()
    }
    async fn get_reminder(&self, _: Request<ReminderRef>) -> Result<Response<Reminder>, Status> {
        unimplemented()
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

/// Starts the fake on 127.0.0.1:0; the options reach it.
async fn start(mode: Daemon) -> (ConnectOptions, mpsc::UnboundedReceiver<u64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let (answers, answered) = mpsc::unbounded_channel();
    let fake = Fake { mode, answers };
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(AppHostServer::new(fake.clone()))
            .add_service(ActorClientServer::new(fake))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    (
        ConnectOptions {
            address,
            ..Default::default()
        },
        answered,
    )
}

fn register() -> Register {
    Register {
        app_name: "wire-test".into(),
        accepts_batches: true,
        api_version: 1,
        ..Default::default()
    }
}

#[tokio::test]
async fn an_app_registers_gets_a_batch_flattened_and_its_answers_arrive() {
    let (options, mut answered) = start(Daemon::Serve).await;
    let channel = connect::channel(&options).unwrap();
    let (events, mut event) = mpsc::unbounded_channel();
    let attached = app::attach(channel, &options, &[], register(), move |e| {
        let _ = events.send(e);
    })
    .await
    .unwrap();
    assert!(attached.registered.accepts_batches);

    let Some(AppEvent::Messages(pushed)) = event.recv().await else {
        panic!("no messages")
    };
    let ids: Vec<u64> = pushed
        .iter()
        .filter_map(|m| match &m.kind {
            Some(daemon_message::Kind::Turn(t)) => Some(t.call_id),
            _ => None,
        })
        .collect();
    assert_eq!(ids, [1, 2], "one frame's batch, flattened in order");

    for call_id in ids {
        let result = TurnResult {
            call_id,
            ..Default::default()
        };
        assert!(attached.sender.send(AppMessage {
            kind: Some(app_message::Kind::TurnResult(result))
        }));
    }
    assert_eq!(answered.recv().await, Some(1));
    assert_eq!(answered.recv().await, Some(2));
    let Some(AppEvent::Ended(end)) = event.recv().await else {
        panic!("no end")
    };
    assert!(end.is_ok(), "a clean close is Ended(Ok): {end:?}");
}

#[tokio::test]
async fn a_refused_registration_carries_its_status() {
    let (options, _) = start(Daemon::Refuse).await;
    let channel = connect::channel(&options).unwrap();
    let refused = app::attach(channel, &options, &[], register(), |_| {}).await;
    match refused {
        Err(AttachError::Refused(e)) => {
            assert_eq!(e.code, Code::Unauthenticated);
            assert_eq!(e.message, "this daemon wants an app token");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn invoke_carries_its_metadata_and_ends_at_its_deadline() {
    let (options, _) = start(Daemon::Serve).await;
    let calls = ActorCalls::new(connect::channel(&options).unwrap(), &options);
    let auth = vec![("authorization".to_owned(), "Bearer t0k".to_owned())];
    let call = CallOptions {
        timeout: Some(Duration::from_secs(5)),
        metadata: auth,
        retry: true,
    };
    let request = InvokeRequest {
        method: "echo".into(),
        ..Default::default()
    };
    let answer = calls.invoke(request, call, |_| {}).await.unwrap();
    assert_eq!(&answer.payload.unwrap().data[..], b"Bearer t0k");

    let hang = InvokeRequest {
        method: "hang".into(),
        ..Default::default()
    };
    let call = CallOptions {
        timeout: Some(Duration::from_millis(100)),
        metadata: Vec::new(),
        retry: false,
    };
    let err = calls.invoke(hang, call, |_| {}).await.unwrap_err();
    assert_eq!(err.status.code, Code::DeadlineExceeded);
}

#[tokio::test]
async fn a_daemon_that_is_not_there_is_unavailable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    drop(listener);
    let options = ConnectOptions {
        address,
        ..Default::default()
    };
    let calls = ActorCalls::new(connect::channel(&options).unwrap(), &options);
    let call = CallOptions {
        timeout: Some(Duration::from_secs(5)),
        metadata: Vec::new(),
        retry: false,
    };
    let err = calls
        .tell(TellRequest::default(), call, |_| {})
        .await
        .unwrap_err();
    assert_eq!(err.status.code, Code::Unavailable, "{err:?}");
}
