//! Links over loopback, through a TCP proxy the tests can pause (a peer or
//! network that stops reading) and cut (a connection reset), to a stub
//! daemon whose `Inbound` records the order requests reached it. Each test
//! runs once per protocol a daemon may dial with; the stub answers both on
//! one port, as the daemon does.

mod proxy;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use troupe_proto::v1 as pb;
use troupe_transport::link::{
    affinity, Admit, Authorization, ChannelPlan, Inbound, LinkProtocol, Links, LinksConfig,
};
use troupe_transport::{BoxFuture, TransportError};

use proxy::Proxy;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Records, per actor, the sequence numbers (the method name) in the order
/// they arrived; answers with the payload it got.
#[derive(Default)]
struct Recorder {
    seen: Mutex<HashMap<String, Vec<u64>>>,
}

impl Inbound for Recorder {
    fn handle(&self, request: pb::LinkRequest) -> BoxFuture<pb::LinkReply> {
        let Some(pb::link_request::Call::Invoke(invoke)) = request.call else {
            return Box::pin(async { pb::LinkReply::default() });
        };
        let actor = invoke.actor.map(|a| a.id).unwrap_or_default();
        if let Ok(seq) = invoke.method.parse() {
            self.seen.lock().entry(actor).or_default().push(seq);
        }
        let payload = invoke.payload;
        Box::pin(async move {
            pb::LinkReply {
                result: Some(pb::link_reply::Result::Invoke(pb::InvokeResponse {
                    payload,
                })),
            }
        })
    }
}

/// Runs `$test` once per protocol, as `$test::framed` and `$test::grpc`.
macro_rules! per_protocol {
    ($($test:ident),* $(,)?) => {$(
        mod $test {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn framed() -> super::TestResult {
                super::$test(super::LinkProtocol::Framed).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn grpc() -> super::TestResult {
                super::$test(super::LinkProtocol::Grpc).await
            }
        }
    )*};
}

/// Serves `inbound` on a loopback port: framed links and the `PeerLink`
/// service, the links admitted by `admit` and the service's calls by
/// `check`.
async fn serve_checked(
    links: &Links,
    inbound: Arc<dyn Inbound>,
    admit: Admit<tonic::transport::server::TcpConnectInfo>,
    check: fn(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status>,
) -> Result<SocketAddr, std::io::Error> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let server = links.server(inbound);
    let others = server.clone().split_incoming(
        tokio_stream::wrappers::TcpListenerStream::new(listener),
        admit,
    );
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(tonic::service::interceptor::InterceptedService::new(
                server.into_service(),
                check,
            ))
            .serve_with_incoming(others),
    );
    Ok(address)
}

/// Serves `inbound` on a loopback port to anyone.
async fn serve(links: &Links, inbound: Arc<dyn Inbound>) -> Result<SocketAddr, std::io::Error> {
    serve_checked(links, inbound, Arc::new(|_, _| Ok(())), Ok).await
}

/// Links to a recorder behind a proxy, with one request answered already.
async fn proxied(
    config: LinksConfig,
) -> Result<(Links, Proxy, String), Box<dyn std::error::Error>> {
    let links = Links::new(config);
    let server = serve(&links, Arc::new(Recorder::default())).await?;
    let proxy = Proxy::start(server).await?;
    let address = proxy.address.to_string();
    send(&links, &address, "warm", 0, 10).await?;
    Ok((links, proxy, address))
}

fn config(protocol: LinkProtocol, plan: ChannelPlan) -> LinksConfig {
    LinksConfig {
        node: "test".into(),
        protocol,
        channels: plan,
        connect_timeout: Duration::from_secs(2),
        default_timeout: Duration::from_secs(10),
        max_message_bytes: 16 << 20,
        ..LinksConfig::default()
    }
}

fn invoke(actor: &str, seq: u64, payload: usize) -> pb::LinkRequest {
    pb::LinkRequest {
        timeout_ms: 10_000,
        call: Some(pb::link_request::Call::Invoke(pb::InvokeRequest {
            actor: Some(pb::ActorRef {
                r#type: "t".into(),
                id: actor.into(),
            }),
            method: seq.to_string(),
            payload: Some(pb::Payload {
                data: Bytes::from(vec![7u8; payload]),
                ..pb::Payload::default()
            }),
            ..pb::InvokeRequest::default()
        })),
        ..pb::LinkRequest::default()
    }
}

async fn send(
    links: &Links,
    address: &str,
    actor: &str,
    seq: u64,
    payload: usize,
) -> Result<pb::LinkReply, TransportError> {
    let class = links.class_of(payload);
    links
        .request(
            address,
            class,
            affinity("t", actor, ""),
            invoke(actor, seq, payload),
        )
        .await
}

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
        other => return Err(format!("the cut transfer ended with {other:?}").into()),
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

async fn wait_for(mut condition: impl FnMut() -> bool) -> Result<(), String> {
    for _ in 0..500 {
        if condition() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err("condition not reached within 5 s".into())
}

async fn wait_until_ok<T, F, Fut>(mut attempt: F) -> Result<T, TransportError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, TransportError>>,
{
    let mut last = None;
    for _ in 0..100 {
        match attempt().await {
            Ok(answer) => return Ok(answer),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(last.unwrap_or(TransportError::Unreachable {
        address: String::new(),
        reason: "never tried".into(),
    }))
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

/// A peer that goes silent with its connections open (its host gone, or a
/// network that drops everything): unanswered pings give the links up
/// within the keep-alive timeout, instead of each request waiting out its
/// deadline on a connection that looks open.
async fn a_silent_peer_is_given_up_by_keep_alive(protocol: LinkProtocol) -> TestResult {
    let (links, proxy, _address) = proxied(LinksConfig {
        keep_alive_interval: Duration::from_millis(200),
        keep_alive_timeout: Duration::from_millis(300),
        ..config(protocol, ChannelPlan::default())
    })
    .await?;
    assert!(links.stats().iter().any(|s| s.connected > 0));
    proxy.pause(true);
    wait_for(|| links.stats().iter().all(|s| s.connected == 0)).await?;
    Ok(())
}

/// A dialler whose host vanished sends nothing more and never resets its
/// connection: the answering side lets the stream go once two of the
/// dialler's pings failed to come, instead of holding it (its task, buffers
/// and socket) for good.
async fn a_dialler_gone_silent_is_let_go(protocol: LinkProtocol) -> TestResult {
    use futures::StreamExt;
    use prost::Message;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let links = Links::new(LinksConfig {
        keep_alive_interval: Duration::from_millis(100),
        keep_alive_timeout: Duration::from_millis(100),
        ..config(protocol, ChannelPlan::default())
    });
    let address = serve(&links, Arc::new(Recorder::default())).await?;
    let hello = pb::LinkFrame {
        hello: Some(pb::LinkHello {
            node: "silent".into(),
            channel: "call/0".into(),
            authorization: String::new(),
        }),
        ..pb::LinkFrame::default()
    };
    // Far beyond the half second the stream may stay quiet: only a stream
    // that is never let go runs into it.
    let bound = Duration::from_secs(20);
    match protocol {
        LinkProtocol::Framed => {
            let mut stream = tokio::net::TcpStream::connect(address).await?;
            let encoded = hello.encode_to_vec();
            let mut bytes = b"TRPLINK1".to_vec();
            bytes.extend_from_slice(&u32::try_from(encoded.len())?.to_be_bytes());
            bytes.extend_from_slice(&encoded);
            stream.write_all(&bytes).await?;
            wait_for(|| links.inbound_stats().streams == 1).await?;
            // The hello back, then the end, with nothing written after.
            let mut answer = Vec::new();
            tokio::time::timeout(bound, stream.read_to_end(&mut answer)).await??;
            assert!(!answer.is_empty());
        }
        LinkProtocol::Grpc => {
            let mut client =
                pb::peer_link_client::PeerLinkClient::connect(format!("http://{address}")).await?;
            let frames = futures::stream::iter([hello]).chain(futures::stream::pending());
            let mut replies = client.open(frames).await?.into_inner();
            wait_for(|| links.inbound_stats().streams == 1).await?;
            let end = tokio::time::timeout(bound, replies.message()).await??;
            assert!(end.is_none(), "{end:?}");
        }
    }
    // Counted where operators look (`/metrics`), and no longer served.
    assert_eq!(links.inbound_stats().let_go, 1);
    wait_for(|| links.inbound_stats().streams == 0).await?;
    Ok(())
}

/// A link that keeps delivering an answer slowly is alive, even when its
/// pong waits behind megabytes of it for longer than the keep-alive timeout
/// (under a full WAN link the framed links' first rule gave such links up
/// and failed what was in flight with them).
async fn a_slow_but_delivering_link_is_kept(protocol: LinkProtocol) -> TestResult {
    let (links, proxy, address) = proxied(LinksConfig {
        keep_alive_interval: Duration::from_millis(300),
        keep_alive_timeout: Duration::from_millis(300),
        ..config(protocol, ChannelPlan::default())
    })
    .await?;
    // 8 MiB back at 4 MB/s: about two seconds of answer, a 256 KiB frame
    // every 64 ms, while the pong queues behind the socket buffers' MBs.
    proxy.slow_answers(4_000_000);
    let reply = send(&links, &address, "big", 1, 8 << 20).await?;
    let Some(pb::link_reply::Result::Invoke(answer)) = reply.result else {
        return Err(format!("no invoke answer: {reply:?}").into());
    };
    assert_eq!(answer.payload.map(|p| p.data.len()), Some(8 << 20));
    let reconnects: u64 = links.stats().iter().map(|s| s.reconnects).sum();
    assert_eq!(reconnects, 0);
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
                result: Some(pb::link_reply::Result::Tell(pb::TellResponse {})),
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
    a_dialler_gone_silent_is_let_go,
    a_slow_but_delivering_link_is_kept,
    a_silent_peer_is_given_up_by_keep_alive,
    each_pairs_order_holds_across_connections_and_a_reset,
    a_reset_mid_transfer_fails_only_what_was_in_flight,
    a_peer_that_stops_reading_makes_senders_back_off,
    an_unreachable_peer_fails_at_once_saying_why,
    a_peer_that_stops_answering_times_out,
    draining_answers_what_was_taken_then_ends_the_stream,
    links_present_the_configured_authorization,
);
