//! What the link tests share: a stub daemon whose `Inbound` records the
//! order requests reached it, serving framed links and the `PeerLink`
//! service on one port as the daemon does; links to it behind the proxy;
//! requests; bounded waits; and the macro that runs a test per protocol.

// Each test file compiles this module for itself and uses part of it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::net::TcpListener;
use troupe_proto::v1 as pb;
use troupe_transport::link::{
    affinity, Admit, ChannelPlan, Inbound, LinkProtocol, Links, LinksConfig,
};
use troupe_transport::{BoxFuture, TransportError};

use super::proxy::Proxy;

pub type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Records, per actor, the sequence numbers (the method name) in the order
/// they arrived; answers with the payload it got.
#[derive(Default)]
pub struct Recorder {
    pub seen: Mutex<HashMap<String, Vec<u64>>>,
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

pub(crate) use per_protocol;

/// Serves `inbound` on a loopback port: framed links and the `PeerLink`
/// service, the links admitted by `admit` and the service's calls by
/// `check`.
pub async fn serve_checked(
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
pub async fn serve(links: &Links, inbound: Arc<dyn Inbound>) -> Result<SocketAddr, std::io::Error> {
    serve_checked(links, inbound, Arc::new(|_, _| Ok(())), Ok).await
}

/// Links to a recorder behind a proxy, with one request answered already
/// and every connection of every channel up: the proxy holds each of them,
/// so what a test does to the proxy (pause, cut) reaches them all. (A
/// connection still being dialled when the proxy is cut would be accepted
/// afterwards and carry on as if nothing happened.)
pub async fn proxied(
    config: LinksConfig,
) -> Result<(Links, Proxy, String), Box<dyn std::error::Error>> {
    let links = Links::new(config);
    let server = serve(&links, Arc::new(Recorder::default())).await?;
    let proxy = Proxy::start(server).await?;
    let address = proxy.address.to_string();
    send(&links, &address, "warm", 0, 10).await?;
    wait_for(|| links.stats().iter().all(|s| s.connected == s.connections)).await?;
    Ok((links, proxy, address))
}

pub fn config(protocol: LinkProtocol, plan: ChannelPlan) -> LinksConfig {
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

pub fn invoke(actor: &str, seq: u64, payload: usize) -> pb::LinkRequest {
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

pub async fn send(
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

pub async fn wait_for(mut condition: impl FnMut() -> bool) -> Result<(), String> {
    for _ in 0..500 {
        if condition() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err("condition not reached within 5 s".into())
}

pub async fn wait_until_ok<T, F, Fut>(mut attempt: F) -> Result<T, TransportError>
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
