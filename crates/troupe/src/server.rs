//! `troupe serve`: opens the store, starts the runtime and the gRPC server,
//! and shuts everything down in order on SIGINT/SIGTERM.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tracing::{info, warn};
use troupe_placement::SingleNode;
use troupe_proto::v1 as pb;
use troupe_runtime::Runtime;
use troupe_storage::{
    MemoryReminders, MemoryStore, PostgresStore, ReminderStore, SledReminders, SledStore,
    StateStore,
};

use crate::admin_api::AdminApi;
use crate::app_api::AppApi;
use crate::client_api::ClientApi;
use crate::config::{ServeConfig, StoreKind};
use crate::{metrics_http, telemetry};

/// Room for protobuf framing around the largest payload we accept, so that
/// an oversize payload reaches our own check (and its clear message) instead
/// of tonic's generic one.
const FRAME_OVERHEAD: usize = 64 * 1024;

/// How long the gRPC server may take to close connections after the runtime stopped.
const SERVER_CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

pub async fn serve(config: ServeConfig) -> anyhow::Result<()> {
    let (store, reminders): (Arc<dyn StateStore>, Arc<dyn ReminderStore>) = match &config.store {
        StoreKind::Sled(dir) => {
            let sled = SledStore::open(dir)?;
            let reminders = SledReminders::open(&sled)?;
            (Arc::new(sled), Arc::new(reminders))
        }
        StoreKind::Postgres(url) => {
            // Reminders live beside the state, shared by every daemon.
            let store = PostgresStore::connect(url.expose()).await?;
            (Arc::new(store.clone()), Arc::new(store))
        }
        StoreKind::Memory => (
            Arc::new(MemoryStore::new()),
            Arc::new(MemoryReminders::new()),
        ),
    };
    let runtime = Runtime::create(
        config.runtime.clone(),
        store.clone(),
        reminders,
        Arc::new(SingleNode),
    )?;
    runtime.start();

    let listener = TcpListener::bind(config.listen).await.with_context(|| {
        format!(
            "cannot listen on {} (is another daemon running there? pick another with --listen)",
            config.listen
        )
    })?;
    let local = listener.local_addr()?;
    let metrics = match config.metrics_listen {
        Some(addr) => Some(metrics_http::start(addr, runtime.clone()).await?),
        None => None,
    };

    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<pb::actor_client_server::ActorClientServer<ClientApi>>()
        .await;
    health
        .set_serving::<pb::app_host_server::AppHostServer<AppApi>>()
        .await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .context("building the reflection service")?;

    // Small messages (calls, turns) must not wait for Nagle's algorithm to
    // meet a delayed ACK: that costs tens of milliseconds per exchange.
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));

    let limit = config.runtime.max_payload_bytes.saturating_mul(2) + FRAME_OVERHEAD;
    let app_api = AppApi::new(runtime.clone());
    let (stop_server, server_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(reflection)
        .add_service(
            pb::actor_client_server::ActorClientServer::new(ClientApi::new(runtime.clone()))
                .max_decoding_message_size(limit),
        )
        .add_service(
            pb::app_host_server::AppHostServer::new(app_api.clone())
                .max_decoding_message_size(limit)
                .max_encoding_message_size(limit),
        )
        .add_service(pb::admin_server::AdminServer::new(AdminApi::new(
            runtime.clone(),
            local.to_string(),
        )))
        .serve_with_incoming_shutdown(incoming, async {
            let _ = server_stopped.await;
        });
    let server = tokio::spawn(server);

    info!(address = %local, store = %store.describe(), "troupe daemon listening");
    // A plain line on stdout for scripts and tests that asked for port 0.
    println!("troupe listening on {local}");

    shutdown_signal().await?;
    info!("shutdown signal received; refusing new calls and draining actors");
    health
        .set_not_serving::<pb::actor_client_server::ActorClientServer<ClientApi>>()
        .await;
    runtime.shutdown().await;
    app_api.close_all();
    let _ = stop_server.send(());
    match tokio::time::timeout(SERVER_CLOSE_TIMEOUT, server).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => warn!(error = %e, "gRPC server ended with an error"),
        Ok(Err(e)) => warn!(error = %e, "gRPC server task failed"),
        Err(_) => warn!("gRPC server did not close its connections in time"),
    }
    if let Some(metrics) = metrics {
        metrics.stop().await;
    }
    // Last, so the spans of the drain above are exported too.
    telemetry::shutdown().await;
    info!("troupe daemon stopped");
    Ok(())
}

async fn shutdown_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate =
        signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    Ok(())
}
