//! Links over loopback, through a TCP proxy the tests can pause (a peer or
//! network that stops reading) and cut (a connection reset), to a stub
//! daemon whose `Inbound` records the order requests reached it
//! (`harness/`): order, resets, back-pressure, timeouts, drain, tokens and
//! the fallback to PeerLink calls. Each test runs once per protocol a daemon
//! may dial with; the stub answers both on one port, as the daemon does.
//! Keep-alive, both ways, is in `keep_alive.rs`.

mod harness;
mod proxy;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinSet;
use troupe_proto::v1 as pb;
use troupe_transport::link::{
    affinity, Authorization, ChannelPlan, Inbound, LinkProtocol, Links, LinksConfig,
};
use troupe_transport::{BoxFuture, TransportError};

use harness::*;
use proxy::Proxy;

fn is_increasing(seqs: &[u64]) -> bool {
    seqs.windows(2).all(|w| w[0] < w[1])
}

/// Many pairs, each sending pipelined requests (not waiting for replies),
/// over several connections: each pair's requests arrive in order; then
/// again after every connection was reset.
async fn each_pairs_order_holds_across_connections_and_a_reset(
    protocol: LinkProtocol,
) -> TestResult {
    let links = Links::new(config(protocol, ChannelPlan::Split { call: 4, bulk: 2 }));
    let recorder = Arc::new(Recorder::default());
    let server = serve(&links, recorder.clone()).await?;
    let proxy = Proxy::start(server).await?;
    let address = proxy.address.to_string();
    const PAIRS: u64 = 64;
    const EACH: u64 = 50;
    for round in 0..2u64 {
        // All requests are queued in order (join_all polls them in order)
        // before any reply comes back.
        let sends = (0..PAIRS).flat_map(|pair| {
            let (links, address) = (&links, &address);
            (0..EACH).map(move |n| async move {
                let payload = if n % 10 == 9 { 100_000 } else { 100 };
                send(
                    links,
                    address,
                    &format!("a{pair}"),
                    round * EACH + n,
                    payload,
                )
                .await
            })
        });
        let results = futures::future::join_all(sends).await;
        let failed = results.iter().filter(|r| r.is_err()).count();
        assert_eq!(failed, 0, "round {round}: {failed} requests failed");
        if round == 0 {
            proxy.cut();
            // Requests sent before a connection noticed the reset would be in
            // flight on it, and fail: wait until every one came back.
            wait_for(|| {
                links
                    .stats()
                    .iter()
                    .all(|s| s.reconnects >= s.connections as u64 && s.connected == s.connections)
            })
            .await?;
        }
    }
    let seen = recorder.seen.lock();
    assert_eq!(seen.len(), PAIRS as usize);
    for (actor, seqs) in seen.iter() {
        // Small and bulk requests travel on different channels: order holds
        // within each class.
        let small: Vec<u64> = seqs.iter().copied().filter(|s| s % 10 != 9).collect();
        let bulk: Vec<u64> = seqs.iter().copied().filter(|s| s % 10 == 9).collect();
        assert!(is_increasing(&small), "{actor}: {small:?}");
        assert!(is_increasing(&bulk), "{actor}: {bulk:?}");
        assert_eq!(seqs.len() as u64, 2 * EACH);
    }
    let stats = links.stats();
    assert!(
        stats.iter().map(|s| s.reconnects).sum::<u64>() >= 1,
        "{stats:?}"
    );
    Ok(())
}

/// A reset in the middle of an 8 MiB transfer fails only what was in
/// flight, saying which peer; the next request succeeds.
async fn a_reset_mid_transfer_fails_only_what_was_in_flight(protocol: LinkProtocol) -> TestResult {
    let (links, proxy, address) = proxied(config(protocol, ChannelPlan::default())).await?;
    // Paused, the transfer stays in flight however fast the machine.
    proxy.pause(true);
    let big = {
        let (links, address) = (links.clone(), address.clone());
        tokio::spawn(async move { send(&links, &address, "big", 1, 8 << 20).await })
    };
    wait_for(|| {
        links
            .stats()
            .iter()
            .any(|s| s.channel == "bulk" && s.in_flight == 1)
    })
    .await?;
    proxy.cut();
    proxy.pause(false);
    match big.await? {
        Err(TransportError::Unreachable { address: peer, .. }) => assert_eq!(peer, address),
        // Not the answer itself: it holds 8 MiB.
        Ok(_) => return Err("the cut transfer was answered".into()),
        Err(other) => return Err(format!("the cut transfer failed with {other:?}").into()),
    }
    // The call channel was cut too, with nothing in flight on it: the next
    // small and large requests go through on new connections.
    wait_until_ok(|| send(&links, &address, "after", 2, 10)).await?;
    let reply = wait_until_ok(|| send(&links, &address, "after", 3, 8 << 20)).await?;
    let Some(pb::link_reply::Result::Invoke(answer)) = reply.result else {
        return Err("no invoke answer".into());
    };
    assert_eq!(answer.payload.map(|p| p.data.len()), Some(8 << 20));
    Ok(())
}

/// A peer that stops reading: senders get `Overloaded` once the channel
/// holds its limit, and the queue never holds more than the limit.
async fn a_peer_that_stops_reading_makes_senders_back_off(protocol: LinkProtocol) -> TestResult {
    let limit = 4 << 20;
    let (links, proxy, address) = proxied(LinksConfig {
        queue_bytes: limit,
        ..config(protocol, ChannelPlan::default())
    })
    .await?;
    proxy.pause(true);
    let overloaded = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut senders = JoinSet::new();
    // Bounded: 400 requests of 256 KiB is 25 times the limit.
    for n in 0..400u64 {
        let (links, address, overloaded) = (links.clone(), address.clone(), overloaded.clone());
        senders.spawn(async move {
            let sent = send(&links, &address, &format!("s{}", n % 8), n, 256 << 10).await;
            if let Err(TransportError::Overloaded { .. }) = sent {
                overloaded.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
    }
    let mut queued_most = 0;
    wait_for(|| {
        let queued = links
            .stats()
            .iter()
            .map(|s| s.queued_bytes)
            .max()
            .unwrap_or(0);
        queued_most = queued_most.max(queued);
        overloaded.load(std::sync::atomic::Ordering::SeqCst) > 0
    })
    .await?;
    proxy.pause(false);
    while let Some(joined) = senders.join_next().await {
        joined?;
    }
    assert!(
        queued_most <= limit + (256 << 10) + 1024,
        "queued {queued_most} over {limit}"
    );
    Ok(())
}

/// Nobody listens: the request fails at once, naming the peer and why.
async fn an_unreachable_peer_fails_at_once_saying_why(protocol: LinkProtocol) -> TestResult {
    let closed = TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    let links = Links::new(config(protocol, ChannelPlan::default()));
    let address = closed.to_string();
    let started = std::time::Instant::now();
    match send(&links, &address, "a", 0, 10).await {
        Err(e @ TransportError::Unreachable { .. }) => {
            assert!(e.to_string().contains(&address), "{e}");
            assert!(e.to_string().contains("refused"), "{e}");
        }
        other => return Err(format!("expected Unreachable, got {other:?}").into()),
    }
    // Between attempts, requests are refused without waiting.
    let again = send(&links, &address, "a", 1, 10).await;
    assert!(
        matches!(again, Err(TransportError::Unreachable { .. })),
        "{again:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    Ok(())
}

/// A peer that stops answering on a connection that stays open: the
/// request ends at its deadline.
async fn a_peer_that_stops_answering_times_out(protocol: LinkProtocol) -> TestResult {
    let (links, proxy, address) = proxied(config(protocol, ChannelPlan::default())).await?;
    proxy.pause(true);
    let request = pb::LinkRequest {
        timeout_ms: 300,
        ..invoke("a", 1, 10)
    };
    let answer = links
        .request(
            &address,
            links.class_of(10),
            affinity("t", "a", ""),
            request,
        )
        .await;
    assert!(
        matches!(answer, Err(TransportError::Timeout { .. })),
        "{answer:?}"
    );
    Ok(())
}

/// A peer that predates framed links serves only the `PeerLink` service:
/// a daemon dialling framed links still reaches it, over PeerLink calls,
/// so old and new daemons mix during a rolling upgrade.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_without_framed_links_is_reached_over_peer_link_calls() -> TestResult {
    let old = Links::new(config(LinkProtocol::Grpc, ChannelPlan::default()));
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?.to_string();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(old.server(Arc::new(Recorder::default())).into_service())
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let links = Links::new(config(LinkProtocol::Framed, ChannelPlan::default()));
    for (seq, payload) in [(1, 10), (2, 300_000)] {
        let reply = send(&links, &address, "a", seq, payload).await?;
        let Some(pb::link_reply::Result::Invoke(answer)) = reply.result else {
            return Err(format!("no invoke answer: {reply:?}").into());
        };
        assert_eq!(answer.payload.map(|p| p.data.len()), Some(payload));
    }
    // The status says how the links travel.
    wait_for(|| {
        links
            .stats()
            .iter()
            .all(|s| s.connected == s.connections && s.connected_grpc == s.connected)
    })
    .await?;
    Ok(())
}

/// Answers only once the test lets it, and says when a request arrived.
struct Held {
    arrived: Arc<tokio::sync::Notify>,
    release: Arc<tokio::sync::Semaphore>,
}

impl Inbound for Held {
    fn handle(&self, _request: pb::LinkRequest) -> BoxFuture<pb::LinkReply> {
        self.arrived.notify_one();
        let release = self.release.clone();
        Box::pin(async move {
            let _ = release.acquire().await;
            pb::LinkReply {
                result: Some(pb::link_reply::Result::Tell(pb::TellResponse::default())),
            }
        })
    }
}

/// A daemon closing its links answers what it took before the stream
/// ends; the sender then redials (without a hot loop) and only new
/// requests find it gone.
async fn draining_answers_what_was_taken_then_ends_the_stream(
    protocol: LinkProtocol,
) -> TestResult {
    let server_links = Links::new(config(protocol, ChannelPlan::default()));
    let held = Arc::new(Held {
        arrived: Arc::default(),
        release: Arc::new(tokio::sync::Semaphore::new(0)),
    });
    let server = serve(&server_links, held.clone()).await?;
    let links = Links::new(config(protocol, ChannelPlan::default()));
    let address = server.to_string();
    let arrived = held.arrived.notified();
    let taken = {
        let (links, address) = (links.clone(), address.clone());
        tokio::spawn(async move { send(&links, &address, "a", 0, 10).await })
    };
    arrived.await;
    server_links.drain_inbound();
    held.release.add_permits(1_000);
    let answer = taken.await??;
    assert!(matches!(
        answer.result,
        Some(pb::link_reply::Result::Tell(_))
    ));
    // The drained stream ended: the sender counts a reconnect.
    wait_for(|| links.stats().iter().any(|s| s.reconnects >= 1)).await?;
    let reconnects = || links.stats().iter().map(|s| s.reconnects).sum::<u64>();
    let before = reconnects();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Streams opened to a draining daemon end at once; redialled with
    // backoff, a few times in 300 ms at most, not thousands.
    assert!(
        reconnects() - before < 20,
        "{} reconnects",
        reconnects() - before
    );
    Ok(())
}

/// A peer that requires a token: a link presenting it carries requests; one
/// without it is refused when it opens, and the request fails as
/// unreachable, saying why.
async fn links_present_the_configured_authorization(protocol: LinkProtocol) -> TestResult {
    let server_links = Links::new(config(protocol, ChannelPlan::default()));
    let refusal = || tonic::Status::unauthenticated("this peer wants its token");
    let address = serve_checked(
        &server_links,
        Arc::new(Recorder::default()),
        Arc::new(move |authorization, _| match authorization {
            "Bearer s3cret" => Ok(()),
            _ => Err(refusal()),
        }),
        |request| match request.metadata().get("authorization") {
            Some(value) if value == "Bearer s3cret" => Ok(request),
            _ => Err(tonic::Status::unauthenticated("this peer wants its token")),
        },
    )
    .await?
    .to_string();

    let with_token = Links::new(LinksConfig {
        authorization: Some(Authorization::fixed("Bearer s3cret".parse()?)),
        ..config(protocol, ChannelPlan::default())
    });
    let reply = wait_until_ok(|| send(&with_token, &address, "a", 0, 10)).await?;
    assert!(reply.result.is_some(), "{reply:?}");

    let without = Links::new(config(protocol, ChannelPlan::default()));
    match send(&without, &address, "a", 0, 10).await {
        Err(e @ TransportError::Unreachable { .. }) => {
            assert!(e.to_string().contains("wants its token"), "{e}");
        }
        other => return Err(format!("expected Unreachable, got {other:?}").into()),
    }
    assert!(!format!("{with_token:?}").contains("s3cret"));
    Ok(())
}

per_protocol!(
    each_pairs_order_holds_across_connections_and_a_reset,
    a_reset_mid_transfer_fails_only_what_was_in_flight,
    a_peer_that_stops_reading_makes_senders_back_off,
    an_unreachable_peer_fails_at_once_saying_why,
    a_peer_that_stops_answering_times_out,
    draining_answers_what_was_taken_then_ends_the_stream,
    links_present_the_configured_authorization,
);
