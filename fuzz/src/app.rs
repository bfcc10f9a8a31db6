//! An app's stream as the daemon reads it: the `AppHost.Attach` handler
//! (`app_api`) over a real runtime, fed gRPC-framed `AppMessage`s through
//! tonic's own decoder, while the harness makes work for the app (calls,
//! deactivations) so its answers have something to answer.
//!
//! Operations: a raw `AppMessage` (anything, including protocol errors),
//! raw body bytes (broken framing), an answer to the oldest unanswered
//! work (the body decoded as the matching result, its `call_id` set to the
//! work's, so mutations explore the answers' contents rather than guessing
//! ids), the same for every unanswered work in one `AppBatch`, a call or a
//! tell to one of the registered types, an admin deactivation, a short
//! wait (turn timeouts), and closing the stream.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body::Frame;
use prost::Message;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::codec::Codec;
use tonic::{Request, Response, Status, Streaming};
use troupe_proto::v1 as pb;
use troupe_proto::v1::app_host_server::AppHost;
use troupe_runtime::{ActorId, Call, Payload, Runtime};

use crate::app_api::AppApi;
use crate::daemon::{self, block_on, bounded};
use crate::input::{grpc_frame, number, Ops, OpsWriter};

/// The operations, by their byte modulo their count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Message,
    Raw,
    Answer,
    AnswerBatch,
    Call,
    Tell,
    Deactivate,
    Wait,
    Close,
}

const OPS: [Op; 9] = [
    Op::Message,
    Op::Raw,
    Op::Answer,
    Op::AnswerBatch,
    Op::Call,
    Op::Tell,
    Op::Deactivate,
    Op::Wait,
    Op::Close,
];

const MAX_OPS: usize = 64;

type BodyTx = mpsc::UnboundedSender<Result<Frame<Bytes>, Infallible>>;

/// What the daemon sends down the stream.
type DaemonStream = <AppApi as AppHost>::AttachStream;
type Attached = Result<Response<DaemonStream>, Status>;

/// Work the daemon sent that the app has not answered yet.
#[derive(Debug, Clone, Copy)]
enum Work {
    Activate(u64),
    Turn(u64),
    Deactivate(u64),
}

struct Harness {
    runtime: Runtime,
    body: Option<BodyTx>,
    attach: Option<JoinHandle<Attached>>,
    /// Fused: tonic never polls a response stream after its end, and
    /// neither may the harness (the daemon's stream panics if polled then).
    outbound: Option<futures::stream::Fuse<DaemonStream>>,
    /// The type names the daemon confirmed in `Registered`.
    types: Vec<String>,
    unanswered: VecDeque<Work>,
    tasks: Vec<JoinHandle<()>>,
}

impl Harness {
    fn send(&self, bytes: Bytes) {
        if let Some(body) = &self.body {
            let _ = body.send(Ok(Frame::data(bytes)));
        }
    }

    fn send_message(&self, message: &pb::AppMessage) {
        self.send(grpc_frame(&message.encode_to_vec()));
    }

    /// An answer to `work` read from `body`: what decodes of it, with the
    /// work's own call id.
    fn answer(work: Work, body: &[u8]) -> pb::app_message::Kind {
        use pb::app_message::Kind;
        match work {
            Work::Activate(call_id) => Kind::Activated(pb::ActivateResult {
                call_id,
                ..pb::ActivateResult::decode(body).unwrap_or_default()
            }),
            Work::Turn(call_id) => Kind::TurnResult(pb::TurnResult {
                call_id,
                ..pb::TurnResult::decode(body).unwrap_or_default()
            }),
            Work::Deactivate(call_id) => Kind::Deactivated(pb::DeactivateResult {
                call_id,
                ..pb::DeactivateResult::decode(body).unwrap_or_default()
            }),
        }
    }

    fn actor(&self, body: &[u8]) -> (ActorId, String, Vec<u8>) {
        let (index, rest) = number(body, 1);
        let (id, rest) = number(rest, 1);
        let ty = match self.types.len() {
            0 => "app".to_owned(),
            n => self.types[usize::try_from(index).unwrap_or_default() % n].clone(),
        };
        let (method, payload) = match rest.iter().position(|b| *b == b'\n') {
            Some(at) => (&rest[..at], rest[at + 1..].to_vec()),
            None => (rest, Vec::new()),
        };
        let method = String::from_utf8_lossy(method).into_owned();
        (ActorId::new(ty, format!("a{id}")), method, payload)
    }

    fn step(&mut self, op: Op, body: &[u8]) {
        match op {
            Op::Message => self.send(grpc_frame(body)),
            Op::Raw => self.send(Bytes::copy_from_slice(body)),
            Op::Answer => {
                if let Some(work) = self.unanswered.pop_front() {
                    self.send_message(&pb::AppMessage {
                        kind: Some(Self::answer(work, body)),
                    });
                }
            }
            Op::AnswerBatch => {
                let messages = self
                    .unanswered
                    .drain(..)
                    .map(|work| pb::AppMessage {
                        kind: Some(Self::answer(work, body)),
                    })
                    .collect();
                self.send_message(&pb::AppMessage {
                    kind: Some(pb::app_message::Kind::Batch(pb::AppBatch { messages })),
                });
            }
            Op::Call | Op::Tell => {
                let (actor, method, payload) = self.actor(body);
                let call = Call::new(actor, method, Payload::json(payload));
                let runtime = self.runtime.clone();
                self.tasks.push(tokio::spawn(async move {
                    if op == Op::Call {
                        let _ = runtime.invoke(call).await;
                    } else {
                        let _ = runtime.tell(call);
                    }
                }));
            }
            Op::Deactivate => {
                let (actor, _, _) = self.actor(body);
                let runtime = self.runtime.clone();
                self.tasks.push(tokio::spawn(async move {
                    let _ = runtime.deactivate_actor(&actor).await;
                }));
            }
            Op::Wait | Op::Close => {}
        }
        if op == Op::Close {
            self.body = None;
        }
    }

    /// Lets the daemon's tasks run, then reads what it sent the app.
    async fn settle(&mut self, wait: Duration) {
        if wait.is_zero() {
            for _ in 0..8 {
                tokio::task::yield_now().await;
            }
        } else {
            tokio::time::sleep(wait).await;
        }
        if self.attach.as_ref().is_some_and(|a| a.is_finished()) {
            if let Some(attach) = self.attach.take() {
                if let Ok(Ok(response)) = attach.await {
                    self.outbound = Some(response.into_inner().fuse());
                }
            }
        }
        let mut sent = Vec::new();
        if let Some(outbound) = self.outbound.as_mut() {
            // Until it is pending, ended, or ended with a status.
            while let Some(Some(Ok(message))) = futures::FutureExt::now_or_never(outbound.next()) {
                sent.push(message);
            }
        }
        for message in sent {
            self.read_daemon(message);
        }
    }

    fn read_daemon(&mut self, message: pb::DaemonMessage) {
        use pb::daemon_message::Kind;
        match message.kind {
            Some(Kind::Registered(r)) => {
                self.types = r.types.into_iter().map(|t| t.name).collect();
            }
            Some(Kind::Activate(a)) => self.unanswered.push_back(Work::Activate(a.call_id)),
            Some(Kind::Turn(t)) => self.unanswered.push_back(Work::Turn(t.call_id)),
            Some(Kind::Deactivate(d)) => self.unanswered.push_back(Work::Deactivate(d.call_id)),
            Some(Kind::Batch(batch)) => {
                for message in batch.messages {
                    self.read_daemon(message);
                }
            }
            // Large messages in pieces: only an app that accepts parts gets
            // them, and the harness's does not.
            Some(Kind::Part(_)) | None => {}
            // Advisory: the input decides when the turn is answered.
            Some(Kind::Cancel(_)) => {}
        }
    }
}

/// Runs one input against a fresh daemon.
pub fn run(data: &[u8]) {
    block_on(async {
        let runtime = daemon::start(false);
        let limit = runtime.config().max_payload_bytes.saturating_mul(2) + 64 * 1024;
        let api = AppApi::new(runtime.clone(), limit);
        let (tx, rx) = mpsc::unbounded_channel();
        let body = http_body_util::StreamBody::new(UnboundedReceiverStream::new(rx));
        let decoder =
            tonic_prost::ProstCodec::<pb::DaemonMessage, pb::AppMessage>::default().decoder();
        let inbound = Streaming::new_request(decoder, body, None, Some(limit));
        let attach = tokio::spawn(async move { api.attach(Request::new(inbound)).await });
        let mut harness = Harness {
            runtime: runtime.clone(),
            body: Some(tx),
            attach: Some(attach),
            outbound: None,
            types: Vec::new(),
            unanswered: VecDeque::new(),
            tasks: Vec::new(),
        };
        for (op, body) in Ops::new(data).take(MAX_OPS) {
            let op = OPS[usize::from(op) % OPS.len()];
            harness.step(op, body);
            let wait = match op {
                // Long enough for turns with a timeout of a few ms to be
                // overdue, and (11 ms) for the stream's overdue sweep, which
                // looks at most every 10 ms, to find them.
                Op::Wait => Duration::from_millis([0, 1, 3, 11][(number(body, 1).0 % 4) as usize]),
                _ => Duration::ZERO,
            };
            harness.settle(wait).await;
        }
        // The app goes away: every call still waiting on it fails.
        harness.body = None;
        let Harness {
            attach,
            outbound,
            tasks,
            ..
        } = harness;
        bounded("the app stream's end", async move {
            if let Some(attach) = attach {
                let _ = attach.await;
            }
            if let Some(mut outbound) = outbound {
                while outbound.next().await.is_some() {}
            }
            for task in tasks {
                let _ = task.await;
            }
        })
        .await;
        daemon::stop(runtime).await;
    });
}

fn message(kind: pb::app_message::Kind) -> Vec<u8> {
    pb::AppMessage { kind: Some(kind) }.encode_to_vec()
}

fn register(batches: bool) -> Vec<u8> {
    message(pb::app_message::Kind::Register(pb::Register {
        app_name: "fuzz-app".into(),
        types: vec![
            pb::ActorTypeSpec {
                name: "app".into(),
                state_mode: pb::StateMode::Durable as i32,
                ..Default::default()
            },
            pb::ActorTypeSpec {
                name: "ro".into(),
                readonly_methods: vec!["peek".into()],
                reentrant: true,
                turn_timeout_ms: 2,
                idle_timeout_ms: 10,
                max_mailbox: 2,
                ..Default::default()
            },
        ],
        sdk: "troupe-fuzz/0".into(),
        accepts_batches: batches,
        max_receive_bytes: 65_536,
        api_version: pb::API_VERSION,
        // Whole messages only: the harness reads no parts.
        accepts_parts: false,
        // Cancels come with batches: the input still decides when each
        // turn is answered.
        accepts_cancel: batches,
    }))
}

fn op(op: Op) -> u8 {
    let index = OPS.iter().position(|o| *o == op).unwrap_or_default();
    u8::try_from(index).unwrap_or_default()
}

/// Seeds for `app_stream`: registering, answering activations, turns and
/// deactivations one by one and in batches, a turn timing out, an error.
pub fn seeds() -> Vec<Vec<u8>> {
    let set = pb::StateChange {
        ttl_ms: None,
        key: "k".into(),
        op: Some(pb::state_change::Op::Set(Bytes::from_static(b"\"v\""))),
    };
    let activated = pb::ActivateResult {
        changes: vec![set.clone()],
        ..Default::default()
    }
    .encode_to_vec();
    let reply = pb::TurnResult {
        outcome: Some(pb::turn_result::Outcome::Reply(pb::Payload {
            data: Bytes::from_static(b"{\"ok\":true}"),
            content_type: pb::ContentType::Json as i32,
        })),
        changes: vec![set],
        ..Default::default()
    }
    .encode_to_vec();
    let failed = pb::TurnResult {
        outcome: Some(pb::turn_result::Outcome::Error(pb::ActorFailure {
            r#type: "KeyError".into(),
            message: "no".into(),
            details: String::new(),
            ..Default::default()
        })),
        ..Default::default()
    }
    .encode_to_vec();
    let deactivated = pb::DeactivateResult {
        changes: vec![pb::StateChange {
            ttl_ms: None,
            key: "k".into(),
            op: Some(pb::state_change::Op::Delete(true)),
        }],
        ..Default::default()
    }
    .encode_to_vec();
    vec![
        OpsWriter::new()
            .op(op(Op::Message), &register(true))
            .op(op(Op::Call), b"\x00\x01incr\n{\"by\":2}")
            .op(op(Op::Answer), &activated)
            .op(op(Op::Answer), &reply)
            .op(op(Op::Call), b"\x00\x01incr\n1")
            .op(op(Op::Call), b"\x00\x02incr\n2")
            .op(op(Op::AnswerBatch), &reply)
            .op(op(Op::Deactivate), b"\x00\x01")
            .op(op(Op::Answer), &deactivated)
            .op(op(Op::Close), &[])
            .finish(),
        OpsWriter::new()
            .op(op(Op::Message), &register(false))
            .op(op(Op::Call), b"\x01\x01peek")
            .op(op(Op::Answer), &activated)
            .op(op(Op::Wait), &[3])
            .op(op(Op::Answer), &reply)
            .op(op(Op::Tell), b"\x00\x03boom")
            .op(op(Op::AnswerBatch), &failed)
            .op(op(Op::Message), &register(false))
            .finish(),
    ]
}
