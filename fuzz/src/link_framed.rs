//! A framed link as the daemon's listener takes it: the connection goes
//! through `LinkServer::split_incoming` (the first bytes told apart, the
//! hello read and checked, the link served), then the transport's `serve`
//! loop and the daemon's `link_api` over a real runtime, as `link_stream`
//! drives the `PeerLink` service. Operations: a frame (the body behind its
//! length, whatever it holds), raw bytes (a frame cut short, a length that
//! lies), a hello with a token (`Bearer ok` is let in, any other refused).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use prost::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};
use tonic::transport::server::Connected;
use troupe_proto::v1 as pb;
use troupe_transport::link::Admit;

use crate::client_api::ClientApi;
use crate::daemon::{self, block_on, bounded};
use crate::input::{Ops, OpsWriter};
use crate::link::{fuzz_links, state_read};
use crate::link_api::LinkApi;

const MAX_OPS: usize = 64;

/// One end of an in-memory connection, as a listener would accept it.
struct Pipe(DuplexStream);

impl AsyncRead for Pipe {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Pipe {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, data)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

impl Connected for Pipe {
    type ConnectInfo = ();

    fn connect_info(&self) {}
}

fn framed(body: &[u8]) -> Vec<u8> {
    let mut bytes = u32::try_from(body.len())
        .unwrap_or(u32::MAX)
        .to_be_bytes()
        .to_vec();
    bytes.extend_from_slice(body);
    bytes
}

fn hello(authorization: &str) -> pb::LinkFrame {
    pb::LinkFrame {
        hello: Some(pb::LinkHello {
            node: "peer-a".into(),
            channel: "call".into(),
            authorization: authorization.into(),
        }),
        ..Default::default()
    }
}

/// Runs one framed connection against a fresh daemon.
pub fn run_framed(data: &[u8]) {
    block_on(async {
        let runtime = daemon::start(true);
        let server = fuzz_links().server(Arc::new(LinkApi::new(ClientApi::new(runtime.clone()))));
        let admit: Admit<()> = Arc::new(|authorization, _| match authorization {
            "" | "Bearer ok" => Ok(()),
            _ => Err(tonic::Status::unauthenticated("not this token")),
        });
        let (near, far) = tokio::io::duplex(64 * 1024);
        let mut others =
            Box::pin(server.split_incoming(futures::stream::iter([Ok(Pipe(far))]), admit));
        let (mut read_half, mut write_half) = tokio::io::split(near);
        // The peer reads its replies as they come, as a real one does.
        let replies = tokio::spawn(async move {
            let mut sink = vec![0u8; 64 * 1024];
            while let Ok(n) = read_half.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        });
        let _ = write_half.write_all(b"TRPLINK1").await;
        for (op, body) in Ops::new(data).take(MAX_OPS) {
            let bytes = match op % 3 {
                0 => framed(body),
                1 => body.to_vec(),
                _ => framed(&hello(&String::from_utf8_lossy(body)).encode_to_vec()),
            };
            if write_half.write_all(&bytes).await.is_err() {
                break;
            }
            for _ in 0..8 {
                tokio::task::yield_now().await;
            }
        }
        let _ = write_half.shutdown().await;
        bounded("the framed link's end", replies).await.ok();
        // A link is never passed on to the gRPC server.
        let passed = futures::StreamExt::next(&mut others);
        assert!(
            futures::FutureExt::now_or_never(passed).flatten().is_none(),
            "a link's connection was passed on as another protocol's"
        );
        daemon::stop(runtime).await;
    });
}

/// Seeds for `link_framed`: a hello with a request and a ping, a refused
/// token, a frame cut short.
pub fn framed_seeds() -> Vec<Vec<u8>> {
    let request = pb::LinkFrame {
        messages: vec![
            state_read(1),
            pb::LinkMessage {
                id: 2,
                body: Some(pb::link_message::Body::Ping(pb::LinkPing {})),
            },
        ],
        ..Default::default()
    };
    vec![
        OpsWriter::new()
            .op(2, b"Bearer ok")
            .op(0, &request.encode_to_vec())
            .finish(),
        OpsWriter::new()
            .op(2, b"Bearer wrong")
            .op(0, &request.encode_to_vec())
            .finish(),
        OpsWriter::new()
            .op(0, &hello("").encode_to_vec())
            .op(1, &[0, 0, 1, 0, 8, 1])
            .finish(),
    ]
}
