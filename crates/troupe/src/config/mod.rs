//! `troupe serve` settings: flags (or their TROUPE_* variables) override the
//! config file, which overrides the built-in defaults.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;
use troupe_runtime::{RuntimeConfig, StateMode};
use troupe_transport::link::{ChannelPlan, LinkProtocol, LinksConfig, Window};

use crate::auth::TokenSource;
use crate::telemetry::LogFormat;

mod args;
mod exposure;
pub mod memory_limit;
mod tls;
mod values;

pub use args::ServeArgs;
pub use tls::{TlsArgs, TlsRole};

#[cfg(test)]
use values::new_node_name;
pub(crate) use values::token_source;
use values::{
    default_node_name, host_port, node_name, otlp_endpoint, placement_addresses, read_file,
    sled_cache_bytes,
};

/// The same settings as read from a TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<SocketAddr>,
    listen_unix: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    store: Option<String>,
    sled_cache_bytes: Option<u64>,
    max_payload_bytes: Option<usize>,
    max_pending_calls: Option<usize>,
    max_pending_per_type: Option<usize>,
    #[serde(default, deserialize_with = "crate::duration::optional::deserialize")]
    turn_timeout: Option<Duration>,
    max_mailbox: Option<usize>,
    #[serde(default, deserialize_with = "crate::duration::optional::deserialize")]
    idle_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "crate::duration::optional::deserialize")]
    call_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "crate::duration::optional::deserialize")]
    host_wait: Option<Duration>,
    #[serde(default, deserialize_with = "crate::duration::optional::deserialize")]
    flush_interval: Option<Duration>,
    flush_max_dirty_bytes: Option<usize>,
    #[serde(default, deserialize_with = "crate::duration::optional::deserialize")]
    shutdown_grace: Option<Duration>,
    #[serde(default, deserialize_with = "crate::duration::optional::deserialize")]
    shutdown_flush_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "crate::duration::optional::deserialize")]
    idempotency_retention: Option<Duration>,
    idempotency_memory_bytes: Option<usize>,
    max_activations: Option<usize>,
    max_watched_actors: Option<usize>,
    memory_shed_percent: Option<u8>,
    threads: Option<usize>,
    workers: Option<usize>,
    #[serde(default)]
    write_through: bool,
    otlp_endpoint: Option<String>,
    metrics_listen: Option<SocketAddr>,
    #[serde(default)]
    metrics_plain_http: bool,
    health_listen: Option<SocketAddr>,
    placement: Option<Vec<String>>,
    node: Option<String>,
    advertise: Option<String>,
    peer_channels: Option<String>,
    peer_protocol: Option<String>,
    peer_window: Option<String>,
    peer_queue_bytes: Option<usize>,
    api_token_file: Option<PathBuf>,
    app_token_file: Option<PathBuf>,
    read_token_file: Option<PathBuf>,
    #[serde(default)]
    insecure: bool,
    log_format: Option<LogFormat>,
    tls: Option<TlsArgs>,
}

/// Which state store to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreKind {
    Sled(PathBuf),
    Postgres(PostgresUrl),
    Memory,
}

/// A PostgreSQL connection URL. It may hold a password, so `Debug` shows it
/// without one; only [`PostgresUrl::expose`] gives the whole text.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresUrl(String);

impl PostgresUrl {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&troupe_storage_postgres::PostgresStore::redact(&self.0))
    }
}

/// Everything `serve` needs, resolved.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    /// A Unix domain socket serving the same API; `None`: TCP only.
    pub listen_unix: Option<PathBuf>,
    /// Worker threads of the daemon's async runtime.
    pub threads: usize,
    pub store: StoreKind,
    /// sled's page cache, for `StoreKind::Sled`.
    pub sled_cache_bytes: u64,
    /// The memory limit the daemon runs under, which the memory bounds'
    /// defaults follow; `None`: none found.
    pub memory_limit: Option<u64>,
    pub runtime: RuntimeConfig,
    /// Where to export traces; `None`: no export.
    pub trace_export: Option<TraceExport>,
    /// Where to serve `/metrics`; `None`: no endpoint, and no collection.
    pub metrics_listen: Option<SocketAddr>,
    /// Serve `/metrics` over HTTPS with the listener's certificate files;
    /// `None`: plain HTTP.
    pub metrics_tls: Option<MetricsTls>,
    /// Where to serve plaintext health checks; `None`: only on `listen`.
    /// Allowed anywhere: it serves nothing but grpc.health.v1.
    pub health_listen: Option<SocketAddr>,
    /// Cluster membership; `None`: a single node owning every actor.
    pub cluster: Option<ClusterConfig>,
    /// Client API tokens; `None`: that API is open.
    pub api_tokens: Option<TokenSource>,
    /// App tokens; `None`: any process may attach as an app.
    pub app_tokens: Option<TokenSource>,
    /// Read-only tokens; `None`: only the API token inspects. Never
    /// without `api_tokens`.
    pub read_tokens: Option<TokenSource>,
    /// TLS on the listener and to peers and placement; `None`: plaintext.
    pub tls: Option<troupe_tls::TlsSettings>,
    pub log_format: LogFormat,
}

/// How `/metrics` is served over HTTPS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsTls {
    /// The listener's certificate, key and CA.
    pub files: troupe_tls::TlsFiles,
    /// Scrapers must present a certificate from the CA, as the listener's
    /// clients must (`--tls-client-certs required`).
    pub clients_required: bool,
}

/// How this daemon takes part in a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// Placement replicas, `host:port` each, tried in turn.
    pub placement: Vec<String>,
    /// `host:port` other daemons forward calls to; `None`: the bound listen
    /// address (known only once bound, for port 0).
    pub advertise: Option<String>,
    /// How the links to other daemons are laid out.
    pub links: LinkSettings,
}

/// The settable part of `troupe_transport::link::LinksConfig`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkSettings {
    pub protocol: LinkProtocol,
    pub channels: ChannelPlan,
    pub window: Window,
    pub queue_bytes: usize,
}

/// Trace export over OTLP/gRPC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceExport {
    /// The collector, checked to be an `http://HOST:PORT` URL.
    pub endpoint: String,
    /// This daemon's node name, for the exported resource.
    pub node: String,
}

pub const DEFAULT_LISTEN: &str = "127.0.0.1:7420";

impl ServeArgs {
    /// Resolved under the memory limit this process runs under.
    pub fn resolve(&self) -> anyhow::Result<ServeConfig> {
        self.resolve_under(memory_limit::detect())
    }

    /// Resolved as if under `memory_limit` (bytes; `None`: no limit), which
    /// the memory bounds' defaults follow (`memory_limit`).
    pub fn resolve_under(&self, memory_limit: Option<u64>) -> anyhow::Result<ServeConfig> {
        let file = match &self.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let links = self.link_settings(&file)?;
        let memory = memory_limit::defaults_under(
            memory_limit,
            memory_limit::MemoryDefaults {
                sled_cache_bytes: troupe_storage_sled::DEFAULT_CACHE_BYTES,
                idempotency_memory_bytes: RuntimeConfig::default().idempotency_memory_bytes,
            },
        );
        let (mut runtime, threads) = self.runtime_settings(&file, memory_limit, &memory)?;

        let listen = match self.listen.or(file.listen) {
            Some(a) => a,
            None => DEFAULT_LISTEN.parse().context("built-in listen address")?,
        };
        let data_dir = self
            .data_dir
            .clone()
            .or(file.data_dir.clone())
            .unwrap_or_else(|| PathBuf::from("troupe-data"));
        let store = match self.store.clone().or(file.store.clone()).as_deref() {
            None | Some("sled") => StoreKind::Sled(data_dir),
            Some("memory") => StoreKind::Memory,
            Some(url) if is_postgres_url(url) => StoreKind::Postgres(PostgresUrl(url.to_owned())),
            Some(other) => anyhow::bail!(
                "unknown --store {:?}; use `sled` (the default, under --data-dir), \
                 `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE` or `memory`",
                troupe_storage_postgres::PostgresStore::redact(other)
            ),
        };
        runtime.node = match self.node.clone().or(file.node.clone()) {
            Some(node) => node_name(&node)?,
            None => default_node_name(),
        };
        let cluster = match self.placement.clone().or(file.placement.clone()) {
            None => None,
            Some(replicas) => Some(ClusterConfig {
                placement: placement_addresses(&replicas)?,
                advertise: match self.advertise.clone().or(file.advertise.clone()) {
                    Some(a) => Some(host_port("--advertise", &a)?),
                    None => None,
                },
                links,
            }),
        };
        if cluster.is_some() && matches!(store, StoreKind::Sled(_)) {
            anyhow::bail!(
                "--placement (a cluster) needs a store the daemons share: with sled each daemon \
                 keeps its own state, and an actor moving to another daemon would lose it; use \
                 --store postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE (or --store memory for \
                 actors without state)"
            );
        }
        let metrics_listen = self.metrics_listen.or(file.metrics_listen);
        runtime.metrics = metrics_listen.is_some();
        let trace_export = match self.otlp_endpoint.clone().or(file.otlp_endpoint.clone()) {
            Some(url) => Some(TraceExport {
                endpoint: otlp_endpoint(&url)?,
                node: runtime.node.clone(),
            }),
            None => None,
        };
        let listen_unix = self.listen_unix.clone().or(file.listen_unix.clone());
        let guards = self.guards(
            &file,
            &exposure::Listeners {
                listen,
                listen_unix: listen_unix.as_deref(),
                metrics_listen,
            },
        )?;
        if self.test_clock {
            check_test_clock(listen, cluster.is_some())?;
            runtime.test_clock = true;
        }
        // Before anything starts, with the setting's name in the message.
        runtime.check()?;
        Ok(ServeConfig {
            listen,
            listen_unix,
            threads,
            store,
            sled_cache_bytes: sled_cache_bytes(
                self.sled_cache_bytes.or(file.sled_cache_bytes),
                memory.sled_cache_bytes,
            )?,
            memory_limit,
            runtime,
            trace_export,
            metrics_listen,
            metrics_tls: guards.metrics_tls,
            health_listen: self.health_listen.or(file.health_listen),
            cluster,
            api_tokens: guards.api_tokens,
            app_tokens: guards.app_tokens,
            read_tokens: guards.read_tokens,
            tls: guards.tls,
            log_format: self.log_format.or(file.log_format).unwrap_or_default(),
        })
    }

    /// The runtime's settings from flags and `file`, and the daemon's
    /// thread count; memory bounds default to what `memory` (under
    /// `memory_limit`) says.
    fn runtime_settings(
        &self,
        file: &FileConfig,
        memory_limit: Option<u64>,
        memory: &memory_limit::MemoryDefaults,
    ) -> anyhow::Result<(RuntimeConfig, usize)> {
        let mut runtime = RuntimeConfig {
            idempotency_memory_bytes: memory.idempotency_memory_bytes,
            ..RuntimeConfig::default()
        };
        macro_rules! pick {
            ($field:ident, $target:expr) => {
                if let Some(v) = self.$field.clone().or(file.$field.clone()) {
                    $target = v;
                }
            };
        }
        pick!(max_payload_bytes, runtime.max_payload_bytes);
        pick!(max_pending_calls, runtime.max_pending_calls);
        runtime.max_pending_per_type = self.max_pending_per_type.or(file.max_pending_per_type);
        pick!(turn_timeout, runtime.default_turn_timeout);
        pick!(max_mailbox, runtime.default_max_mailbox);
        pick!(idle_timeout, runtime.default_idle_timeout);
        pick!(call_timeout, runtime.call_timeout);
        pick!(host_wait, runtime.host_wait);
        pick!(flush_interval, runtime.flush_interval);
        pick!(flush_max_dirty_bytes, runtime.flush_max_dirty_bytes);
        pick!(shutdown_grace, runtime.shutdown_grace);
        pick!(shutdown_flush_timeout, runtime.shutdown_flush_timeout);
        pick!(idempotency_retention, runtime.idempotency_retention);
        pick!(idempotency_memory_bytes, runtime.idempotency_memory_bytes);
        pick!(max_watched_actors, runtime.max_watched_actors);
        runtime.max_activations = self.max_activations.or(file.max_activations);
        let shed_percent = self
            .memory_shed_percent
            .or(file.memory_shed_percent)
            .unwrap_or(memory_limit::SHED_PERCENT);
        runtime.memory_shedding = memory_limit
            .filter(|_| shed_percent > 0)
            .map(|limit_bytes| troupe_runtime::MemoryShedding {
                limit_bytes,
                percent: shed_percent,
            });
        // By default one per CPU, as tokio and the runtime's workers are
        // sized. One thread would spend less CPU per call (`bench/ghz.sh`,
        // `MODES="plain onethread"`), but a daemon on one thread shares it
        // between turns and the write-behind flush: on a loaded machine its
        // flushes fell more than a second behind (tests/tests/state_crash.rs,
        // four daemons at once on 2 cores).
        let threads = self.threads.or(file.threads).unwrap_or(runtime.workers);
        if threads == 0 {
            anyhow::bail!(
                "`threads` (--threads) is 0; give the daemon at least one thread \
                 (the default is one per CPU)"
            );
        }
        runtime.workers = threads;
        pick!(workers, runtime.workers);
        runtime.default_state_mode = StateMode::WriteBehind;
        runtime.write_through = self.write_through || file.write_through;
        Ok((runtime, threads))
    }

    fn link_settings(&self, file: &FileConfig) -> anyhow::Result<LinkSettings> {
        let defaults = LinksConfig::default();
        let channels = match (self.peer_channels, &file.peer_channels) {
            (Some(plan), _) => plan,
            (None, Some(text)) => text.parse()?,
            (None, None) => defaults.channels,
        };
        let protocol = match (self.peer_protocol, &file.peer_protocol) {
            (Some(protocol), _) => protocol,
            (None, Some(text)) => text.parse()?,
            (None, None) => defaults.protocol,
        };
        let window = match (self.peer_window, &file.peer_window) {
            (Some(window), _) => window,
            (None, Some(text)) => text.parse()?,
            (None, None) => defaults.window,
        };
        let queue_bytes = self
            .peer_queue_bytes
            .or(file.peer_queue_bytes)
            .unwrap_or(defaults.queue_bytes);
        if queue_bytes < 1024 * 1024 {
            anyhow::bail!(
                "--peer-queue-bytes {queue_bytes} is too small: give at least 1048576 (1 MiB)"
            );
        }
        Ok(LinkSettings {
            protocol,
            channels,
            window,
            queue_bytes,
        })
    }

    /// The log format and trace export as configured, for setting up
    /// logging before `serve` runs. When the settings are invalid: the
    /// flag's format and no export; `serve` resolves them again and reports
    /// why, in that format.
    pub fn logging(&self) -> (LogFormat, Option<TraceExport>) {
        match self.resolve() {
            Ok(config) => (config.log_format, config.trace_export),
            Err(_) => (self.log_format.unwrap_or_default(), None),
        }
    }
}

#[cfg(test)]
mod tests;

/// Whoever reaches a daemon with `--test-clock` can move its reminders'
/// time forward and fire a month of them at once: only a daemon a test
/// starts for itself, alone and on loopback, may have one.
fn check_test_clock(listen: SocketAddr, cluster: bool) -> anyhow::Result<()> {
    if cluster {
        anyhow::bail!(
            "--test-clock is for tests: it lets any caller move time forward, so a daemon in a \
             cluster (--placement) refuses it; start a lone test daemon on 127.0.0.1 instead"
        );
    }
    if !listen.ip().is_loopback() {
        anyhow::bail!(
            "--test-clock is for tests: it lets any caller move time forward, so it needs a \
             loopback --listen (e.g. 127.0.0.1:0), not {listen}"
        );
    }
    Ok(())
}

/// Whether `place` names a PostgreSQL store (`--store`, `troupe store copy`)
/// rather than a sled directory or a keyword.
pub(crate) fn is_postgres_url(place: &str) -> bool {
    place.starts_with("postgres://") || place.starts_with("postgresql://")
}
