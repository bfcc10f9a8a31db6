//! HTTP over TLS for the daemon's HTTP endpoints (the injector's webhook,
//! `/metrics`): the connections `troupe_tls` hands over after their
//! handshake, as axum serves them.

use std::net::SocketAddr;

use futures::StreamExt as _;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tracing::warn;
use troupe_coalesce::Coalesced;
use troupe_tls::Incoming;

/// Both protocols are offered; each connection speaks what it negotiated
/// (Prometheus and kubelet speak HTTP/1.1, the API server either).
pub fn alpn() -> Vec<Vec<u8>> {
    vec![b"h2".to_vec(), b"http/1.1".to_vec()]
}

/// Connections after their TLS handshake, as axum accepts them.
pub struct TlsListener {
    incoming: Incoming,
    local: SocketAddr,
}

impl TlsListener {
    /// `incoming`'s connections, accepted on `local`.
    pub fn new(incoming: Incoming, local: SocketAddr) -> Self {
        Self { incoming, local }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<Coalesced<TcpStream>>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.incoming.next().await {
                Some(Ok(stream)) => {
                    let remote = stream
                        .get_ref()
                        .0
                        .get_ref()
                        .peer_addr()
                        .unwrap_or(self.local);
                    return (stream, remote);
                }
                Some(Err(error)) => warn!(%error, "accepting a connection failed"),
                // The accept loop ends only when this stream is dropped.
                None => std::future::pending::<()>().await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
