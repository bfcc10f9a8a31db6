//! One connection of a channel to a peer: its own TCP (or TLS) connection
//! carrying one long-lived stream, the requests queued for it and those
//! waiting for replies. A task keeps it connected: it dials, reads replies,
//! and when the stream breaks fails the requests in flight on it (and only
//! those) and dials again after a jittered backoff; the stream's request
//! side cuts frames from the outbox whenever the writer asks for the next
//! one. While it is down between attempts, requests fail at once instead of
//! waiting out their deadline.
//!
//! How the stream is opened is the protocol's business: `over_framed` (the
//! default: frames written straight on the connection) or `over_grpc` (a
//! `PeerLink.Open` call on an HTTP/2 connection).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::task::AtomicWaker;
use futures::Stream;
use parking_lot::Mutex;
use prost::Message;
use tokio::sync::oneshot;
use tracing::{debug, info};
use troupe_backoff::Backoff;
use troupe_proto::v1 as pb;

use super::config::{LinkProtocol, LinksConfig};
use super::frames_io::FrameSource;
use super::stats::ChannelCounters;
use super::wire::{Outbox, Reassembly};
use crate::TransportError;

mod over_framed;
mod over_grpc;

type Waiter = oneshot::Sender<Result<pb::LinkReply, TransportError>>;

/// A stream up this long was a working one: after it breaks, the next is
/// dialled at once.
const STEADY: Duration = Duration::from_secs(1);

/// Whether requests may be queued now.
#[derive(Debug, Clone)]
enum Link {
    /// Dialling (or about to): requests queue and go once it is up.
    Connecting,
    Up,
    /// The last attempt failed: requests fail with this until the next.
    Down(String),
}

#[derive(Debug)]
struct State {
    link: Link,
    outbox: Outbox,
    waiting: HashMap<u64, Waiter>,
    next_id: u64,
    /// The ping in flight: its id and when it left.
    ping: Option<(u64, Instant)>,
    /// Counts streams opened: a stream of an earlier one takes no frames.
    session: u64,
}

#[derive(Debug)]
struct Shared {
    address: String,
    channel: &'static str,
    config: Arc<LinksConfig>,
    counters: Arc<ChannelCounters>,
    state: Mutex<State>,
    /// Wakes the stream's frames (see [`RequestFrames`]) when the outbox
    /// gets a message.
    wake: AtomicWaker,
    /// Frames read so far: a connection that still delivers is alive,
    /// whether or not its pong has made it through yet.
    frames_read: AtomicU64,
}

/// A handle on one connection; dropping it ends the connection's task.
#[derive(Debug)]
pub(crate) struct Connection {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Removes a request's waiter when its caller stops waiting (deadline or
/// dropped), so the table only holds requests someone waits for, and tells
/// the peer to drop the request's work.
struct Forget<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        let shared = self.shared;
        let mut state = shared.state.lock();
        if state.waiting.remove(&self.id).is_none() {
            return; // answered, or failed with its connection
        }
        shared.counters.in_flight.fetch_sub(1, Ordering::Relaxed);
        // Unanswered: the peer is working on it for nobody, or will once
        // the connection being dialled is up and the request goes out; the
        // cancel follows it in order either way. (Taking the request back
        // out of the queue instead would cost a scan of the queue per
        // abandoned request, which a flapping peer makes quadratic.) A
        // broken connection cleared its queue and its waiters already.
        let cancel = pb::LinkMessage {
            id: self.id,
            body: Some(pb::link_message::Body::Cancel(pb::LinkCancel {})),
        };
        let size = cancel.encoded_len();
        shared.enqueue(&mut state, cancel, size);
        drop(state);
        shared.wake.wake();
    }
}

impl Connection {
    pub(crate) fn open(
        address: &str,
        channel: &'static str,
        config: Arc<LinksConfig>,
        counters: Arc<ChannelCounters>,
    ) -> Self {
        let shared = Arc::new(Shared {
            address: address.to_owned(),
            channel,
            state: Mutex::new(State {
                link: Link::Connecting,
                outbox: Outbox::new(config.framing()),
                waiting: HashMap::new(),
                next_id: 1,
                ping: None,
                session: 0,
            }),
            config,
            counters,
            wake: AtomicWaker::new(),
            frames_read: AtomicU64::new(0),
        });
        let task = tokio::spawn(shared.clone().keep_connected());
        Self { shared, task }
    }

    /// Sends `request` and waits for its reply, at most `timeout` (plus a
    /// little: the peer enforces the deadline itself, this bounds a peer
    /// that stopped answering on a connection that still looks open).
    pub(crate) async fn request(
        &self,
        request: pb::LinkRequest,
        timeout: Duration,
    ) -> Result<pb::LinkReply, TransportError> {
        let shared = &*self.shared;
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut state = shared.state.lock();
            if let Link::Down(reason) = &state.link {
                return Err(shared.unreachable(reason));
            }
            let id = state.next_id;
            state.next_id = state.next_id.wrapping_add(1);
            let message = pb::LinkMessage {
                id,
                body: Some(pb::link_message::Body::Request(request)),
            };
            let size = message.encoded_len();
            let queued = shared.counters.queued_bytes.load(Ordering::Relaxed);
            let limit = shared.config.queue_bytes;
            if queued > 0 && queued.saturating_add(size) > limit {
                return Err(TransportError::Overloaded {
                    address: shared.address.clone(),
                    channel: shared.channel,
                    queued,
                    limit,
                });
            }
            state.waiting.insert(id, tx);
            shared.enqueue(&mut state, message, size);
            shared.counters.in_flight.fetch_add(1, Ordering::Relaxed);
            id
        };
        shared.wake.wake();
        let _forget = Forget { shared, id };
        let slack = Duration::from_millis(250);
        match tokio::time::timeout(timeout.saturating_add(slack), rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(shared.unreachable("the connection closed")),
            Err(_) => Err(TransportError::Timeout {
                address: shared.address.clone(),
                timeout,
            }),
        }
    }
}

impl Shared {
    fn unreachable(&self, reason: &str) -> TransportError {
        TransportError::Unreachable {
            address: self.address.clone(),
            reason: format!("{} link: {reason}", self.channel),
        }
    }

    /// Queues `message` of `size` encoded bytes and counts it as queued.
    fn enqueue(&self, state: &mut State, message: pb::LinkMessage, size: usize) {
        state.outbox.push_sized(message, size);
        self.counters
            .queued_bytes
            .fetch_add(size, Ordering::Relaxed);
    }

    async fn keep_connected(self: Arc<Self>) {
        let mut backoff = redial_backoff();
        loop {
            let started = Instant::now();
            let session = match self.config.protocol {
                LinkProtocol::Framed => self.session_framed().await,
                LinkProtocol::Grpc => self.session_grpc().await,
            };
            let (reason, was_up) = match session {
                Ok(()) => ("the peer closed the stream".to_owned(), true),
                Err((reason, was_up)) => (reason, was_up),
            };
            // A peer that ends every stream at once (a daemon draining its
            // links before it stops) must not be dialled in a hot loop.
            if was_up && started.elapsed() < STEADY {
                self.counters.reconnects.fetch_add(1, Ordering::Relaxed);
                self.fail_all(&reason, Link::Connecting);
                tokio::time::sleep(backoff.next_pause()).await;
            } else if was_up {
                // Only what was in flight on the broken stream fails; new
                // requests wait for the stream dialled at once.
                backoff.reset();
                self.counters.reconnects.fetch_add(1, Ordering::Relaxed);
                info!(peer = %self.address, channel = self.channel, %reason, "peer link broke; reconnecting");
                self.fail_all(&reason, Link::Connecting);
            } else {
                debug!(peer = %self.address, channel = self.channel, %reason, "cannot open a peer link");
                self.fail_all(&reason, Link::Down(reason.clone()));
                tokio::time::sleep(backoff.next_pause()).await;
                self.state.lock().link = Link::Connecting;
            }
        }
    }

    /// Fails every request queued or in flight; `next` says whether new
    /// ones queue (for the next stream) or fail too.
    fn fail_all(&self, reason: &str, next: Link) {
        let (waiting, queued) = {
            let mut state = self.state.lock();
            state.link = next;
            state.ping = None;
            // The ended stream takes no more frames: they wait for the next.
            state.session = state.session.wrapping_add(1);
            let queued = state.outbox.bytes();
            state.outbox.clear();
            (std::mem::take(&mut state.waiting), queued)
        };
        self.counters
            .queued_bytes
            .fetch_sub(queued, Ordering::Relaxed);
        self.counters
            .in_flight
            .fetch_sub(waiting.len(), Ordering::Relaxed);
        for (_, waiter) in waiting {
            let _ = waiter.send(Err(self.unreachable(reason)));
        }
    }

    /// The peer's address as a URI (plain `host:port` means `http://`).
    fn uri(&self) -> String {
        if self.address.contains("://") {
            self.address.clone()
        } else {
            format!("http://{}", self.address)
        }
    }

    /// Numbers a new stream: from now on an earlier stream's
    /// [`RequestFrames`] take nothing more from the outbox.
    fn next_session(&self) -> u64 {
        let mut state = self.state.lock();
        state.session = state.session.wrapping_add(1);
        state.session
    }

    /// The stream is open: requests go out on it from now on.
    fn up(&self) {
        self.state.lock().link = Link::Up;
        self.counters.connected.fetch_add(1, Ordering::Relaxed);
    }

    fn hello(&self, authorization: String) -> pb::LinkFrame {
        pb::LinkFrame {
            hello: Some(pb::LinkHello {
                node: self.config.node.clone(),
                channel: self.channel.to_owned(),
                authorization,
            }),
            ..pb::LinkFrame::default()
        }
    }

    async fn read(&self, mut incoming: impl FrameSource) -> Result<(), String> {
        let mut reassembly = Reassembly::new(self.config.max_message_bytes);
        loop {
            let frame = incoming
                .next_frame()
                .await?
                .ok_or_else(|| "the peer ended the stream".to_owned())?;
            self.frames_read.fetch_add(1, Ordering::Relaxed);
            ChannelCounters::add(&self.counters.bytes_received, frame.encoded_len());
            for message in frame.messages {
                self.receive(message);
            }
            for chunk in frame.chunks {
                if let Some(message) = reassembly.add(chunk).map_err(|e| e.to_string())? {
                    self.receive(message);
                }
            }
        }
    }

    fn receive(&self, message: pb::LinkMessage) {
        ChannelCounters::add(&self.counters.messages_received, 1);
        match message.body {
            Some(pb::link_message::Body::Reply(reply)) => {
                let waiter = self.state.lock().waiting.remove(&message.id);
                if let Some(waiter) = waiter {
                    self.counters.in_flight.fetch_sub(1, Ordering::Relaxed);
                    let _ = waiter.send(Ok(reply));
                }
            }
            Some(pb::link_message::Body::Pong(_)) => {
                let mut state = self.state.lock();
                if let Some((id, sent)) = state.ping {
                    if id == message.id {
                        state.ping = None;
                        let rtt = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX);
                        self.counters.rtt_us.store(rtt.max(1), Ordering::Relaxed);
                    }
                }
            }
            // Requests only travel the other way on this stream.
            _ => debug!(peer = %self.address, "unexpected message on a peer link"),
        }
    }

    /// Measures the round trip now and then, and gives up a connection
    /// that delivered nothing for a whole interval and then nothing for the
    /// keep-alive timeout after a ping (a peer whose host vanished never
    /// closes it). Anything read counts, not just the pong: under a full
    /// link the pong waits behind megabytes already on their way, and a
    /// connection that delivers them is alive.
    async fn ping(&self) -> Result<(), String> {
        let mut every = tokio::time::interval(self.config.keep_alive_interval);
        // After waiting out a timeout, one ping, not a burst of the missed.
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut read_at_last_tick = None;
        loop {
            every.tick().await;
            let read = self.frames_read.load(Ordering::Relaxed);
            let quiet = read_at_last_tick.replace(read) == Some(read);
            let id = {
                let mut state = self.state.lock();
                let id = state.next_id;
                state.next_id = state.next_id.wrapping_add(1);
                state.ping = Some((id, Instant::now()));
                let ping = pb::LinkMessage {
                    id,
                    body: Some(pb::link_message::Body::Ping(pb::LinkPing {})),
                };
                let size = ping.encoded_len();
                self.enqueue(&mut state, ping, size);
                id
            };
            self.wake.wake();
            if !quiet {
                continue;
            }
            tokio::time::sleep(self.config.keep_alive_timeout).await;
            let silent = self.frames_read.load(Ordering::Relaxed) == read;
            if silent
                && self
                    .state
                    .lock()
                    .ping
                    .is_some_and(|(pending, _)| pending == id)
            {
                return Err(format!(
                    "nothing came back from the peer within {:?} of a ping",
                    self.config.keep_alive_timeout
                ));
            }
        }
    }
}

/// The request stream of a link: the hello, then frames cut from the outbox
/// when the connection asks for the next one, so a request costs no hop
/// through a writer task. Ends once a later stream replaced it.
struct RequestFrames {
    shared: Arc<Shared>,
    session: u64,
    hello: Option<pb::LinkFrame>,
}

impl Stream for RequestFrames {
    type Item = pb::LinkFrame;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(hello) = self.hello.take() {
            return Poll::Ready(Some(hello));
        }
        let shared = &self.shared;
        let (frame, taken) = {
            let mut state = shared.state.lock();
            if state.session != self.session {
                return Poll::Ready(None);
            }
            // Under the lock, so that a replaced stream cannot register
            // after its successor did.
            shared.wake.register(cx.waker());
            let before = state.outbox.bytes();
            let frame = state.outbox.next_frame();
            (frame, before.saturating_sub(state.outbox.bytes()))
        };
        let Some(frame) = frame else {
            return Poll::Pending;
        };
        let counters = &shared.counters;
        counters.queued_bytes.fetch_sub(taken, Ordering::Relaxed);
        let messages = frame.messages.len() + frame.chunks.iter().filter(|c| c.last).count();
        ChannelCounters::add(&counters.bytes_sent, frame.encoded_len());
        ChannelCounters::add(&counters.messages_sent, messages);
        Poll::Ready(Some(frame))
    }
}

/// The pauses before dialling a peer again after failed attempts in a row:
/// 100 ms doubling to 2 s, each drawn between half and all of it, so that
/// daemons cut off together do not all dial back at once.
fn redial_backoff() -> Backoff {
    Backoff::new(
        Duration::from_millis(100),
        Duration::from_secs(2),
        0.5..=1.0,
    )
}
