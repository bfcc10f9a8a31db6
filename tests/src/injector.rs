//! `troupe injector` as a process, and an HTTPS client for it as the
//! Kubernetes API server (HTTP/2) and kubelet's probes (HTTP/1.1) talk to it.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::ClientConfig;
use tokio_rustls::TlsConnector;

use crate::{troupe_bin, within, WAIT};

/// One running `troupe injector`. Killed when dropped.
#[derive(Debug)]
pub struct Injector {
    child: Child,
    pub addr: SocketAddr,
    log: tempfile::NamedTempFile,
}

impl Injector {
    /// Starts `troupe injector --listen 127.0.0.1:0 ARGS...` and waits for
    /// its "troupe injector listening on ADDR" line.
    pub async fn start(args: &[&str]) -> anyhow::Result<Injector> {
        let log = tempfile::Builder::new()
            .prefix("troupe-injector-")
            .suffix(".log")
            .tempfile()?;
        let mut cmd = Command::new(troupe_bin());
        cmd.args(["injector", "--listen", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", "info");
        let (child, addr) =
            crate::spawn_announced(cmd, &log, "troupe injector listening on ").await?;
        Ok(Injector { child, addr, log })
    }

    /// Its stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// SIGTERM, then waits (bounded) for the exit.
    pub async fn terminate(&mut self) -> anyhow::Result<ExitStatus> {
        let pid = self.child.id().context("the injector has already exited")?;
        let status = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await?;
        if !status.success() {
            bail!("kill -TERM {pid} failed: {status}");
        }
        Ok(within(WAIT, "the injector to exit", self.child.wait()).await??)
    }
}

/// Which HTTP version a request goes over (negotiated with ALPN).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Http {
    One,
    Two,
}

/// A TLS client trusting only `ca` (PEM), offering `http` in ALPN.
pub fn client_config(ca: &Path, http: Http) -> anyhow::Result<Arc<ClientConfig>> {
    client_config_with_cert(ca, None, http)
}

/// [`client_config`], presenting `cert` (certificate and key files) when
/// the server asks for one.
pub fn client_config_with_cert(
    ca: &Path,
    cert: Option<(&Path, &Path)>,
    http: Http,
) -> anyhow::Result<Arc<ClientConfig>> {
    let mut config = (*troupe_tls::client_config_for_server(ca, cert)?).clone();
    config.alpn_protocols = vec![match http {
        Http::One => b"http/1.1".to_vec(),
        Http::Two => b"h2".to_vec(),
    }];
    Ok(Arc::new(config))
}

/// One HTTPS request to `addr` (checked as `localhost`); the status and
/// the body.
pub async fn https(
    addr: SocketAddr,
    tls: Arc<ClientConfig>,
    http: Http,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> anyhow::Result<(u16, String)> {
    https_with_headers(addr, tls, http, method, path, &[], body).await
}

/// [`https`] with extra request headers (e.g. `authorization`).
pub async fn https_with_headers(
    addr: SocketAddr,
    tls: Arc<ClientConfig>,
    http: Http,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> anyhow::Result<(u16, String)> {
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    within(Duration::from_secs(10), "an HTTPS request", async move {
        let tcp = TcpStream::connect(addr).await?;
        let stream = TlsConnector::from(tls)
            .connect(ServerName::try_from("localhost")?, tcp)
            .await
            .context("the TLS handshake")?;
        let request = hyper::Request::builder()
            .method(method)
            .uri(format!("https://localhost:{}{path}", addr.port()))
            .header("content-type", "application/json");
        let request = headers
            .iter()
            .fold(request, |request, (name, value)| {
                request.header(name.as_str(), value.as_str())
            })
            .body(Full::new(Bytes::from(body)))?;
        let io = TokioIo::new(stream);
        let response = match http {
            Http::One => {
                let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
                tokio::spawn(conn);
                sender.send_request(request).await?
            }
            Http::Two => {
                let (mut sender, conn) =
                    hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await?;
                tokio::spawn(conn);
                sender.send_request(request).await?
            }
        };
        let status = response.status().as_u16();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, String::from_utf8(body.to_vec())?))
    })
    .await?
}
