//! A request whose sender stops waiting (its caller left, or its deadline
//! passed) has its work dropped on the peer (`LinkCancel`), so a turn the
//! peer started for it is cancelled there; one answered in time is not. So
//! is one left while its connection was still being dialled, which goes out
//! once the connection is up. Each test runs once per protocol a daemon may
//! dial with.

mod harness;
mod proxy;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use troupe_proto::v1 as pb;
use troupe_transport::link::{ChannelPlan, Inbound, LinkProtocol, Links};
use troupe_transport::BoxFuture;

use harness::*;
use proxy::Proxy;

/// How long a test waits for something that should happen at once.
const WAIT: Duration = Duration::from_secs(10);

/// Works on a request until dropped, saying when it started and when its
/// work was dropped; `answer` lets it finish instead.
#[derive(Default)]
struct Endless {
    started: Notify,
    dropped: Arc<Notify>,
    answer: Arc<Notify>,
}

/// Says its work was dropped, unless it finished.
struct OnDrop(Option<Arc<Notify>>);

impl OnDrop {
    /// The work finished: nothing to say.
    fn finished(&mut self) {
        self.0 = None;
    }
}

impl Drop for OnDrop {
    fn drop(&mut self) {
        if let Some(dropped) = self.0.take() {
            dropped.notify_one();
        }
    }
}

impl Inbound for Endless {
    fn handle(&self, _request: pb::LinkRequest) -> BoxFuture<pb::LinkReply> {
        self.started.notify_one();
        let answer = self.answer.clone();
        // Made here, not in the future: work dropped before its first poll
        // (its cancel came in the same frame) is dropped work too.
        let mut guard = OnDrop(Some(self.dropped.clone()));
        Box::pin(async move {
            answer.notified().await;
            guard.finished();
            pb::LinkReply {
                result: Some(pb::link_reply::Result::Tell(pb::TellResponse::default())),
            }
        })
    }
}

async fn a_request_its_sender_left_is_dropped_on_the_peer(protocol: LinkProtocol) -> TestResult {
    let server_links = Links::new(config(protocol, ChannelPlan::default()));
    let endless = Arc::new(Endless::default());
    let server = serve(&server_links, endless.clone()).await?;
    let links = Links::new(config(protocol, ChannelPlan::default()));
    let address = server.to_string();

    // Answered in time: its work runs to the end.
    let started = endless.started.notified();
    let answered = {
        let (links, address) = (links.clone(), address.clone());
        tokio::spawn(async move { send(&links, &address, "a", 1, 10).await })
    };
    started.await;
    endless.answer.notify_one();
    tokio::time::timeout(WAIT, answered).await???;

    // Left: the sender's caller drops its wait, and the peer drops the work.
    let started = endless.started.notified();
    let dropped = endless.dropped.notified();
    let left = {
        let (links, address) = (links.clone(), address.clone());
        tokio::spawn(async move { send(&links, &address, "a", 2, 10).await })
    };
    started.await;
    left.abort();
    tokio::time::timeout(WAIT, dropped)
        .await
        .map_err(|_| "the peer kept working on a request nobody waited for")?;

    // The link goes on.
    let started = endless.started.notified();
    let next = {
        let (links, address) = (links.clone(), address.clone());
        tokio::spawn(async move { send(&links, &address, "b", 3, 10).await })
    };
    started.await;
    endless.answer.notify_one();
    tokio::time::timeout(WAIT, next).await???;
    Ok(())
}

per_protocol!(a_request_its_sender_left_is_dropped_on_the_peer);

async fn a_request_left_while_its_link_was_dialled_is_dropped_on_the_peer(
    protocol: LinkProtocol,
) -> TestResult {
    let server_links = Links::new(config(protocol, ChannelPlan::default()));
    let endless = Arc::new(Endless::default());
    let server = serve(&server_links, endless.clone()).await?;
    // Paused from the start: the connection's opening (hello, or HTTP/2
    // handshake) cannot complete, so it stays in its dialling state and
    // requests queue for it.
    let proxy = Proxy::start(server).await?;
    proxy.pause(true);
    let links = Links::new(config(protocol, ChannelPlan::default()));
    let address = proxy.address.to_string();
    let left = {
        let (links, address) = (links.clone(), address.clone());
        tokio::spawn(async move { send(&links, &address, "a", 1, 10).await })
    };
    wait_for(|| links.stats().iter().any(|s| s.in_flight == 1)).await?;
    left.abort();
    wait_for(|| links.stats().iter().all(|s| s.in_flight == 0)).await?;

    // The link comes up; the queued request goes out and its work is dropped.
    let started = endless.started.notified();
    let dropped = endless.dropped.notified();
    proxy.pause(false);
    tokio::time::timeout(WAIT, started)
        .await
        .map_err(|_| "the queued request never reached the peer")?;
    tokio::time::timeout(WAIT, dropped)
        .await
        .map_err(|_| "the peer kept working on a request left before its link was up")?;
    Ok(())
}

per_protocol!(a_request_left_while_its_link_was_dialled_is_dropped_on_the_peer);
