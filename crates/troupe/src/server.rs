//! `troupe serve`: opens the store, starts the runtime and the gRPC server,
//! joins the cluster when `--placement` is given, and shuts everything down
//! in order on SIGINT/SIGTERM (in a cluster: leaving it first, so the
//! daemon's actors move to the others without losing anything).
//! `troupe dev` runs the same daemon in-process through [`run_until`].

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures::{Stream, StreamExt};
use tokio::net::TcpListener;
use tonic::service::interceptor::InterceptedService;
use tracing::{info, warn};
use troupe_placement::view::ClusterPlacement;
use troupe_placement::{Placement, SingleNode};
use troupe_proto::v1 as pb;
use troupe_runtime::Runtime;
use troupe_storage::{MemoryReminders, MemoryStore, ReminderStore, StateStore};
use troupe_storage_postgres::PostgresStore;
use troupe_storage_sled::{SledReminders, SledStore};
use troupe_transport::link::{Links, LinksConfig, NotALink};
use troupe_transport::{Peers, PeersConfig};

use crate::admin_api::{AdminApi, Owners as AdminOwners, Security};
use crate::app_api::{AppApi, APP_MESSAGE_LIMIT};
use crate::auth::{peer_authorization, Guard, Refusals, Stamped, Tokens};
use crate::call_deadline::Arrival;
use crate::client_api::ClientApi;
use crate::config::{ServeConfig, StoreKind};
use crate::daemon_metrics::DaemonMetrics;
use crate::forwarder::TransportForwarder;
use crate::link_api::LinkApi;
use crate::membership;
use crate::readiness::Readiness;
use crate::serve_end::{unwritten_error, ShutdownSignals};
use crate::store_metrics::StoreMetrics;
use crate::unix_listen::{self, UnixSocket};
use crate::{health_listen, memory_watch, metrics_http, telemetry};

/// Room for protobuf framing around the largest payload we accept, so that
/// an oversize payload reaches our own check (and its clear message) instead
/// of tonic's generic one.
const FRAME_OVERHEAD: usize = 64 * 1024;

/// HTTP/2 flow-control windows (see where the server is built).
const CONNECTION_WINDOW: u32 = 8 * 1024 * 1024;
const STREAM_WINDOW: u32 = 4 * 1024 * 1024;

/// How long the gRPC server may take to close connections after the runtime stopped.
const SERVER_CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

pub async fn serve(config: ServeConfig) -> anyhow::Result<()> {
    // Before anything can announce the daemon: a SIGTERM that follows the
    // "listening" line must find the handler in place, not end the process.
    let signals = ShutdownSignals::install()?;
    run_until(config, signals.received(), |listening| {
        // A plain line on stdout for scripts and tests that asked for port 0.
        println!("troupe listening on {}", listening.address);
    })
    .await
}

/// A daemon that has bound its listener and serves.
#[derive(Debug, Clone)]
pub struct Listening {
    /// The bound address (the real port when port 0 was asked for).
    pub address: std::net::SocketAddr,
    pub runtime: Runtime,
}

/// Runs the daemon until `stop` completes, then shuts it down gracefully
/// (the same sequence as a signal to `troupe serve`). `on_listening` hears
/// once the listener is bound and the services are up.
pub async fn run_until(
    config: ServeConfig,
    stop: impl std::future::Future<Output = ()>,
    on_listening: impl FnOnce(Listening),
) -> anyhow::Result<()> {
    // Kept apart for the admin API's backups, which the metrics count.
    let mut sled_store = None;
    let store_metrics = StoreMetrics::default();
    let (store, reminders): (Arc<dyn StateStore>, Arc<dyn ReminderStore>) = match &config.store {
        StoreKind::Sled(dir) => {
            let sled = SledStore::open_with_cache(dir, config.sled_cache_bytes)?;
            let reminders = SledReminders::open(&sled)?;
            sled_store = Some(sled.clone());
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
    if config.cluster.is_some() && matches!(config.store, StoreKind::Memory) {
        warn!(
            "--placement with --store memory: actors that move between daemons start without \
             state; use --store postgres://... shared by every daemon for stateful actors"
        );
    }
    let limit = config.runtime.max_payload_bytes.saturating_mul(2) + FRAME_OVERHEAD;
    let api_tokens = config.api_tokens.clone().map(Tokens::load).transpose()?;
    let app_tokens = config.app_tokens.clone().map(Tokens::load).transpose()?;
    let read_tokens = config.read_tokens.clone().map(Tokens::load).transpose()?;
    for tokens in [&api_tokens, &app_tokens, &read_tokens]
        .into_iter()
        .flatten()
    {
        tokens.watch();
    }
    info!(
        api_tokens = api_tokens.as_ref().map_or(0, |t| t.count()),
        app_tokens = app_tokens.as_ref().map_or(0, |t| t.count()),
        read_tokens = read_tokens.as_ref().map_or(0, |t| t.count()),
        "tokens accepted (0: that API is open to anyone who can reach the port)"
    );
    // Peers of a cluster share the API token and present the first one.
    let peer_authorization = config
        .api_tokens
        .clone()
        .map(peer_authorization)
        .transpose()?;
    let tls = config
        .tls
        .clone()
        .map(troupe_tls::Tls::load)
        .transpose()
        .context("setting up TLS")?;
    // Daemons and replicas present this daemon's certificate and accept
    // only a cluster member's.
    let member_tls = tls.clone().map(troupe_tls::Connector::to_members);
    // Every guard counts what it refuses, under its service's name, for
    // /metrics and a rate-limited warning.
    let refusals = Refusals::default();
    let api_guard = Guard::new(api_tokens.clone());
    // Links carry any actor's calls: with TLS, only a member may open one.
    let peer_guard = api_guard
        .clone()
        .members_only(tls.clone())
        .counting(&refusals, "link");
    // Where the read-only token may go, each request carries its method
    // for the guard (`Stamped`).
    let stamp = read_tokens.is_some();
    let inspect_guard = api_guard.clone().or_read_only(read_tokens.clone());
    // The admin API's changes are audited with the credential that made them.
    let admin_guard = inspect_guard
        .clone()
        .identifying()
        .counting(&refusals, "admin");
    let inspect_guard = inspect_guard.counting(&refusals, "reflection");
    let client_guard = Guard::new(api_tokens.clone())
        .or(app_tokens.clone())
        .or_read_only(read_tokens.clone())
        .counting(&refusals, "client");
    let app_guard = Guard::new(app_tokens.clone()).counting(&refusals, "app");
    let peers = Peers::new(PeersConfig {
        max_message_bytes: limit,
        default_timeout: config.runtime.call_timeout,
        tls: member_tls.clone(),
        ..PeersConfig::default()
    });
    let cluster_view = config
        .cluster
        .as_ref()
        .map(|_| ClusterPlacement::new(config.runtime.node.clone()));
    let placement: Arc<dyn Placement> = match &cluster_view {
        Some(view) => view.clone(),
        None => Arc::new(SingleNode),
    };
    // The owners' admin APIs, dialed as the daemons' links are: with the
    // members' TLS and the shared API token.
    let owners = cluster_view.as_ref().map(|view| {
        AdminOwners::new(
            view.clone(),
            Peers::new(PeersConfig {
                tls: member_tls.clone(),
                ..PeersConfig::default()
            }),
            peer_authorization.clone(),
        )
    });
    let runtime = Runtime::create(config.runtime.clone(), store.clone(), reminders, placement)?;
    let links = config.cluster.as_ref().map(|cluster| {
        Links::new(LinksConfig {
            node: config.runtime.node.clone(),
            protocol: cluster.links.protocol,
            channels: cluster.links.channels,
            window: cluster.links.window,
            queue_bytes: cluster.links.queue_bytes,
            max_message_bytes: limit,
            default_timeout: config.runtime.call_timeout,
            authorization: peer_authorization.clone(),
            tls: member_tls.clone(),
            ..LinksConfig::default()
        })
    });
    if let Some(links) = &links {
        runtime.set_forwarder(Arc::new(TransportForwarder::new(links.clone())));
    }
    runtime.start();
    let memory_watch = memory_watch::start(runtime.clone());

    let listener = TcpListener::bind(config.listen).await.with_context(|| {
        format!(
            "cannot listen on {} (is another daemon running there? pick another with --listen)",
            config.listen
        )
    })?;
    let local = listener.local_addr()?;
    let mut unix_socket = match &config.listen_unix {
        Some(path) => Some(UnixSocket::bind(path).await?),
        None => None,
    };
    let advertise = match config.cluster.as_ref().and_then(|c| c.advertise.clone()) {
        Some(address) => address,
        // Other daemons cannot dial "every interface".
        None if config.cluster.is_some() && local.ip().is_unspecified() => anyhow::bail!(
            "--listen {local} binds every interface, which other daemons cannot dial; give \
             --advertise HOST:PORT with the address they should forward calls to"
        ),
        None => local.to_string(),
    };
    let metrics = match config.metrics_listen {
        Some(addr) => Some(
            metrics_http::start(
                addr,
                config.metrics_tls.clone(),
                metrics_http::Access {
                    tokens: api_tokens.clone(),
                    read_tokens: read_tokens.clone(),
                    refusals: refusals.clone(),
                },
                Arc::new(DaemonMetrics {
                    runtime: runtime.clone(),
                    links: links.clone(),
                    store_metrics: store_metrics.clone(),
                    process: metrics_http::ProcessFamilies {
                        refusals: refusals.clone(),
                        tokens: [&api_tokens, &app_tokens, &read_tokens]
                            .into_iter()
                            .flatten()
                            .cloned()
                            .collect(),
                        tls: tls.clone(),
                        memory_limit: config.memory_limit,
                    },
                }),
            )
            .await?,
        ),
        None => None,
    };

    let (health, health_service) = tonic_health::server::health_reporter();
    let readiness = Readiness::start(health.clone(), cluster_view.clone()).await;
    health
        .set_serving::<pb::app_host_server::AppHostServer<AppApi>>()
        .await;
    // Plaintext, for kubelet's grpc probes; the same statuses as below.
    let health_listener = match config.health_listen {
        Some(addr) => Some(health_listen::start(addr, health.clone()).await?),
        None => None,
    };
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .context("building the reflection service")?;

    // Peers' links arrive on this port both ways: as PeerLink calls and as
    // framed connections, told apart as they are accepted.
    let link_server = links
        .as_ref()
        .map(|links| links.server(Arc::new(LinkApi::new(ClientApi::new(runtime.clone())))));
    let app_api = AppApi::new(runtime.clone(), limit);
    let (stop_server, server_stopped) = tokio::sync::oneshot::channel::<()>();
    let router = tonic::transport::Server::builder()
        // Set on purpose, for app streams: a peer may have up to this much
        // in flight before it must wait for the daemon to read. h2 also
        // limits how many small DATA frames it buffers to half the
        // connection window (after which it ends the connection with
        // ENHANCE_YOUR_CALM), so a wide window lets a burst of tiny answers
        // wait for the reader instead of killing the stream; batches and
        // deactivation waves keep such bursts small besides.
        .initial_connection_window_size(CONNECTION_WINDOW)
        .initial_stream_window_size(STREAM_WINDOW)
        // A request whose handler panics answers INTERNAL; the connection
        // and every other request on it go on.
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            internal_for_panic,
        ))
        // Open, for probes.
        .add_service(health_service)
        .add_service(Stamped::new(
            InterceptedService::new(reflection, inspect_guard.clone()),
            stamp,
        ))
        .add_service(Arrival::new(Stamped::new(
            InterceptedService::new(
                pb::actor_client_server::ActorClientServer::new(ClientApi::new(runtime.clone()))
                    .max_decoding_message_size(limit),
                client_guard,
            ),
            stamp,
        )))
        .add_service(InterceptedService::new(
            // An app's answer larger than --max-payload-bytes fails its turn
            // (app_api); only beyond this does it break the stream.
            pb::app_host_server::AppHostServer::new(app_api.clone())
                .max_decoding_message_size(APP_MESSAGE_LIMIT.max(limit))
                .max_encoding_message_size(limit),
            app_guard,
        ))
        // Only daemons of a cluster forward to each other.
        .add_optional_service(
            link_server
                .clone()
                .map(|server| InterceptedService::new(server.into_service(), peer_guard.clone())),
        )
        .add_service(Stamped::new(
            InterceptedService::new(
                pb::admin_server::AdminServer::new(
                    AdminApi::new(
                        runtime.clone(),
                        local.to_string(),
                        links.clone(),
                        config.memory_limit,
                    )
                    .with_sled(sled_store, store_metrics)
                    .with_owners(owners)
                    .with_security(Security {
                        api_tokens,
                        app_tokens,
                        read_tokens,
                        tls: tls.clone(),
                        refusals,
                    }),
                )
                // A state edit carries values up to --max-payload-bytes.
                .max_decoding_message_size(limit),
                admin_guard,
            ),
            stamp,
        ));
    let stopped = async {
        let _ = server_stopped.await;
    };
    let server = match (&tls, link_server) {
        // Plaintext clients and peers fail the handshake: nothing is
        // served without TLS once it is on.
        (Some(tls), None) => {
            tokio::spawn(router.serve_with_incoming_shutdown(tls.incoming(listener), stopped))
        }
        (Some(tls), Some(links)) => tokio::spawn(router.serve_with_incoming_shutdown(
            links.split_incoming(tls.incoming(listener), peer_guard.admit()),
            stopped,
        )),
        // Without Nagle's delay (a small call must not wait for a delayed
        // ACK), each burst of a connection's frames in one write.
        (None, links) => {
            let tcp = troupe_coalesce::incoming(listener);
            let tcp: Pin<Box<dyn Stream<Item = _> + Send>> = match links {
                Some(links) => Box::pin(links.split_incoming(tcp, peer_guard.admit())),
                None => Box::pin(tcp.map(|accepted| accepted.map(NotALink::unread))),
            };
            tokio::spawn(router.serve_with_incoming_shutdown(
                unix_listen::merged(tcp, unix_socket.as_mut()),
                stopped,
            ))
        }
    };

    // The memory bounds with the limit they follow, so an operator sees
    // what a container's memory limit gave the daemon.
    let memory_limit = config
        .memory_limit
        .map_or_else(|| "none".to_owned(), |bytes| bytes.to_string());
    let memory_shed_percent = config.runtime.memory_shedding.map_or(0, |s| s.percent);
    info!(
        address = %local,
        store = %store.describe(),
        tls = tls.is_some(),
        threads = config.threads,
        memory_limit = %memory_limit,
        sled_cache_bytes = config.sled_cache_bytes,
        idempotency_memory_bytes = config.runtime.idempotency_memory_bytes,
        memory_shed_percent,
        "troupe daemon listening"
    );
    if let Some(socket) = &unix_socket {
        info!(path = %socket.path().display(), "troupe daemon listening on a Unix socket too");
    }
    on_listening(Listening {
        address: local,
        runtime: runtime.clone(),
    });

    let mut membership = match (&config.cluster, &cluster_view) {
        (Some(cluster), Some(view)) => {
            let identity = membership::Identity {
                node: config.runtime.node.clone(),
                address: advertise.clone(),
                replicas: cluster.placement.clone(),
            };
            info!(node = %identity.node, advertise = %identity.address, placement = ?identity.replicas, "joining the cluster");
            Some(membership::start(
                identity,
                view.clone(),
                runtime.clone(),
                peers.clone(),
                links.clone(),
            ))
        }
        _ => None,
    };

    stop.await;
    info!("shutting down: refusing new calls and draining actors");
    readiness.stop().await;
    if let Some(membership) = membership.as_mut() {
        // Calls keep being served and forwarded while the actors move.
        info!("leaving the cluster: handing actors off to the other daemons");
        if !membership.leave(config.runtime.shutdown_grace).await {
            warn!(
                grace = ?config.runtime.shutdown_grace,
                "the leave did not complete within the shutdown grace period; stopping anyway \
                 (placement removes this daemon once its lease lapses)"
            );
        }
    }
    let report = runtime.shutdown().await;
    if let Some(watch) = memory_watch {
        watch.abort();
    }
    if let Some(membership) = membership {
        membership.stop();
    }
    app_api.close_all();
    if let Some(links) = &links {
        links.drain_inbound();
    }
    let _ = stop_server.send(());
    match tokio::time::timeout(SERVER_CLOSE_TIMEOUT, server).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => warn!(error = %e, "gRPC server ended with an error"),
        Ok(Err(e)) => warn!(error = %e, "gRPC server task failed"),
        Err(_) => warn!("gRPC server did not close its connections in time"),
    }
    // Its file goes as soon as nothing is served on it.
    drop(unix_socket);
    if let Some(metrics) = metrics {
        metrics.stop().await;
    }
    if let Some(health) = health_listener {
        health.stop().await;
    }
    // Last, so the spans of the drain above are exported too.
    telemetry::shutdown().await;
    if report.is_complete() {
        info!("troupe daemon stopped");
        Ok(())
    } else {
        Err(unwritten_error(&report))
    }
}

/// The answer to a request whose handler panicked (the panic itself is in
/// the log, from the panic hook).
fn internal_for_panic(
    panic: Box<dyn std::any::Any + Send + 'static>,
) -> tonic::codegen::http::Response<tonic::body::Body> {
    let said = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    warn!(panic = %said, "a request's handler panicked; it was answered INTERNAL");
    tonic::Status::internal(
        "the daemon failed on this request (a panic, logged with its message); retry, and report \
         it if it happens again",
    )
    .into_http()
}
