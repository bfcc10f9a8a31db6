//! The server side: a listener's connections, each after its TLS
//! handshake, as the stream tonic's `serve_with_incoming` (or an HTTP
//! server) takes.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use troupe_coalesce::Coalesced;

use crate::{ServerTls, Tls};

/// A client that has not finished its handshake by then is dropped, so
/// idle half-open connections cannot pile up.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections whose handshake succeeded, in the order they finished.
pub type Incoming = ReceiverStream<io::Result<TlsStream<Coalesced<TcpStream>>>>;

impl Tls {
    /// Accepts on `listener` and hands over connections whose handshake
    /// succeeded; handshakes run concurrently, so one slow client delays
    /// no other. Plaintext and refused clients are logged and dropped.
    /// Ends when the stream is dropped.
    pub fn incoming(&self, listener: TcpListener) -> Incoming {
        let tls = self.clone();
        accept(listener, move || tls.server_config())
    }
}

impl ServerTls {
    /// As [`Tls::incoming`], with this certificate.
    pub fn incoming(&self, listener: TcpListener) -> Incoming {
        let tls = self.clone();
        accept(listener, move || tls.server_config())
    }
}

/// The accept loop: each connection's handshake uses `config()` as the
/// files are when it starts, so a renewed certificate needs no restart.
fn accept(
    listener: TcpListener,
    config: impl Fn() -> Arc<ServerConfig> + Send + 'static,
) -> Incoming {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = tx.closed() => break,
                accepted = listener.accept() => accepted,
            };
            let (tcp, remote) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // E.g. out of file descriptors: wait for some to close.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            if let Err(error) = tcp.set_nodelay(true) {
                tracing::debug!(%error, %remote, "cannot set TCP_NODELAY");
            }
            let acceptor = tokio_rustls::TlsAcceptor::from(config());
            let tx = tx.clone();
            // Under TLS, so that a burst's records leave in one write; from
            // the end of the handshake, so that a refusal's alert leaves.
            let tcp = Coalesced::after_handshake(tcp);
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(mut stream)) => {
                        stream.get_mut().0.hold();
                        let _ = tx.send(Ok(stream)).await;
                    }
                    Ok(Err(error)) => {
                        tracing::info!(%remote, %error, "TLS handshake refused");
                    }
                    Err(_) => {
                        tracing::info!(%remote, "TLS handshake timed out");
                    }
                }
            });
        }
    });
    ReceiverStream::new(rx)
}
