//! TLS for the CLI's connections: to a daemon, whose certificate is
//! checked against the name it is dialled by, and, for `troupe cluster`,
//! to placement and the member daemons as a cluster member would.

use std::path::PathBuf;

use tonic::transport::{Channel, Endpoint};
use troupe_tls::{ClientCerts, Connector, Tls, TlsFiles, TlsSettings};

use super::{fail, Exit};

/// TLS flags of client commands; all from the environment too, so the
/// same variables serve the daemon and the CLI beside it.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsClient {
    /// CA certificates (PEM) the daemon's certificate must chain to; turns
    /// TLS on.
    #[arg(
        long = "tls-ca",
        env = "TROUPE_TLS_CA",
        global = true,
        value_name = "FILE"
    )]
    pub tls_ca: Option<PathBuf>,
    /// A client certificate (PEM) to present: for daemons started with
    /// --tls-client-certs required, and for placement (a member's).
    #[arg(
        long = "tls-cert",
        env = "TROUPE_TLS_CERT",
        global = true,
        value_name = "FILE"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(
        long = "tls-key",
        env = "TROUPE_TLS_KEY",
        global = true,
        value_name = "FILE"
    )]
    pub tls_key: Option<PathBuf>,
}

fn usage(error: impl std::fmt::Display) -> anyhow::Error {
    fail(Exit::Usage, format!("{error}"))
}

impl TlsClient {
    /// The connector to a daemon; `None` for plaintext.
    pub fn to_daemon(&self) -> anyhow::Result<Option<Connector>> {
        let Some(ca) = &self.tls_ca else {
            return Ok(None);
        };
        let client_cert = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
            (None, None) => None,
            _ => {
                return Err(usage(
                    "--tls-cert and --tls-key go together; give both or neither",
                ))
            }
        };
        let config = troupe_tls::client_config_for_server(ca, client_cert).map_err(usage)?;
        Ok(Some(Connector::with_config(config)))
    }

    /// The connector to placement replicas and member daemons, as a
    /// member: needs a member's certificate.
    pub fn to_members(&self) -> anyhow::Result<Option<Connector>> {
        let Some(ca) = &self.tls_ca else {
            return Ok(None);
        };
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Err(usage(
                "placement accepts cluster members only: with --tls-ca give --tls-cert and \
                 --tls-key of a member's certificate (e.g. a daemon's)",
            ));
        };
        let tls = Tls::load(TlsSettings {
            files: TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: ca.clone(),
            },
            peer_identities: Vec::new(),
            client_certs: ClientCerts::Optional,
        })
        .map_err(usage)?;
        Ok(Some(Connector::to_members(tls)))
    }
}

/// Whether the server at `host_port` answers a plaintext HTTP/2 preface
/// with a TLS alert, i.e. has TLS on. Only a hint for error messages: any
/// failure to tell says no.
pub async fn speaks_tls(host_port: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A TLS record of type alert starts with this byte; an HTTP/2 server's
    // first frame (SETTINGS) with its length's high byte, 0.
    const TLS_ALERT: u8 = 0x15;
    let probe = async {
        let mut tcp = tokio::net::TcpStream::connect(host_port).await.ok()?;
        tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .ok()?;
        let mut first = [0u8; 1];
        tcp.read_exact(&mut first).await.ok()?;
        Some(first[0] == TLS_ALERT)
    };
    tokio::time::timeout(std::time::Duration::from_secs(2), probe)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// Connects `endpoint`, over TLS when a connector is given.
pub async fn connect(
    endpoint: Endpoint,
    tls: Option<&Connector>,
) -> Result<Channel, tonic::transport::Error> {
    match tls {
        Some(tls) => endpoint.connect_with_connector(tls.clone()).await,
        None => endpoint.connect().await,
    }
}
