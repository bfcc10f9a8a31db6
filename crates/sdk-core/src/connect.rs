//! Channels to the daemon: the address, TLS and the receive limit an SDK was
//! given, turned into one lazily connecting HTTP/2 channel.
//!
//! The language layer reads certificate files itself (it names the option
//! and path in its own error type) and hands over their bytes.

use std::time::Duration;

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::ConnectError;

/// How long one dial may take, on TCP or a Unix socket. As the Python SDK's
/// channel options: a sidecar on loopback is picked up again within a couple
/// of seconds.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// How to reach one daemon.
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    /// `host:port`, optionally with `http://`/`https://` in front, or
    /// `unix:PATH` (also `unix://` + an absolute path, as gRPC names it) for
    /// a daemon's `--listen-unix` socket.
    pub address: String,
    /// TLS on, with these PEM files' contents; `None` is plaintext (a sidecar
    /// on loopback).
    pub tls: Option<TlsOptions>,
    /// The largest message accepted from the daemon; `None` takes any size,
    /// because the daemon enforces its own payload limits with a clear status
    /// and a fixed limit here would fail what it accepted.
    pub max_receive_bytes: Option<usize>,
}

/// PEM bytes of the CA the daemon's certificate chains to, and optionally a
/// client certificate with its key (for `--tls-client-certs required`).
#[derive(Clone, Default)]
pub struct TlsOptions {
    pub ca: Vec<u8>,
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsOptions {
    // The key never reaches a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsOptions")
            .field("ca_bytes", &self.ca.len())
            .field("client_identity", &self.identity.is_some())
            .finish()
    }
}

impl TlsOptions {
    /// The TLS options from the PEM contents a layer was given, each one
    /// optional: none is plaintext; a client certificate needs its key (and
    /// the other way round) and a CA.
    pub fn from_pems(
        ca: Option<Vec<u8>>,
        cert: Option<Vec<u8>>,
        key: Option<Vec<u8>>,
    ) -> Result<Option<Self>, ConnectError> {
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => {
                return Err(ConnectError::Incomplete(
                    "a client certificate needs its key, and back",
                ))
            }
        };
        match (ca, identity) {
            (Some(ca), identity) => Ok(Some(Self { ca, identity })),
            (None, None) => Ok(None),
            (None, Some(_)) => Err(ConnectError::Incomplete("a client certificate needs a CA")),
        }
    }
}

impl ConnectOptions {
    /// The receive limit as tonic takes it.
    pub fn decoding_limit(&self) -> usize {
        self.max_receive_bytes.unwrap_or(usize::MAX)
    }
}

/// A channel that connects at its first call, and again after a broken
/// connection, so a daemon that is down shows as UNAVAILABLE on the calls made
/// meanwhile (which the SDKs retry) rather than failing construction.
///
/// Must be called inside a tokio runtime.
pub fn channel(options: &ConnectOptions) -> Result<Channel, ConnectError> {
    if let Some(path) = troupe_coalesce::unix_socket_path(&options.address) {
        return unix_channel(options, path);
    }
    let bare = options
        .address
        .strip_prefix("http://")
        .or_else(|| options.address.strip_prefix("https://"))
        .unwrap_or(&options.address);
    let scheme = if options.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let uri = format!("{scheme}://{bare}");
    let bad = |reason: String| ConnectError::Address {
        address: options.address.clone(),
        reason,
    };
    let mut endpoint = Endpoint::from_shared(uri)
        .map_err(|e| bad(e.to_string()))?
        .connect_timeout(CONNECT_TIMEOUT);
    if let Some(tls) = &options.tls {
        let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&tls.ca));
        if let Some((cert, key)) = &tls.identity {
            config = config.identity(Identity::from_pem(cert, key));
        }
        endpoint = endpoint
            .tls_config(config)
            .map_err(|e| ConnectError::Tls(e.to_string()))?;
    }
    Ok(endpoint.connect_with_connector_lazy(troupe_coalesce::Connector))
}

#[cfg(unix)]
fn unix_channel(options: &ConnectOptions, path: &str) -> Result<Channel, ConnectError> {
    let bad = |reason: &str| ConnectError::Address {
        address: options.address.clone(),
        reason: reason.to_owned(),
    };
    if path.is_empty() {
        return Err(bad(
            "it names no socket path; give unix:/path/to/troupe.sock",
        ));
    }
    if options.tls.is_some() {
        return Err(bad(
            "a daemon's Unix socket serves without TLS; drop the TLS options or dial its TCP address",
        ));
    }
    // The URI only names the :authority header; the connector ignores it.
    let endpoint = Endpoint::from_static("http://localhost").connect_timeout(CONNECT_TIMEOUT);
    Ok(endpoint.connect_with_connector_lazy(troupe_coalesce::UnixConnector::new(path)))
}

#[cfg(not(unix))]
fn unix_channel(options: &ConnectOptions, _: &str) -> Result<Channel, ConnectError> {
    Err(ConnectError::Address {
        address: options.address.clone(),
        reason: "Unix sockets are not available on this platform; dial host:port".into(),
    })
}
