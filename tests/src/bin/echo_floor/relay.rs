//! The relay floor: calls passed on to a second echo over one long-lived
//! bidirectional stream, as the daemon passes turns to its app, and the
//! second echo's side of that stream. The stream is `PeerLink.Open` for its
//! message types only (a request's id, its Invoke, the reply by id); what
//! the daemon's links add to it (hello, chunks, pings) is not used.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;
use tonic::{Request, Response, Status, Streaming};
use troupe_proto::v1 as pb;
use troupe_proto::v1::link_message::Body;
use troupe_proto::v1::link_reply::Result as Answer;
use troupe_proto::v1::link_request::Call;
use troupe_proto::v1::peer_link_client::PeerLinkClient;

/// Most requests one frame carries: what is queued when the stream takes
/// the next frame goes in it, as on the daemon's app stream.
const FRAME_MESSAGES: usize = 256;

type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<pb::InvokeResponse>>>>;

/// The relaying side: one stream to the echo at the other end.
#[derive(Debug)]
pub struct Relay {
    next_id: AtomicU64,
    waiting: Waiting,
    send: mpsc::UnboundedSender<pb::LinkMessage>,
}

impl Relay {
    /// Opens the stream over `channel` and starts reading its replies.
    pub async fn open(channel: Channel) -> Result<Self, Status> {
        let (send, queued) = mpsc::unbounded_channel();
        let frames = UnboundedReceiverStream::new(queued)
            .ready_chunks(FRAME_MESSAGES)
            .map(|messages| pb::LinkFrame {
                messages,
                ..Default::default()
            });
        let mut replies = PeerLinkClient::new(channel)
            .max_decoding_message_size(usize::MAX)
            .open(frames)
            .await?
            .into_inner();
        let waiting = Waiting::default();
        let answered = waiting.clone();
        tokio::spawn(async move {
            while let Ok(Some(frame)) = replies.message().await {
                for message in frame.messages {
                    let Some(Body::Reply(pb::LinkReply {
                        result: Some(Answer::Invoke(reply)),
                    })) = message.body
                    else {
                        continue;
                    };
                    let caller = answered.lock().ok().and_then(|mut w| w.remove(&message.id));
                    if let Some(caller) = caller {
                        // A caller that gave up no longer wants it.
                        let _ = caller.send(reply);
                    }
                }
            }
            // The stream ended: callers still waiting get UNAVAILABLE as
            // their senders drop.
            if let Ok(mut waiting) = answered.lock() {
                waiting.clear();
            }
        });
        Ok(Self {
            next_id: AtomicU64::new(0),
            waiting,
            send,
        })
    }

    /// Passes `request` on and waits for the echo's reply.
    pub async fn invoke(&self, request: pb::InvokeRequest) -> Result<pb::InvokeResponse, Status> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply, answer) = oneshot::channel();
        self.waiting
            .lock()
            .map_err(|_| Status::internal("the relay's table of waiting calls is poisoned"))?
            .insert(id, reply);
        let message = pb::LinkMessage {
            id,
            body: Some(Body::Request(pb::LinkRequest {
                call: Some(Call::Invoke(request)),
                ..Default::default()
            })),
        };
        let lost = || Status::unavailable("the relay's stream to the echo ended");
        self.send.send(message).map_err(|_| lost())?;
        answer.await.map_err(|_| lost())
    }
}

/// The echo's side: each frame of requests answered with a frame of their
/// payloads, by id.
#[derive(Debug, Default)]
pub struct StreamEcho;

#[tonic::async_trait]
impl pb::peer_link_server::PeerLink for StreamEcho {
    type OpenStream = Pin<Box<dyn Stream<Item = Result<pb::LinkFrame, Status>> + Send>>;

    async fn open(
        &self,
        request: Request<Streaming<pb::LinkFrame>>,
    ) -> Result<Response<Self::OpenStream>, Status> {
        let replies = request.into_inner().map(|frame| {
            Ok(pb::LinkFrame {
                messages: frame?.messages.into_iter().map(echoed).collect(),
                ..Default::default()
            })
        });
        Ok(Response::new(Box::pin(replies)))
    }
}

fn echoed(message: pb::LinkMessage) -> pb::LinkMessage {
    let payload = match message.body {
        Some(Body::Request(pb::LinkRequest {
            call: Some(Call::Invoke(request)),
            ..
        })) => request.payload,
        _ => None,
    };
    pb::LinkMessage {
        id: message.id,
        body: Some(Body::Reply(pb::LinkReply {
            result: Some(Answer::Invoke(pb::InvokeResponse { payload })),
        })),
    }
}
