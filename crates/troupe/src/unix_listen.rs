//! The daemon's Unix domain socket (`--listen-unix`): the same gRPC API as
//! `--listen`, for apps and clients on the same machine or in the same pod.
//!
//! A sidecar's callers are local: on a socket, the file's permissions
//! (owner and group) decide who may connect, before any token is checked,
//! and no port is taken. It is not faster: a raw round trip is, but an SDK
//! call over it measured the same calls/s and CPU as over loopback TCP (the
//! receiver does the copy TCP's sender does, and the thread wake-ups, which
//! dominate, are the same; `bench_sdk.py --unix`). The API's tokens apply
//! as on TCP.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio_stream::StreamExt;
use tonic::transport::server::{Connected, TcpConnectInfo};
use troupe_coalesce::Coalesced;
use troupe_transport::link::NotALink;

/// Owner and group may connect: a pod's containers share a group
/// (`fsGroup`), other users of the machine do not.
const SOCKET_MODE: u32 = 0o660;

/// Why the socket could not be set up, said so the operator can act.
#[derive(Debug, thiserror::Error)]
pub enum UnixListenError {
    #[error(
        "--listen-unix {path}: a daemon already answers on this socket; stop it or pick another \
         path"
    )]
    InUse { path: PathBuf },
    #[error(
        "--listen-unix {path}: the path exists and is not a socket; remove it or pick another path"
    )]
    NotASocket { path: PathBuf },
    /// Connecting failed other than by a refusal, so a daemon may still
    /// answer there (too busy to accept, or behind permissions this user
    /// lacks): the file is left alone.
    #[error(
        "--listen-unix {path}: a socket file is there and connecting to it failed ({source}), so \
         a daemon may still be using it; stop that daemon, remove the file if it is stale, or \
         pick another path"
    )]
    MaybeInUse {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("--listen-unix {path}: {source} (check that its directory exists and is writable)")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The bound socket; dropping it removes the file, so the next daemon binds
/// the path without finding a stale one.
#[derive(Debug)]
pub struct UnixSocket {
    listener: Option<UnixListener>,
    path: PathBuf,
    /// The file's device and inode when bound: a file someone put at the
    /// path since (another daemon's, after ours was deleted) is not ours to
    /// remove.
    file: Option<(u64, u64)>,
}

impl UnixSocket {
    /// Binds `path`, replacing a socket file a stopped daemon left behind
    /// (nothing answers on it) but never one in use or another kind of file.
    pub async fn bind(path: &Path) -> Result<Self, UnixListenError> {
        let io = |source| UnixListenError::Io {
            path: path.to_owned(),
            source,
        };
        match std::fs::symlink_metadata(path) {
            Ok(meta) if !meta.file_type().is_socket() => {
                return Err(UnixListenError::NotASocket {
                    path: path.to_owned(),
                })
            }
            Ok(_) => match UnixStream::connect(path).await {
                Ok(_) => {
                    return Err(UnixListenError::InUse {
                        path: path.to_owned(),
                    })
                }
                // Refused: nothing listens, the file is a stopped daemon's.
                // Any other failure (no permission to connect, say) leaves it:
                // a daemon may still answer there.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    std::fs::remove_file(path).map_err(io)?;
                }
                Err(source) => {
                    return Err(UnixListenError::MaybeInUse {
                        path: path.to_owned(),
                        source,
                    })
                }
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        let listener = UnixListener::bind(path).map_err(io)?;
        // Made before the permissions are set, so a failure there still
        // removes the file.
        let socket = Self {
            listener: Some(listener),
            path: path.to_owned(),
            file: identity(path),
        };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE)).map_err(io)?;
        Ok(socket)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The connections it accepts, as the TCP listener's are served.
    pub fn incoming(&mut self) -> impl Stream<Item = io::Result<Accepted>> + use<> {
        let listener = self.listener.take();
        futures::stream::unfold(listener, |listener| async move {
            let accepted = listener.as_ref()?.accept().await;
            let next = accepted.map(|(stream, _)| Accepted::Unix(Coalesced::new(stream)));
            Some((next, listener))
        })
    }
}

fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|meta| (meta.dev(), meta.ino()))
}

impl Drop for UnixSocket {
    fn drop(&mut self) {
        if self.file.is_some() && identity(&self.path) == self.file {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The TCP listener's connections and, with `--listen-unix`, the socket's,
/// as one stream for one server.
pub fn merged(
    tcp: impl Stream<Item = io::Result<NotALink<Coalesced<TcpStream>>>> + Send + 'static,
    unix: Option<&mut UnixSocket>,
) -> Pin<Box<dyn Stream<Item = io::Result<Accepted>> + Send>> {
    let tcp = tcp.map(|accepted| accepted.map(Accepted::Tcp));
    match unix {
        Some(socket) => Box::pin(tcp.merge(socket.incoming())),
        None => Box::pin(tcp),
    }
}

/// A connection from either listener.
#[derive(Debug)]
pub enum Accepted {
    /// Framed links to this daemon were taken out already.
    Tcp(NotALink<Coalesced<TcpStream>>),
    Unix(Coalesced<UnixStream>),
}

impl Connected for Accepted {
    // TCP's, so `remote_addr()` keeps working; a socket peer has none.
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        match self {
            Self::Tcp(stream) => stream.connect_info(),
            Self::Unix(_) => TcpConnectInfo {
                local_addr: None,
                remote_addr: None,
            },
        }
    }
}

impl AsyncRead for Accepted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Self::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Accepted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Self::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Self::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Tcp(s) => s.is_write_vectored(),
            Self::Unix(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_flush(cx),
            Self::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Self::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stale_socket_is_replaced_and_a_live_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("troupe.sock");
        // A stopped daemon's file: bound once, its listener gone, file kept.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let live = UnixSocket::bind(&path).await.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, SOCKET_MODE);
        assert!(matches!(
            UnixSocket::bind(&path).await,
            Err(UnixListenError::InUse { .. })
        ));
        drop(live);
        assert!(!path.exists(), "the socket file is removed with the daemon");
    }

    #[tokio::test]
    async fn a_socket_put_in_place_of_ours_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("troupe.sock");
        let ours = UnixSocket::bind(&path).await.unwrap();
        // Someone deleted our file and another daemon bound the path.
        std::fs::remove_file(&path).unwrap();
        let theirs = UnixSocket::bind(&path).await.unwrap();
        drop(ours);
        assert!(
            path.exists(),
            "the other daemon's socket is not ours to remove"
        );
        drop(theirs);
        assert!(!path.exists());
    }

    /// Any failure to connect but a refusal may hide a live daemon. A full
    /// accept queue is one a test can make as root (a permission refusal,
    /// the other, is not: root may connect anywhere).
    #[tokio::test]
    async fn a_busy_daemons_socket_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("troupe.sock");
        // A daemon that accepts nothing, with room for no pending
        // connection once one waits.
        let socket = tokio::net::UnixSocket::new_stream().unwrap();
        socket.bind(&path).unwrap();
        let busy = socket.listen(0).unwrap();
        let waiting = tokio::net::UnixStream::connect(&path).await.unwrap();
        let inode = std::fs::metadata(&path).unwrap().ino();
        let refused = UnixSocket::bind(&path).await;
        assert!(
            matches!(refused, Err(UnixListenError::MaybeInUse { .. })),
            "{refused:?}"
        );
        assert_eq!(
            std::fs::metadata(&path).unwrap().ino(),
            inode,
            "the busy daemon's socket file is still its own"
        );
        drop((busy, waiting));
    }

    #[tokio::test]
    async fn another_kind_of_file_is_never_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notes.txt");
        std::fs::write(&path, b"keep me").unwrap();
        assert!(matches!(
            UnixSocket::bind(&path).await,
            Err(UnixListenError::NotASocket { .. })
        ));
        assert_eq!(std::fs::read(&path).unwrap(), b"keep me");
    }
}
