//! The client side: a connector tonic endpoints dial through
//! (`Endpoint::connect_with_connector`), which opens TCP, then TLS with
//! the configuration the files hold at that moment.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tonic::codegen::http::Uri;
use troupe_coalesce::Coalesced;

use crate::Tls;

/// Dials `host:port` from an endpoint's URI over TLS.
#[derive(Clone, Debug)]
pub struct Connector {
    source: Source,
}

#[derive(Clone)]
enum Source {
    /// To another cluster member: this process's certificate, a member's
    /// expected; re-read per connection.
    Member(Tls),
    /// To a server checked by name (clients, the CLI).
    Fixed(Arc<ClientConfig>),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Member(tls) => f.debug_tuple("Member").field(tls).finish(),
            Self::Fixed(_) => f.write_str("Fixed"),
        }
    }
}

impl Connector {
    /// For connections to other cluster members.
    pub fn to_members(tls: Tls) -> Self {
        Self {
            source: Source::Member(tls),
        }
    }

    /// For connections checked with a fixed client configuration, e.g.
    /// [`crate::client_config_for_server`].
    pub fn with_config(config: Arc<ClientConfig>) -> Self {
        Self {
            source: Source::Fixed(config),
        }
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<TlsStream<Coalesced<TcpStream>>>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, io::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let config = match &self.source {
            Source::Member(tls) => tls.member_client_config(),
            Source::Fixed(config) => config.clone(),
        };
        Box::pin(async move {
            let host = troupe_coalesce::host_of(&uri)
                .ok_or_else(|| invalid(format!("{uri} names no host")))?
                .to_owned();
            let tcp = troupe_coalesce::dial(&uri).await?;
            let name = ServerName::try_from(host)
                .map_err(|e| invalid(format!("{uri}: not a host name or address: {e}")))?;
            // Under TLS, so that a burst's records leave in one write; from
            // the end of the handshake, so that a refusal's alert leaves.
            let mut stream = tokio_rustls::TlsConnector::from(config)
                .connect(name, Coalesced::after_handshake(tcp))
                .await?;
            stream.get_mut().0.hold();
            Ok(TokioIo::new(stream))
        })
    }
}
