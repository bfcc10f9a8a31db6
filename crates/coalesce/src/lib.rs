//! One TCP write per burst of HTTP/2 frames, on every connection Troupe
//! opens or accepts: the SDKs' connections to their daemon, the daemon's
//! listener (clients, apps, peers) and its links to other daemons.
//!
//! hyper writes a message's HEADERS from the connection task and its DATA
//! (and a response's trailers) from a second task, which waits for send
//! capacity that the connection task assigns only once it has written the
//! HEADERS. Written as they come, each call or reply is two or three
//! segments, and the peer wakes for each (a wake costs more than the read on
//! a busy host; a write costs the sender the receiver's softirq work on
//! loopback). [`Coalesced`] holds what the connection writes until it
//! flushes, and lets each flush wait one pass of the scheduler, so the
//! frames of tasks that pass woke leave in the same write.
//!
//! [`Connector`] dials TCP for `tonic`'s endpoints and wraps the socket,
//! [`UnixConnector`] a Unix domain socket; [`incoming`] wraps a listener's
//! connections. TLS, when configured, goes on
//! top, so its records coalesce too.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::{Stream, StreamExt};
use tonic::codegen::http::Uri;
use tonic::transport::server::{Connected, TcpIncoming};

/// A write at least this large goes to the socket as it is: copying it would
/// cost more than the segment it saves.
const PASS_THROUGH: usize = 16 * 1024;
/// What is held at most before it is written, flush or not.
const MAX_HELD: usize = 64 * 1024;

/// An I/O object whose writes are held until a flush, which itself waits one
/// scheduler pass first.
#[derive(Debug)]
pub struct Coalesced<T> {
    inner: T,
    held: Vec<u8>,
    /// How much of `held` the socket took already.
    written: usize,
    /// The pending flush has yielded its one pass.
    yielded: bool,
    /// How the flush waits its pass: see [`Coalesced::poll_flush`].
    defer: bool,
    /// Off while a TLS handshake runs over this socket: a handshake that
    /// fails writes its alert and drops the socket without a flush, and a
    /// held alert would never leave (the peer would see a bare close).
    holding: bool,
}

impl<T> Coalesced<T> {
    /// Wraps `inner`; called where the connection will be polled (on the
    /// runtime that drives it), which decides how its flushes wait.
    pub fn new(inner: T) -> Self {
        let defer = tokio::runtime::Handle::try_current()
            .is_ok_and(|runtime| runtime.metrics().num_workers() > 1);
        Self {
            inner,
            held: Vec::new(),
            written: 0,
            yielded: false,
            defer,
            holding: true,
        }
    }

    /// As [`Coalesced::new`], but writing through until [`Coalesced::hold`]:
    /// for a socket that carries a TLS handshake first.
    pub fn after_handshake(inner: T) -> Self {
        Self {
            holding: false,
            ..Self::new(inner)
        }
    }

    /// Starts holding writes until each flush (the handshake is done).
    pub fn hold(&mut self) {
        self.holding = true;
    }

    /// The wrapped socket, e.g. for its peer's address.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }
}

impl<T: AsyncWrite + Unpin> Coalesced<T> {
    /// Writes out everything held, in order.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some(rest) = self.held.get(self.written..).filter(|r| !r.is_empty()) {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, rest))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written = self.written.saturating_add(n);
        }
        self.held.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }

    fn holds_room_for(&self, len: usize) -> bool {
        self.holding && len < PASS_THROUGH && self.held.len().saturating_add(len) <= MAX_HELD
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesced<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.holds_room_for(data.len()) {
            this.held.extend_from_slice(data);
            return Poll::Ready(Ok(data.len()));
        }
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_write(cx, data)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let len = bufs.iter().fold(0usize, |n, b| n.saturating_add(b.len()));
        if this.holds_room_for(len) {
            for buf in bufs {
                this.held.extend_from_slice(buf);
            }
            return Poll::Ready(Ok(len));
        }
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        // Small slices are gathered into `held` either way; large ones go on
        // to the socket, which takes them vectored.
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.held.len() > this.written && !this.yielded {
            // Polled again after the tasks this pass woke, which add their
            // frames before the write. On a runtime with several workers the
            // wake is deferred as `yield_now` defers it (until this worker
            // runs out of ready tasks): a plain self-wake counts as a yield
            // there and wakes an idle worker to steal the connection, two
            // context switches per flush. With one worker a self-wake is
            // cheaper: the deferred one costs a poll of the I/O driver.
            this.yielded = true;
            if this.defer {
                let deferred = std::pin::pin!(tokio::task::yield_now()).poll(cx);
                debug_assert!(deferred.is_pending());
            } else {
                cx.waker().wake_by_ref();
            }
            return Poll::Pending;
        }
        ready!(this.poll_drain(cx))?;
        this.yielded = false;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Coalesced<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: Connected> Connected for Coalesced<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// A listener's connections, without Nagle's delay (the coalescing does its
/// job without adding one), each wrapped, as tonic's `serve_with_incoming`
/// takes them.
pub fn incoming(listener: TcpListener) -> impl Stream<Item = io::Result<Coalesced<TcpStream>>> {
    TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .map(|accepted| accepted.map(Coalesced::new))
}

/// Dials `host:port` of an endpoint's URI over TCP without Nagle's delay (the
/// coalescing above does its job without adding one), for
/// `Endpoint::connect_with_connector_lazy`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Connector;

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<Coalesced<TcpStream>>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, io::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        Box::pin(async move { Ok(TokioIo::new(Coalesced::new(dial(&uri).await?))) })
    }
}

/// The host a URI names, an IPv6 literal without the brackets a URI puts
/// around it (a socket address or TLS server name has none).
pub fn host_of(uri: &Uri) -> Option<&str> {
    uri.host()
        .map(|host| host.trim_start_matches('[').trim_end_matches(']'))
}

/// Dials `host:port` of `uri` over TCP without Nagle's delay: what every
/// connector here (and the daemons' framed links) opens first.
pub async fn dial(uri: &Uri) -> io::Result<TcpStream> {
    let invalid = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("the address {uri} names no host and port"),
        )
    };
    let host = host_of(uri).ok_or_else(invalid)?;
    let port = uri.port_u16().ok_or_else(invalid)?;
    let stream = TcpStream::connect((host, port)).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// The socket path of a `unix:` address, in gRPC's forms (`unix:relative`,
/// `unix:/absolute`, `unix:///absolute`); `None` for any other address.
pub fn unix_socket_path(address: &str) -> Option<&str> {
    let rest = address.strip_prefix("unix:")?;
    Some(rest.strip_prefix("//").unwrap_or(rest))
}

/// Dials a Unix domain socket (a daemon's `--listen-unix`) for tonic's
/// endpoints, whatever the endpoint's URI says.
#[cfg(unix)]
#[derive(Debug, Clone)]
pub struct UnixConnector {
    path: std::sync::Arc<std::path::Path>,
}

#[cfg(unix)]
impl UnixConnector {
    pub fn new(path: impl Into<std::path::PathBuf>) -> Self {
        Self {
            path: path.into().into(),
        }
    }
}

#[cfg(unix)]
impl tower_service::Service<Uri> for UnixConnector {
    type Response = TokioIo<Coalesced<tokio::net::UnixStream>>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, io::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let path = self.path.clone();
        Box::pin(async move {
            let stream = tokio::net::UnixStream::connect(&*path).await?;
            Ok(TokioIo::new(Coalesced::new(stream)))
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use tokio::io::AsyncWriteExt;

    #[test]
    fn grpc_forms_of_a_unix_address_name_their_path() {
        assert_eq!(
            unix_socket_path("unix:/run/troupe.sock"),
            Some("/run/troupe.sock")
        );
        assert_eq!(
            unix_socket_path("unix:///run/troupe.sock"),
            Some("/run/troupe.sock")
        );
        assert_eq!(unix_socket_path("unix:troupe.sock"), Some("troupe.sock"));
        assert_eq!(unix_socket_path("127.0.0.1:7420"), None);
        assert_eq!(unix_socket_path("http://unix:7420"), None);
    }

    /// Records each write the socket would have made.
    #[derive(Default)]
    struct Writes(Vec<Vec<u8>>);

    impl AsyncWrite for Writes {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.get_mut().0.push(data.to_vec());
            Poll::Ready(Ok(data.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// Frames written between a flush's first poll and its write join it.
    async fn frames_join_a_pending_flush() {
        let mut io = Coalesced::new(Writes::default());
        io.write_all(b"headers").await.unwrap();
        // The first flush yields its pass and writes nothing yet.
        let first = poll_fn(|cx| Poll::Ready(Pin::new(&mut io).poll_flush(cx))).await;
        assert!(first.is_pending());
        assert!(io.inner.0.is_empty());
        io.write_all(b"data").await.unwrap();
        io.flush().await.unwrap();
        assert_eq!(io.inner.0, vec![b"headersdata".to_vec()]);
    }

    #[tokio::test]
    async fn frames_written_before_a_flush_leave_in_one_write() {
        frames_join_a_pending_flush().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn with_several_workers_the_flush_defers_its_wake_and_still_writes_once() {
        // Built on a worker of this runtime, as a listener's connections are.
        let deferred = tokio::spawn(async { Coalesced::new(Writes::default()).defer })
            .await
            .unwrap();
        assert!(deferred);
        tokio::spawn(frames_join_a_pending_flush()).await.unwrap();
        // A flush nothing else wakes is still woken, and writes.
        tokio::spawn(async {
            let mut io = Coalesced::new(Writes::default());
            io.write_all(b"ping").await.unwrap();
            io.flush().await.unwrap();
            assert_eq!(io.inner.0, vec![b"ping".to_vec()]);
        })
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn a_handshake_writes_through_until_holding_starts() {
        let mut io = Coalesced::after_handshake(Writes::default());
        io.write_all(b"alert").await.unwrap();
        assert_eq!(io.inner.0, vec![b"alert".to_vec()]);
        io.hold();
        io.write_all(b"headers").await.unwrap();
        assert_eq!(io.inner.0.len(), 1);
        io.flush().await.unwrap();
        assert_eq!(io.inner.0, vec![b"alert".to_vec(), b"headers".to_vec()]);
    }

    #[tokio::test]
    async fn a_large_write_goes_through_after_what_was_held() {
        let mut io = Coalesced::new(Writes::default());
        io.write_all(b"small").await.unwrap();
        let large = vec![7u8; PASS_THROUGH];
        io.write_all(&large).await.unwrap();
        assert_eq!(io.inner.0, vec![b"small".to_vec(), large]);
        io.flush().await.unwrap();
        assert_eq!(io.inner.0.len(), 2);
    }

    #[tokio::test]
    async fn shutdown_writes_what_is_held() {
        let mut io = Coalesced::new(Writes::default());
        io.write_all(b"goaway").await.unwrap();
        io.shutdown().await.unwrap();
        assert_eq!(io.inner.0, vec![b"goaway".to_vec()]);
    }
}
