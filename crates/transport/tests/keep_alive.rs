//! Keep-alive on links, both ways: a dialler gives up a peer that stopped
//! answering, keeps one that answers slowly, and the answering side lets go
//! of a dialler that went silent. Each test runs once per protocol, against
//! the stub daemon of `harness/`, through the proxy where the path matters.

mod harness;
mod proxy;

use std::sync::Arc;
use std::time::Duration;

use troupe_proto::v1 as pb;
use troupe_transport::link::{ChannelPlan, LinkProtocol, Links, LinksConfig};

use harness::*;

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
/// and failed what was in flight with them, and hyper's HTTP/2 keep-alive
/// did the same to `grpc` links). Pings go out every 10 ms, so one is
/// always in flight when the answer starts to queue up ahead of its pong.
async fn a_slow_but_delivering_link_is_kept(protocol: LinkProtocol) -> TestResult {
    let (links, proxy, address) = proxied(LinksConfig {
        keep_alive_interval: Duration::from_millis(10),
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

per_protocol!(
    a_dialler_gone_silent_is_let_go,
    a_slow_but_delivering_link_is_kept,
    a_silent_peer_is_given_up_by_keep_alive,
);
