//! `--metrics-listen`: metrics as OpenMetrics text on `GET /metrics`, for
//! Prometheus to scrape: the daemon's (`daemon_metrics.rs`) or a placement
//! replica's (`placement_metrics.rs`); over HTTPS when the process has a
//! certificate, so a scraper's token never crosses the network in the
//! clear (the daemon's `--metrics-plain-http` opts out).
//!
//! A port of its own rather than a route on the gRPC listener: scrapers speak
//! HTTP/1.1, and the metrics port can be exposed to the monitoring network
//! without exposing the API. When the process requires a token, so does a
//! scrape (`authorization: Bearer <token>`, Prometheus's
//! `authorization.credentials_file`). When it requires client certificates,
//! so does the HTTPS handshake; as on the gRPC listener, the certificate
//! decides who may connect and the token, when there is one, still decides
//! who may read.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum::extract::connect_info::Connected;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::IncomingStream;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::metadata::MetadataMap;
use tracing::{info, warn};
use troupe_tls::ServerTls;

use crate::auth::{Reason, Refusals, Tokens};
use crate::config::MetricsTls;
use crate::https::TlsListener;
use crate::{cert_metrics, process_stats};

/// What Prometheus expects for the OpenMetrics text format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The running endpoint; [`MetricsServer::stop`] ends it.
#[derive(Debug)]
pub struct MetricsServer {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// Binds `addr` and serves `/metrics` until stopped, over HTTPS with
/// `tls`'s certificate and key when given (re-read when they change, as
/// the listener's are, and so is the CA scrapers' certificates are checked
/// against). A bind failure is a startup error naming the flag to change.
pub async fn start(
    addr: SocketAddr,
    tls: Option<MetricsTls>,
    access: Access,
    exposition: Arc<dyn Exposition>,
) -> anyhow::Result<MetricsServer> {
    let listener = TcpListener::bind(addr).await.with_context(|| {
        format!("cannot serve metrics on {addr} (is the port taken? pick another with --metrics-listen)")
    })?;
    let local_addr = listener
        .local_addr()
        .context("reading the metrics listener's address")?;
    if access.tokens.is_some() {
        access
            .refusals
            .count_from_zero("metrics", &[Reason::NoToken, Reason::BadToken]);
    }
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(Scraped { access, exposition });
    let (stop, stopped) = oneshot::channel::<()>();
    let stopped = async {
        let _ = stopped.await;
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let client_certs = if tls.as_ref().is_some_and(|t| t.clients_required) {
        "required"
    } else {
        "none"
    };
    let task = match tls {
        Some(MetricsTls {
            files,
            clients_required,
        }) => {
            let tls = if clients_required {
                ServerTls::load_requiring_clients(files, crate::https::alpn()).context(
                    "serving /metrics over HTTPS with --tls-cert and --tls-key, requiring \
                     scrapers' certificates from --tls-ca",
                )?
            } else {
                // With optional client certificates none is asked for,
                // where the gRPC listener asks and lets callers in without:
                // there a certificate decides what a connection may do (a
                // member's opens links), here nothing does, and a scraper
                // holding another CA's certificate (a mesh's, say) would
                // be refused for it.
                ServerTls::load(files.cert, files.key, crate::https::alpn())
                    .context("serving /metrics over HTTPS with --tls-cert and --tls-key")?
            };
            let listener = TlsListener::new(tls.incoming(listener), local_addr);
            tokio::spawn(serve(listener, app, stopped))
        }
        None => tokio::spawn(serve(listener, app, stopped)),
    };
    info!(addr = %local_addr, path = "/metrics", scheme, client_certs, "metrics listening");
    Ok(MetricsServer { stop, task })
}

async fn serve<L>(listener: L, app: Router, stopped: impl Future<Output = ()> + Send + 'static)
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
    Scraper: for<'a> Connected<IncomingStream<'a, L>>,
{
    let app = app.into_make_service_with_connect_info::<Scraper>();
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(stopped)
        .await;
    if let Err(e) = served {
        warn!(error = %e, "the metrics endpoint stopped with an error");
    }
}

/// The scraper's address, which names who a token let in, or who was
/// refused.
#[derive(Debug, Clone, Copy)]
struct Scraper(SocketAddr);

impl Connected<IncomingStream<'_, TcpListener>> for Scraper {
    fn connect_info(stream: IncomingStream<'_, TcpListener>) -> Self {
        Self(*stream.remote_addr())
    }
}

impl Connected<IncomingStream<'_, TlsListener>> for Scraper {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Self {
        Self(*stream.remote_addr())
    }
}

impl MetricsServer {
    /// Stops accepting scrapes and waits (bounded) for those in flight.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let mut task = self.task;
        // A scraper holding a keep-alive connection open must not hold up
        // the daemon's exit.
        if tokio::time::timeout(std::time::Duration::from_secs(2), &mut task)
            .await
            .is_err()
        {
            task.abort();
        }
    }
}

/// What a scrape shows.
#[tonic::async_trait]
pub trait Exposition: Send + Sync + 'static {
    /// Appends the families to `body`, OpenMetrics text ending in `# EOF`.
    async fn encode(&self, body: &mut String) -> std::fmt::Result;
}

/// Who may scrape.
#[derive(Clone)]
pub struct Access {
    /// A scrape must carry one of these when given; `None`: whoever can
    /// connect may read.
    pub tokens: Option<Arc<Tokens>>,
    /// Accepted as well: reading metrics is inspection.
    pub read_tokens: Option<Arc<Tokens>>,
    /// The process's refusals, which refused scrapes are counted with.
    pub refusals: Refusals,
}

#[derive(Clone)]
struct Scraped {
    access: Access,
    exposition: Arc<dyn Exposition>,
}

/// Drops the `# EOF` that ends `body`, before another part is appended:
/// one exposition has one, at its end.
pub fn without_eof(body: &mut String) {
    if body.ends_with("# EOF\n") {
        body.truncate(body.len() - "# EOF\n".len());
    }
}

/// What every troupe process serves after its own families.
#[derive(Clone)]
pub struct ProcessFamilies {
    /// The refused credentials, scrapes' included.
    pub refusals: Refusals,
    /// The credentials it takes, whose tokens' last use is shown.
    pub tokens: Vec<Arc<Tokens>>,
    /// Its certificates, whose expiry is shown.
    pub tls: Option<troupe_tls::Tls>,
    /// The cgroup's memory limit, if any, beside the process figures.
    pub memory_limit: Option<u64>,
}

impl ProcessFamilies {
    /// Appends them to `body`.
    pub fn encode(&self, body: &mut String) -> std::fmt::Result {
        let Self {
            refusals,
            tokens,
            tls,
            memory_limit,
        } = self;
        without_eof(body);
        refusals.encode(body)?;
        let usage: Vec<_> = tokens.iter().flat_map(|t| t.usage()).collect();
        if !usage.is_empty() {
            without_eof(body);
            crate::auth::encode_token_use(&usage, body)?;
        }
        if let Some(tls) = tls {
            without_eof(body);
            cert_metrics::encode(tls, body)?;
        }
        without_eof(body);
        process_stats::encode(process_stats::read().as_ref(), *memory_limit, body)
    }
}

async fn metrics(
    axum::extract::State(scraped): axum::extract::State<Scraped>,
    axum::extract::ConnectInfo(Scraper(from)): axum::extract::ConnectInfo<Scraper>,
    headers: axum::http::HeaderMap,
) -> Response {
    let access = &scraped.access;
    if let Some(tokens) = &access.tokens {
        let metadata = MetadataMap::from_headers(headers);
        let checked =
            tokens
                .check(&metadata, || Some(from))
                .or_else(|refused| match &access.read_tokens {
                    Some(readers) if readers.check(&metadata, || Some(from)).is_ok() => Ok(()),
                    _ => Err(refused),
                });
        if let Err(refused) = checked {
            let reason = Reason::of_missing_or_wrong(&metadata);
            access.refusals.record("metrics", reason, Some(from));
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                format!("{}\n", refused.message()),
            )
                .into_response();
        }
    }
    let mut body = String::with_capacity(16 * 1024);
    match scraped.exposition.encode(&mut body).await {
        Ok(()) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response(),
        Err(e) => {
            warn!(error = %e, "encoding metrics failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "encoding the metrics failed; see the log\n",
            )
                .into_response()
        }
    }
}
