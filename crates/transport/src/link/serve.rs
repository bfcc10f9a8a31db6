//! The answering side of a link: the `PeerLink` service, and the serving of
//! a stream whatever carries it (`accept` hands framed connections here).
//! Each stream a peer opens is read by one task, which hands requests to the daemon's
//! [`Inbound`] in the order they arrived (each one's first step, routing it
//! into an actor's mailbox, runs before the next one's, so the order of a
//! sender's messages holds) and lets them run concurrently after that;
//! replies go back through an outbox like the sender's, which the response
//! stream drains as the connection takes frames.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::{abortable, AbortHandle};
use futures::stream::{FuturesUnordered, Stream, StreamExt};
use futures::task::AtomicWaker;
use parking_lot::Mutex;
use tokio::sync::watch;
use tonic::{Request, Response, Status, Streaming};
use tracing::{debug, info};
use troupe_proto::v1 as pb;

use super::config::LinksConfig;
use super::frames_io::FrameSource;
use super::stats::{InboundCounters, ServedStream};
use super::wire::{Framing, Outbox, Reassembly};
use crate::BoxFuture;

/// What the daemon does with a request a peer sent over a link.
pub trait Inbound: Send + Sync + 'static {
    /// Answers `request`; errors travel as a `LinkStatus` reply.
    fn handle(&self, request: pb::LinkRequest) -> BoxFuture<pb::LinkReply>;
}

/// The `PeerLink` service, answering with `inbound`.
#[derive(Clone)]
pub struct LinkServer {
    pub(super) inbound: Arc<dyn Inbound>,
    /// This daemon's node name, told to framed links' diallers.
    pub(super) node: String,
    pub(super) framing: Framing,
    pub(super) max_message_bytes: usize,
    pub(super) frame_limit: usize,
    /// A dialler pings at least this often: a stream quiet for two of these
    /// in a row lost its peer (see [`serve`]).
    pub(super) quiet_period: std::time::Duration,
    pub(super) counters: Arc<InboundCounters>,
    /// Set when the daemon closes: streams stop taking requests, answer
    /// those they have, and end.
    pub(super) closing: watch::Receiver<bool>,
}

impl std::fmt::Debug for LinkServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkServer")
            .field("framing", &self.framing)
            .finish_non_exhaustive()
    }
}

impl LinkServer {
    pub(crate) fn new(
        config: &LinksConfig,
        inbound: Arc<dyn Inbound>,
        closing: watch::Receiver<bool>,
        counters: Arc<InboundCounters>,
    ) -> Self {
        Self {
            inbound,
            node: config.node.clone(),
            framing: config.framing(),
            max_message_bytes: config.max_message_bytes,
            frame_limit: config.frame_limit(),
            // Never zero: it is a tick period.
            quiet_period: config
                .keep_alive_interval
                .saturating_add(config.keep_alive_timeout)
                .max(std::time::Duration::from_millis(1)),
            counters,
            closing,
        }
    }

    /// The tonic service, with the message limits of `config`.
    pub fn into_service(self) -> pb::peer_link_server::PeerLinkServer<Self> {
        let limit = self.max_message_bytes;
        pb::peer_link_server::PeerLinkServer::new(self)
            .max_decoding_message_size(limit)
            .max_encoding_message_size(limit)
    }
}

#[tonic::async_trait]
impl pb::peer_link_server::PeerLink for LinkServer {
    type OpenStream = ReplyFrames;

    async fn open(
        &self,
        request: Request<Streaming<pb::LinkFrame>>,
    ) -> Result<Response<Self::OpenStream>, Status> {
        let replies = Arc::new(Replies::new(Outbox::new(self.framing)));
        tokio::spawn(self.serve(request.into_inner(), String::new(), replies.clone()));
        Ok(Response::new(ReplyFrames(replies)))
    }
}

/// Replies waiting for the stream, shared by the task that reads requests
/// and the response stream that tonic (or a framed link's writer) polls.
pub(super) struct Replies {
    queue: Mutex<ReplyQueue>,
    /// The response stream, waiting for a reply.
    wake: AtomicWaker,
    /// The link is over: end the stream now, with what is queued unsent.
    ended: AtomicBool,
}

/// The outbox and whether more will come, under one lock: the stream sees
/// "finishing" only with every reply pushed before it, whatever thread
/// pushed them, so the last replies of a drain are never left behind.
struct ReplyQueue {
    outbox: Outbox,
    /// No more replies will come: end the stream once the outbox is empty.
    finishing: bool,
}

impl Replies {
    pub(super) fn new(outbox: Outbox) -> Self {
        Self {
            queue: Mutex::new(ReplyQueue {
                outbox,
                finishing: false,
            }),
            wake: AtomicWaker::new(),
            ended: AtomicBool::new(false),
        }
    }

    fn push(&self, message: pb::LinkMessage) {
        self.queue.lock().outbox.push(message);
        self.wake.wake();
    }

    fn finish(&self) {
        self.queue.lock().finishing = true;
        self.wake.wake();
    }

    fn end(&self) {
        self.ended.store(true, Ordering::Release);
        self.wake.wake();
    }
}

/// The response stream of a link: frames cut from the outbox when tonic
/// asks for the next one, so a reply costs no hop through a task of its
/// own. Ends with OK once the link drained or ended.
pub struct ReplyFrames(pub(super) Arc<Replies>);

impl std::fmt::Debug for ReplyFrames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyFrames").finish_non_exhaustive()
    }
}

impl Stream for ReplyFrames {
    type Item = Result<pb::LinkFrame, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let replies = &self.0;
        // Registered before looking, so that a push after the look wakes
        // the stream again.
        replies.wake.register(cx.waker());
        if replies.ended.load(Ordering::Acquire) {
            return Poll::Ready(None);
        }
        let mut queue = replies.queue.lock();
        if let Some(frame) = queue.outbox.next_frame() {
            return Poll::Ready(Some(Ok(frame)));
        }
        if queue.finishing {
            return Poll::Ready(None);
        }
        Poll::Pending
    }
}

impl LinkServer {
    /// Reads one stream's requests until it ends; `peer`: who opened it, if
    /// a hello said so already.
    pub(super) fn serve(
        &self,
        incoming: impl FrameSource + 'static,
        peer: String,
        replies: Arc<Replies>,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        serve(incoming, peer, self.clone(), replies)
    }
}

/// Why a stream was let go without a word from its peer.
fn quiet_reason(period: std::time::Duration) -> String {
    format!(
        "nothing came from the peer for over {:?}, though a live peer pings every {:?} at most",
        period.saturating_mul(2),
        period
    )
}

async fn serve(
    mut incoming: impl FrameSource,
    mut peer: String,
    server: LinkServer,
    replies: Arc<Replies>,
) {
    let LinkServer {
        inbound,
        max_message_bytes,
        quiet_period,
        counters,
        mut closing,
        ..
    } = server;
    let _served = ServedStream::new(counters.clone());
    let mut reassembly = Reassembly::new(max_message_bytes);
    let mut running = FuturesUnordered::new();
    // How to drop each running request's work when its sender stops
    // waiting (`LinkCancel`).
    let mut cancels: HashMap<u64, AbortHandle> = HashMap::new();
    let mut draining = false;
    // The dialler's pings keep a stream alive; one whose peer's host
    // vanished (no reset ever comes) would otherwise hold its task, buffers
    // and socket forever. Counted per tick, so a frame costs no timer.
    let start = tokio::time::Instant::now();
    let mut watchdog = tokio::time::interval_at(
        start.checked_add(quiet_period).unwrap_or(start),
        quiet_period,
    );
    // A stalled runtime must not fire the missed ticks back to back with
    // no chance to read in between.
    watchdog.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut frames_read: u64 = 0;
    let mut read_at_last_tick = 0;
    let mut quiet_ticks = 0u8;
    let ended = loop {
        if draining && running.is_empty() {
            // Every request taken is answered: send the last replies and
            // end the stream; the peer dials another daemon's links.
            replies.finish();
            debug!(%peer, "peer link drained");
            return;
        }
        tokio::select! {
            _ = closing.wait_for(|closing| *closing), if !draining => draining = true,
            frame = incoming.next_frame(), if !draining => {
                frames_read = frames_read.wrapping_add(1);
                let frame = match frame {
                    Ok(Some(frame)) => frame,
                    Ok(None) => break "the peer closed the stream".to_owned(),
                    Err(reason) => break reason,
                };
                if let Some(hello) = frame.hello {
                    peer = format!("{}/{}", hello.node, hello.channel);
                }
                let mut messages = frame.messages;
                for chunk in frame.chunks {
                    match reassembly.add(chunk) {
                        Ok(Some(message)) => messages.push(message),
                        Ok(None) => {}
                        Err(e) => {
                            // The stream's framing is broken: end it, so the
                            // peer fails what it had in flight and redials.
                            replies.end();
                            debug!(%peer, error = %e, "closing a peer link");
                            return;
                        }
                    }
                }
                for message in messages {
                    match message.body {
                        Some(pb::link_message::Body::Request(request)) => {
                            let (answer, cancel) = abortable(inbound.handle(request));
                            let id = message.id;
                            cancels.insert(id, cancel);
                            running.push(async move { (id, answer.await) });
                        }
                        Some(pb::link_message::Body::Cancel(_)) => {
                            // Dropping the work drops the runtime's wait for
                            // its turn, which the app is then told to stop.
                            if let Some(cancel) = cancels.remove(&message.id) {
                                cancel.abort();
                            }
                        }
                        Some(pb::link_message::Body::Ping(ping)) => {
                            replies.push(pb::LinkMessage {
                                id: message.id,
                                body: Some(pb::link_message::Body::Pong(ping)),
                            });
                        }
                        _ => debug!(%peer, "unexpected message on a peer link"),
                    }
                }
            }
            _ = watchdog.tick(), if !draining => {
                if std::mem::replace(&mut read_at_last_tick, frames_read) == frames_read {
                    quiet_ticks = quiet_ticks.saturating_add(1);
                } else {
                    quiet_ticks = 0;
                }
                if quiet_ticks >= 2 {
                    let reason = quiet_reason(quiet_period);
                    counters.let_go.fetch_add(1, Ordering::Relaxed);
                    info!(%peer, %reason, "let a peer link go");
                    break reason;
                }
            }
            Some((id, reply)) = running.next(), if !running.is_empty() => {
                cancels.remove(&id);
                // Aborted: its sender stopped waiting, and wants no reply.
                if let Ok(reply) = reply {
                    replies.push(pb::LinkMessage {
                        id,
                        body: Some(pb::link_message::Body::Reply(reply)),
                    });
                }
            }
        }
    };
    debug!(%peer, reason = %ended, "peer link ended");
    replies.end();
}

/// The reply for a failed request, as the RPC would have answered it.
pub fn status_reply(status: &Status) -> pb::LinkReply {
    let metadata = status
        .metadata()
        .iter()
        .filter_map(|entry| match entry {
            tonic::metadata::KeyAndValueRef::Ascii(key, value) => {
                Some((key.to_string(), value.to_str().ok()?.to_owned()))
            }
            tonic::metadata::KeyAndValueRef::Binary(..) => None,
        })
        .collect();
    pb::LinkReply {
        result: Some(pb::link_reply::Result::Error(pb::LinkStatus {
            code: status.code() as i32,
            message: status.message().to_owned(),
            metadata,
        })),
    }
}

/// The status a `LinkStatus` reply stands for, trailers included.
pub fn status_of_reply(error: pb::LinkStatus) -> Status {
    let mut status = Status::new(tonic::Code::from_i32(error.code), error.message);
    for (key, value) in error.metadata {
        if let (Ok(key), Ok(value)) = (
            key.parse::<tonic::metadata::MetadataKey<tonic::metadata::Ascii>>(),
            value.parse(),
        ) {
            status.metadata_mut().insert(key, value);
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures::StreamExt;
    use troupe_proto::v1 as pb;

    use super::{Replies, ReplyFrames};
    use crate::link::wire::{Framing, Outbox};

    fn replies() -> Arc<Replies> {
        // One message per frame, so each frame says which reply it is.
        Arc::new(Replies::new(Outbox::new(Framing {
            chunk_bytes: None,
            frame_bytes: 1,
        })))
    }

    fn pong(id: u64) -> pb::LinkMessage {
        pb::LinkMessage {
            id,
            body: Some(pb::link_message::Body::Pong(pb::LinkPing {})),
        }
    }

    async fn ids(frames: ReplyFrames) -> Vec<u64> {
        frames
            .flat_map(|frame| {
                let ids: Vec<u64> = frame.map_or_else(
                    |_| Vec::new(),
                    |f| f.messages.iter().map(|m| m.id).collect(),
                );
                futures::stream::iter(ids)
            })
            .collect()
            .await
    }

    #[tokio::test]
    async fn a_drained_link_sends_every_reply_then_ends() {
        let replies = replies();
        let frames = ReplyFrames(replies.clone());
        let pushing = {
            let replies = replies.clone();
            tokio::spawn(async move {
                for id in 1..=3 {
                    replies.push(pong(id));
                    tokio::task::yield_now().await;
                }
                replies.finish();
            })
        };
        assert_eq!(ids(frames).await, vec![1, 2, 3]);
        assert!(pushing.await.is_ok());
    }

    #[tokio::test]
    async fn an_ended_link_ends_its_stream_with_replies_unsent() {
        let replies = replies();
        replies.push(pong(1));
        replies.end();
        assert_eq!(ids(ReplyFrames(replies)).await, Vec::<u64>::new());
    }
}
