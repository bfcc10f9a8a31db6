//! The reconnecting app session against a scripted fake daemon on loopback:
//! re-registration with a new generation, stale answers dropped, fatal
//! refusals, the backoff's growth and reset, credentials per attempt, stop.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::{TcpListenerStream, UnboundedReceiverStream};
use tonic::metadata::MetadataValue;
use tonic::{Code, Request, Response, Status, Streaming};
use troupe_sdk_core::connect::ConnectOptions;
use troupe_sdk_core::proto::app_host_server::{AppHost, AppHostServer};
use troupe_sdk_core::proto::*;
use troupe_sdk_core::reconnect::{
    AppSession, Credentials, Outage, ReconnectPolicy, SessionEnd, SessionEvent, SessionLayer,
};

type DaemonTx = mpsc::UnboundedSender<Result<DaemonMessage, Status>>;
type DaemonStream = Pin<Box<dyn Stream<Item = Result<DaemonMessage, Status>> + Send>>;

/// What the fake does with one attempt.
enum Step {
    /// Refuses it with this status before reading anything.
    Refuse(Status),
    /// Registers the app (its daemon version names the attempt), pushes one
    /// turn with call id `attempt * 100 + 1`, and hands the test the stream's
    /// sender: dropping it closes the stream cleanly.
    Serve,
}

/// One attempt as the fake saw it.
#[derive(Debug)]
struct Seen {
    attempt: usize,
    authorization: Option<String>,
    at: Instant,
}

#[derive(Clone)]
struct Fake {
    steps: Arc<Mutex<VecDeque<Step>>>,
    attempts: Arc<AtomicUsize>,
    seen: mpsc::UnboundedSender<Seen>,
    streams: mpsc::UnboundedSender<(usize, DaemonTx)>,
    /// (attempt, call id) of each answer the app wrote.
    answers: mpsc::UnboundedSender<(usize, u64)>,
}

fn turn(call_id: u64) -> DaemonMessage {
    DaemonMessage {
        kind: Some(daemon_message::Kind::Turn(Turn {
            call_id,
            ..Default::default()
        })),
    }
}

fn answer(call_id: u64) -> AppMessage {
    AppMessage {
        kind: Some(app_message::Kind::TurnResult(TurnResult {
            call_id,
            ..Default::default()
        })),
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
        let attempt = self.attempts.fetch_add(1, Ordering::SeqCst) + 1;
        let authorization = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let _ = self.seen.send(Seen {
            attempt,
            authorization,
            at: Instant::now(),
        });
        let step = self.steps.lock().unwrap().pop_front();
        let step = step.unwrap_or_else(|| Step::Refuse(Status::unavailable("no more steps")));
        if let Step::Refuse(status) = step {
            return Err(status);
        }
        let mut incoming = request.into_inner();
        let Some(app_message::Kind::Register(_)) = incoming.message().await?.and_then(|m| m.kind)
        else {
            return Err(Status::invalid_argument("Register must come first"));
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let registered = Registered {
            daemon_version: format!("attempt-{attempt}"),
            accepts_batches: true,
            api_version: 1,
            ..Default::default()
        };
        let _ = tx.send(Ok(DaemonMessage {
            kind: Some(daemon_message::Kind::Registered(registered)),
        }));
        let _ = tx.send(Ok(turn(attempt as u64 * 100 + 1)));
        let _ = self.streams.send((attempt, tx));
        let answers = self.answers.clone();
        tokio::spawn(async move {
            while let Ok(Some(msg)) = incoming.message().await {
                for id in answer_ids(msg) {
                    let _ = answers.send((attempt, id));
                }
            }
        });
        Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
    }
}

/// The test's side of the fake.
struct Daemon {
    options: ConnectOptions,
    seen: mpsc::UnboundedReceiver<Seen>,
    streams: mpsc::UnboundedReceiver<(usize, DaemonTx)>,
    answers: mpsc::UnboundedReceiver<(usize, u64)>,
    attempts: Arc<AtomicUsize>,
}

async fn daemon(steps: Vec<Step>) -> Daemon {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let (seen_tx, seen) = mpsc::unbounded_channel();
    let (streams_tx, streams) = mpsc::unbounded_channel();
    let (answers_tx, answers) = mpsc::unbounded_channel();
    let attempts = Arc::new(AtomicUsize::new(0));
    let fake = Fake {
        steps: Arc::new(Mutex::new(steps.into())),
        attempts: attempts.clone(),
        seen: seen_tx,
        streams: streams_tx,
        answers: answers_tx,
    };
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(AppHostServer::new(fake))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    Daemon {
        options: ConnectOptions {
            address,
            ..Default::default()
        },
        seen,
        streams,
        answers,
        attempts,
    }
}

type Event = SessionEvent<String>;

/// The layer: a token that changes at each call ("t1", "t2", ...) unless
/// `fail` is set, and every event into a channel.
struct Layer {
    calls: AtomicUsize,
    fail: Option<String>,
    events: mpsc::UnboundedSender<Event>,
}

impl SessionLayer for Layer {
    type Error = String;

    async fn credentials(&self) -> Result<Credentials, String> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(e) = &self.fail {
            return Err(e.clone());
        }
        Ok(Credentials {
            metadata: vec![("authorization".into(), format!("Bearer t{n}"))],
            tls: None,
        })
    }

    fn on_event(&self, event: Event) {
        let _ = self.events.send(event);
    }
}

struct App {
    session: AppSession,
    layer: Arc<Layer>,
    events: mpsc::UnboundedReceiver<Event>,
}

fn start(daemon: &Daemon, policy: ReconnectPolicy, fail: Option<&str>) -> App {
    let (tx, events) = mpsc::unbounded_channel();
    let layer = Arc::new(Layer {
        calls: AtomicUsize::new(0),
        fail: fail.map(str::to_owned),
        events: tx,
    });
    let register = Register {
        app_name: "reconnect-test".into(),
        api_version: 1,
        ..Default::default()
    };
    let session = AppSession::start(daemon.options.clone(), register, policy, layer.clone());
    App {
        session,
        layer,
        events,
    }
}

async fn next(events: &mut mpsc::UnboundedReceiver<Event>) -> Event {
    events
        .recv()
        .await
        .expect("the session ended without Ended")
}

fn fast() -> ReconnectPolicy {
    ReconnectPolicy {
        initial_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(40),
    }
}

fn ms(pause: Duration) -> u128 {
    pause.as_millis()
}

#[tokio::test]
async fn a_closed_stream_re_registers_and_a_stale_answer_is_not_written_on_the_next() {
    let mut daemon = daemon(vec![Step::Serve, Step::Serve]).await;
    let mut app = start(&daemon, fast(), None);

    let Event::Registered {
        generation: 1,
        registered,
    } = next(&mut app.events).await
    else {
        panic!("no first registration")
    };
    assert_eq!(registered.daemon_version, "attempt-1");
    let Event::Messages {
        generation: 1,
        messages,
    } = next(&mut app.events).await
    else {
        panic!("no turn on stream 1")
    };
    assert_eq!(messages, [turn(101)]);

    let (1, stream1) = daemon.streams.recv().await.unwrap() else {
        panic!("stream 1 is not attempt 1")
    };
    drop(stream1); // the daemon restarts: a clean close
    let Event::Lost {
        outage: Outage::Closed,
        first: true,
        ..
    } = next(&mut app.events).await
    else {
        panic!("the clean close is not the first outage")
    };
    let Event::Registered { generation: 2, .. } = next(&mut app.events).await else {
        panic!("no second registration")
    };
    let Event::Messages {
        generation: 2,
        messages,
    } = next(&mut app.events).await
    else {
        panic!("no turn on stream 2")
    };
    assert_eq!(messages, [turn(201)]);

    // Turn 101's answer comes late: stream 1 is gone, so it goes nowhere.
    assert!(!app.session.send(1, answer(101)));
    assert!(app.session.send(2, answer(201)));
    assert_eq!(daemon.answers.recv().await, Some((2, 201)));

    app.session.stop();
    let Event::Ended(SessionEnd::Stopped) = next(&mut app.events).await else {
        panic!("stop did not end the session")
    };
    assert!(
        daemon.answers.try_recv().is_err(),
        "the stale answer was written"
    );
}

#[tokio::test]
async fn a_fatal_refusal_ends_the_session_with_its_status_and_no_retry() {
    let trailers = {
        let mut status = Status::failed_precondition("this daemon speaks app API version 2");
        status
            .metadata_mut()
            .insert("troupe-api-version", MetadataValue::from_static("2"));
        status
    };
    let daemon = daemon(vec![Step::Refuse(trailers)]).await;
    let mut app = start(&daemon, fast(), None);

    let Event::Ended(SessionEnd::Refused(e)) = next(&mut app.events).await else {
        panic!("the refusal did not end the session")
    };
    assert_eq!(e.code, Code::FailedPrecondition);
    assert_eq!(e.message, "this daemon speaks app API version 2");
    assert!(e
        .trailers
        .contains(&("troupe-api-version".to_owned(), "2".to_owned())));
    assert!(app.events.try_recv().is_err(), "an event after Ended");
    assert_eq!(daemon.attempts.load(Ordering::SeqCst), 1);
    assert_eq!(app.layer.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_unauthenticated_app_is_refused_for_good() {
    let refusal = Status::unauthenticated("this daemon wants an app token");
    let daemon = daemon(vec![Step::Refuse(refusal)]).await;
    let mut app = start(&daemon, fast(), None);
    let Event::Ended(SessionEnd::Refused(e)) = next(&mut app.events).await else {
        panic!("UNAUTHENTICATED did not end the session")
    };
    assert_eq!(e.code, Code::Unauthenticated);
    assert_eq!(daemon.attempts.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn the_backoff_grows_while_the_daemon_is_away_and_resets_after_a_registration() {
    let down = || Step::Refuse(Status::unavailable("restarting"));
    let steps = vec![
        down(),
        down(),
        down(),
        Step::Serve,
        down(),
        down(),
        Step::Serve,
    ];
    let mut daemon = daemon(steps).await;
    let policy = ReconnectPolicy {
        initial_delay: Duration::from_millis(50),
        max_delay: Duration::from_millis(150),
    };
    let mut app = start(&daemon, policy, None);

    // Each outage's pause, whether it was the first, and the attempt after
    // it started no earlier than the pause.
    let mut pauses = Vec::new();
    let mut previous = daemon.seen.recv().await.unwrap();
    loop {
        match next(&mut app.events).await {
            Event::Lost {
                outage,
                first,
                retry_in,
            } => {
                let seen = daemon.seen.recv().await.unwrap();
                assert!(
                    seen.at - previous.at >= retry_in,
                    "attempt {} came early",
                    seen.attempt
                );
                previous = seen;
                pauses.push((ms(retry_in), first, matches!(outage, Outage::Closed)));
            }
            Event::Registered { generation: 1, .. } => {
                let (_, stream) = daemon.streams.recv().await.unwrap();
                drop(stream);
            }
            Event::Registered { generation: 2, .. } => break,
            Event::Messages { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    let [a, b, c, closed, d, e] = pauses[..] else {
        panic!("six outages expected: {pauses:?}")
    };
    // Down three times: 50, 100, then the 150 ms cap (each ±20%); only the
    // first is worth a warning.
    assert!((40..=60).contains(&a.0) && a.1, "{a:?}");
    assert!((80..=120).contains(&b.0) && !b.1, "{b:?}");
    assert!((120..=180).contains(&c.0) && !c.1, "{c:?}");
    // Registered, then closed: the first outage again, from 50 ms again.
    assert!(
        (40..=60).contains(&closed.0) && closed.1 && closed.2,
        "{closed:?}"
    );
    assert!((80..=120).contains(&d.0) && !d.1, "{d:?}");
    assert!((120..=180).contains(&e.0) && !e.1, "{e:?}");
}

#[tokio::test]
async fn every_attempt_asks_for_credentials_so_a_rotated_token_is_sent() {
    let down = Step::Refuse(Status::unavailable("restarting"));
    let mut daemon = daemon(vec![down, Step::Serve]).await;
    let mut app = start(&daemon, fast(), None);

    let Event::Lost {
        outage: Outage::Refused(e),
        first: true,
        ..
    } = next(&mut app.events).await
    else {
        panic!("no outage first")
    };
    assert_eq!(e.code, Code::Unavailable);
    let Event::Registered { generation: 1, .. } = next(&mut app.events).await else {
        panic!("no registration")
    };
    let tokens: Vec<Option<String>> = [daemon.seen.recv().await, daemon.seen.recv().await]
        .into_iter()
        .map(|s| s.unwrap().authorization)
        .collect();
    assert_eq!(tokens, [Some("Bearer t1".into()), Some("Bearer t2".into())]);
    assert_eq!(app.layer.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_credentials_error_ends_the_session_before_any_attempt() {
    let daemon = daemon(vec![Step::Serve]).await;
    let mut app = start(&daemon, fast(), Some("token_file cannot be read"));
    let Event::Ended(SessionEnd::Credentials(e)) = next(&mut app.events).await else {
        panic!("the credentials error did not end the session")
    };
    assert_eq!(e, "token_file cannot be read");
    assert_eq!(daemon.attempts.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn stop_during_the_backoff_ends_the_session_at_once() {
    let daemon = daemon(vec![Step::Refuse(Status::unavailable("restarting"))]).await;
    let hour = Duration::from_secs(3600);
    let policy = ReconnectPolicy {
        initial_delay: hour,
        max_delay: hour,
    };
    let mut app = start(&daemon, policy, None);
    let Event::Lost { retry_in, .. } = next(&mut app.events).await else {
        panic!("no outage")
    };
    assert!(retry_in >= Duration::from_secs(60 * 48));

    app.session.stop();
    // A guard, not a synchronisation: the pause would last an hour.
    let ended = tokio::time::timeout(Duration::from_secs(10), next(&mut app.events)).await;
    let Ok(Event::Ended(SessionEnd::Stopped)) = ended else {
        panic!("stop did not end the backoff: {ended:?}")
    };
    assert_eq!(daemon.attempts.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn stop_ends_a_registered_stream() {
    let mut daemon = daemon(vec![Step::Serve]).await;
    let mut app = start(&daemon, fast(), None);
    let Event::Registered { generation: 1, .. } = next(&mut app.events).await else {
        panic!("no registration")
    };
    let (_, stream) = daemon.streams.recv().await.unwrap();
    app.session.stop();
    loop {
        match next(&mut app.events).await {
            Event::Messages { .. } => {}
            Event::Ended(SessionEnd::Stopped) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    // The stream is gone: the daemon's side sees it closed.
    stream.closed().await;
    assert!(!app.session.send(1, answer(101)));
}
