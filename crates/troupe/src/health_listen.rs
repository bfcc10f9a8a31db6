//! `--health-listen` (`troupe serve`, `troupe placement serve`): a
//! plaintext listener serving only `grpc.health.v1.Health`, with the same
//! statuses as the main listener.
//!
//! Kubernetes' `grpc:` probes speak plaintext only, so they cannot reach a
//! listener with TLS on. This one carries nothing but "serving or not", no
//! actor API and nothing secret, which is why it may listen beyond
//! loopback without tokens or TLS (docs/security.md).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};
use tracing::{info, warn};

/// How long a stop waits for probes in flight.
const STOP_TIMEOUT: Duration = Duration::from_secs(2);

/// The running listener; [`HealthListener::stop`] ends it.
#[derive(Debug)]
pub struct HealthListener {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// Binds `addr` and answers health checks from `reporter`'s statuses until
/// stopped. A bind failure is a startup error naming the flag.
pub async fn start(addr: SocketAddr, reporter: HealthReporter) -> anyhow::Result<HealthListener> {
    let listener = TcpListener::bind(addr).await.with_context(|| {
        format!(
            "cannot serve health checks on {addr} (is the port taken? pick another with \
             --health-listen)"
        )
    })?;
    let local = listener
        .local_addr()
        .context("reading the health listener's address")?;
    let service = HealthServer::new(HealthService::from_health_reporter(reporter));
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let served = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(
                TcpIncoming::from(listener).with_nodelay(Some(true)),
                async {
                    let _ = stopped.await;
                },
            )
            .await;
        if let Err(error) = served {
            warn!(%error, "the health listener stopped with an error");
        }
    });
    info!(addr = %local, "health checks (grpc.health.v1, plaintext) listening");
    Ok(HealthListener { stop, task })
}

impl HealthListener {
    /// Stops answering; waits (bounded) for probes in flight.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let mut task = self.task;
        if tokio::time::timeout(STOP_TIMEOUT, &mut task).await.is_err() {
            task.abort();
        }
    }
}
