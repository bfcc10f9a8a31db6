//! Framed links on the daemon's one port: each connection the listener
//! accepted (after TLS, when it is on) is told apart by its first bytes, a
//! link's magic or anything else (an HTTP/2 client's preface); links are
//! checked and served here, the rest go on to the gRPC server with the
//! bytes read put back in front.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use futures::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::mpsc;
use tonic::transport::server::Connected;
use tonic::Status;
use tracing::{debug, info};
use troupe_proto::v1 as pb;

use super::frames_io::{encode_frame, write_frames, FrameReader, MAGIC};
use super::serve::{LinkServer, Replies, ReplyFrames};
use super::wire::Outbox;

/// A client that sends nothing for this long after connecting (or its TLS
/// handshake) is dropped: every client this port serves speaks first.
const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(10);

/// Decides whether a framed link may open: given its hello's
/// `authorization` ("Bearer <token>", or empty) and the connection's
/// information (its client certificate under TLS), the status to refuse it
/// with, as the `PeerLink` service's interceptor would.
pub type Admit<C> = Arc<dyn Fn(&str, &C) -> Result<(), Status> + Send + Sync>;

/// A connection that turned out not to be a link, with the bytes read to
/// tell put back in front of the rest.
#[derive(Debug)]
pub struct NotALink<IO> {
    read: Bytes,
    io: IO,
}

impl<IO> NotALink<IO> {
    /// A connection nothing was read from (a listener without links).
    pub fn unread(io: IO) -> Self {
        Self {
            read: Bytes::new(),
            io,
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for NotALink<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.read.has_remaining() {
            let n = this.read.len().min(buf.remaining());
            buf.put_slice(&this.read.split_to(n));
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for NotALink<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, data)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl<IO: Connected> Connected for NotALink<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

impl LinkServer {
    /// Takes a listener's connections: serves those that open framed links
    /// (when `admit` lets them) and passes the rest on, for the gRPC
    /// server. Accept errors pass on as they came.
    pub fn split_incoming<IO, S>(
        self,
        incoming: S,
        admit: Admit<IO::ConnectInfo>,
    ) -> impl Stream<Item = io::Result<NotALink<IO>>> + Send + 'static
    where
        IO: AsyncRead + AsyncWrite + Connected + Send + Unpin + 'static,
        S: Stream<Item = io::Result<IO>> + Send + 'static,
    {
        let (tx, mut rx) = mpsc::channel(64);
        tokio::spawn(async move {
            let mut incoming = std::pin::pin!(incoming);
            loop {
                let accepted = tokio::select! {
                    () = tx.closed() => break,
                    accepted = incoming.next() => accepted,
                };
                match accepted {
                    None => break,
                    Some(Err(error)) => {
                        if tx.send(Err(error)).await.is_err() {
                            break;
                        }
                    }
                    Some(Ok(io)) => {
                        tokio::spawn(tell_apart(io, tx.clone(), self.clone(), admit.clone()));
                    }
                }
            }
        });
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }
}

/// Reads a connection's first bytes: a link's are served here, anything
/// else goes on to `others` with them.
async fn tell_apart<IO>(
    mut io: IO,
    others: mpsc::Sender<io::Result<NotALink<IO>>>,
    server: LinkServer,
    admit: Admit<IO::ConnectInfo>,
) where
    IO: AsyncRead + AsyncWrite + Connected + Send + Unpin + 'static,
{
    let mut first = [0u8; MAGIC.len()];
    let mut got = 0;
    let read = tokio::time::timeout(FIRST_BYTES_TIMEOUT, async {
        // Stops at the first byte that differs: an HTTP/2 client's preface
        // does at once, and is not held up.
        while got < first.len() && first[..got] == MAGIC[..got] {
            let rest = first.get_mut(got..).unwrap_or_default();
            match io.read(rest).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => got += n,
            }
        }
        true
    })
    .await;
    if read != Ok(true) {
        return;
    }
    if first == MAGIC {
        serve_framed(server, io, admit).await;
        return;
    }
    let read = Bytes::copy_from_slice(first.get(..got).unwrap_or_default());
    let _ = others.send(Ok(NotALink { read, io })).await;
}

/// Serves one framed link: its hello and the check, the hello back (or the
/// refusal), then requests until it ends.
async fn serve_framed<IO>(server: LinkServer, io: IO, admit: Admit<IO::ConnectInfo>)
where
    IO: AsyncRead + AsyncWrite + Connected + Send + Unpin + 'static,
{
    let info = io.connect_info();
    let (read_half, mut write_half) = tokio::io::split(io);
    let mut reader = FrameReader::new(read_half, server.frame_limit);
    let hello = match tokio::time::timeout(FIRST_BYTES_TIMEOUT, reader.read_frame()).await {
        Ok(Ok(Some(pb::LinkFrame {
            hello: Some(hello), ..
        }))) => hello,
        Ok(Ok(_)) => return debug!("a peer link opened without a hello; closed it"),
        Ok(Err(error)) => return debug!(%error, "a peer link failed before its hello"),
        Err(_) => return debug!("a peer link sent no hello in time; closed it"),
    };
    let peer = format!("{}/{}", hello.node, hello.channel);
    let mut answer = BytesMut::new();
    let admitted = admit(&hello.authorization, &info);
    let reply = match &admitted {
        Ok(()) => pb::LinkFrame {
            hello: Some(pb::LinkHello {
                node: server.node.clone(),
                channel: hello.channel.clone(),
                authorization: String::new(),
            }),
            ..pb::LinkFrame::default()
        },
        Err(status) => pb::LinkFrame {
            refused: Some(pb::LinkStatus {
                code: status.code() as i32,
                message: status.message().to_owned(),
                metadata: Default::default(),
            }),
            ..pb::LinkFrame::default()
        },
    };
    encode_frame(&reply, &mut answer);
    let sent = async {
        write_half.write_all(&answer).await?;
        write_half.flush().await
    };
    if let Err(error) = sent.await {
        return debug!(%peer, %error, "a peer link failed before it opened");
    }
    if let Err(status) = admitted {
        let _ = write_half.shutdown().await;
        return info!(%peer, reason = %status.message(), "refused a peer link");
    }
    let replies = Arc::new(Replies::new(Outbox::new(server.framing)));
    let frames = ReplyFrames(replies.clone()).filter_map(|frame| std::future::ready(frame.ok()));
    let writer = tokio::spawn(async move {
        if let Err(error) = write_frames(write_half, frames).await {
            debug!(%error, "writing to a peer link failed");
        }
    });
    server.serve(reader, peer, replies).await;
    let _ = writer.await;
}
