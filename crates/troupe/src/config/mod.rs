//! `troupe serve` settings: flags (or their TROUPE_* variables) override the
//! config file, which overrides the built-in defaults.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;
use troupe_runtime::{RuntimeConfig, StateMode};
use troupe_transport::link::{ChannelPlan, LinkProtocol, LinksConfig, Window};

use crate::auth::{Credential, TokenSource};
use crate::telemetry::LogFormat;

pub mod memory_limit;
mod tls;
mod values;

pub use tls::{TlsArgs, TlsRole};

#[cfg(test)]
use values::new_node_name;
use values::{
    default_node_name, host_port, node_name, otlp_endpoint, placement_addresses, read_file,
    sled_cache_bytes, token_source,
};

/// Flags of `troupe serve`. Every setting can also come from `--config`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeArgs {
    /// TOML file with any of the settings below (flag names with `_`).
    #[arg(long, env = "TROUPE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address for the gRPC API [default: 127.0.0.1:7420]; port 0 picks a free one.
    #[arg(long, env = "TROUPE_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Also serve the gRPC API on this Unix domain socket, for apps and
    /// clients on the same machine or in the same pod (`unix:PATH` in the
    /// SDKs and the CLI): only the file's owner and group may connect, and
    /// no port is taken; tokens apply as on --listen [default: off].
    #[arg(long, env = "TROUPE_LISTEN_UNIX")]
    pub listen_unix: Option<PathBuf>,
    /// Directory for the embedded state store [default: ./troupe-data].
    #[arg(long, env = "TROUPE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// State store: `sled` (under --data-dir), `postgres://USER[:PASSWORD]@HOST[:PORT]/DB`
    /// (shared by several daemons) or `memory` (nothing survives) [default: sled].
    #[arg(long, env = "TROUPE_STORE")]
    pub store: Option<String>,
    /// Bytes of sled's page cache (the embedded store's memory, besides
    /// what the runtime holds) [default: 268435456, or under a memory limit
    /// (cgroup) an eighth of it if less].
    #[arg(long, env = "TROUPE_SLED_CACHE_BYTES")]
    pub sled_cache_bytes: Option<u64>,
    /// Largest payload or state value in bytes [default: 4194304].
    #[arg(long, env = "TROUPE_MAX_PAYLOAD_BYTES")]
    pub max_payload_bytes: Option<usize>,
    /// Calls queued or running in the daemon before RESOURCE_EXHAUSTED [default: 100000].
    #[arg(long, env = "TROUPE_MAX_PENDING_CALLS")]
    pub max_pending_calls: Option<usize>,
    /// Calls of one actor type queued or running before RESOURCE_EXHAUSTED, for
    /// types that set none [default: half of --max-pending-calls].
    #[arg(long, env = "TROUPE_MAX_PENDING_PER_TYPE")]
    pub max_pending_per_type: Option<usize>,
    /// Longest one turn may run, for types that set none; past it the caller gets
    /// DEADLINE_EXCEEDED and the actor is deactivated [default: 60s].
    #[arg(long, value_parser = crate::duration::flag, env = "TROUPE_TURN_TIMEOUT")]
    pub turn_timeout: Option<Duration>,
    /// Default per-actor mailbox bound, for types that set none [default: 1000].
    #[arg(long, env = "TROUPE_MAX_MAILBOX")]
    pub max_mailbox: Option<usize>,
    /// Default idle time before an actor is deactivated [default: 10m].
    #[arg(long, value_parser = crate::duration::flag, env = "TROUPE_IDLE_TIMEOUT")]
    pub idle_timeout: Option<Duration>,
    /// Longest any call may take [default: 60s].
    #[arg(long, value_parser = crate::duration::flag, env = "TROUPE_CALL_TIMEOUT")]
    pub call_timeout: Option<Duration>,
    /// How long calls wait for an app to register their type [default: 10s].
    #[arg(long, value_parser = crate::duration::flag, env = "TROUPE_HOST_WAIT")]
    pub host_wait: Option<Duration>,
    /// Write-behind flush interval [default: 1s].
    #[arg(long, value_parser = crate::duration::flag, env = "TROUPE_FLUSH_INTERVAL")]
    pub flush_interval: Option<Duration>,
    /// Dirty bytes that trigger an early flush [default: 16777216].
    #[arg(long, env = "TROUPE_FLUSH_MAX_DIRTY_BYTES")]
    pub flush_max_dirty_bytes: Option<usize>,
    /// How long a graceful shutdown waits for turns and deactivations [default: 30s].
    #[arg(long, value_parser = crate::duration::flag, env = "TROUPE_SHUTDOWN_GRACE")]
    pub shutdown_grace: Option<Duration>,
    /// How long SIGTERM then tries to write what is left; past it the daemon
    /// logs the actors and keys it could not write and exits 1. Also bounds
    /// the write a daemon whose placement lease lapsed makes of the changes
    /// it held, before it joins again [default: 10s].
    #[arg(long, value_parser = crate::duration::flag, env = "TROUPE_SHUTDOWN_FLUSH_TIMEOUT")]
    pub shutdown_flush_timeout: Option<Duration>,
    /// How long the answer of a keyed call (idempotency key) is kept for
    /// its retries [default: 24h].
    #[arg(long, value_parser = crate::duration::flag, env = "TROUPE_IDEMPOTENCY_RETENTION")]
    pub idempotency_retention: Option<Duration>,
    /// Bytes the live actors may spend together remembering which keys the
    /// store holds answers for (about 60 bytes a key); past it, those
    /// holding the most keep them as tags only or forget them, and retries
    /// of their keys read the store [default: 67108864, or under a memory
    /// limit (cgroup) an eighth of it if less].
    #[arg(long, env = "TROUPE_IDEMPOTENCY_MEMORY_BYTES")]
    pub idempotency_memory_bytes: Option<usize>,
    /// Activations this daemon holds at most: past it, the actors idle
    /// longest are deactivated before their idle timeout, down to nine
    /// tenths of it [default: no bound but the idle timeouts].
    #[arg(long, env = "TROUPE_MAX_ACTIVATIONS")]
    pub max_activations: Option<usize>,
    /// Threads that run the daemon: its gRPC connections, app streams and
    /// turns [default: number of CPUs]. A sidecar whose traffic one core
    /// carries spends the least CPU per call with 1: no wake-ups across
    /// threads (`bench/ghz.sh` measures both).
    #[arg(long, env = "TROUPE_THREADS")]
    pub threads: Option<usize>,
    /// Turn dispatch workers [default: --threads].
    #[arg(long, env = "TROUPE_WORKERS")]
    pub workers: Option<usize>,
    /// Benchmark baseline: write each turn's state changes before replying,
    /// one store write per turn (no write-behind, no group commit).
    #[arg(long, env = "TROUPE_WRITE_THROUGH", value_parser = clap::builder::BoolishValueParser::new())]
    pub write_through: bool,
    /// Export traces over OTLP/gRPC to this collector, e.g. `http://127.0.0.1:4317`
    /// [default: off].
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// Serve Prometheus metrics (`GET /metrics`) on this address, e.g.
    /// `127.0.0.1:9464`; port 0 picks a free one [default: off].
    #[arg(long, env = "TROUPE_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Serve gRPC health checks (grpc.health.v1 only) in plaintext on this
    /// address too, for Kubernetes `grpc:` probes when --listen has TLS; no
    /// token needed, even beyond loopback [default: off].
    #[arg(long, env = "TROUPE_HEALTH_LISTEN")]
    pub health_listen: Option<SocketAddr>,
    /// Join a cluster: the placement replicas' addresses, `HOST:PORT[,HOST:PORT...]`
    /// [default: off, this daemon owns every actor].
    #[arg(long, value_delimiter = ',', env = "TROUPE_PLACEMENT")]
    pub placement: Option<Vec<String>>,
    /// This daemon's name in the cluster, unique per process run
    /// [default: HOSTNAME-PID-RANDOM].
    #[arg(long, env = "TROUPE_NODE")]
    pub node: Option<String>,
    /// `HOST:PORT` other daemons dial to forward calls here [default: the --listen address].
    #[arg(long, env = "TROUPE_ADVERTISE")]
    pub advertise: Option<String>,
    /// Channels of the links to each other daemon and their connections:
    /// `call=N,bulk=M` (small calls apart from chunked payloads of 64 KiB and
    /// more) or `single=N` (everything on N connections, no chunking)
    /// [default: control=1,call=2,bulk=4].
    #[arg(long, env = "TROUPE_PEER_CHANNELS")]
    pub peer_channels: Option<ChannelPlan>,
    /// How this daemon's links to others travel: `framed` (frames straight
    /// on each connection, to the daemon's port; a daemon older than that is
    /// reached with PeerLink calls anyway) or `grpc` (a PeerLink.Open call
    /// per connection, as a plain gRPC client would; a daemon answers both)
    /// [default: framed].
    #[arg(long, env = "TROUPE_PEER_PROTOCOL")]
    pub peer_protocol: Option<LinkProtocol>,
    /// HTTP/2 windows of `grpc` links, per stream and connection: bytes,
    /// `auto` (grown to each connection's bandwidth-delay product) or
    /// `default` (the HTTP/2 library's) [default: 16777216].
    #[arg(long, env = "TROUPE_PEER_WINDOW")]
    pub peer_window: Option<Window>,
    /// Bytes one channel may hold queued for one peer; past it forwarded calls
    /// get RESOURCE_EXHAUSTED [default: 268435456].
    #[arg(long, env = "TROUPE_PEER_QUEUE_BYTES")]
    pub peer_queue_bytes: Option<usize>,
    /// File of client API tokens, one per line (several while rotating),
    /// read again when it changes; `TROUPE_API_TOKEN` adds more. With any,
    /// client, admin and reflection calls, and peers' links, must send one.
    #[arg(long, env = "TROUPE_API_TOKEN_FILE")]
    pub api_token_file: Option<PathBuf>,
    /// File of app tokens, as --api-token-file; `TROUPE_APP_TOKEN` adds
    /// more. With any, an app must send one to attach.
    #[arg(long, env = "TROUPE_APP_TOKEN_FILE")]
    pub app_token_file: Option<PathBuf>,
    /// Listen beyond loopback without requiring both tokens: only where
    /// nobody but trusted callers can reach the address.
    #[arg(long, env = "TROUPE_INSECURE", value_parser = clap::builder::BoolishValueParser::new())]
    pub insecure: bool,
    /// For tests only: reminders, alarms and timers run on a clock that
    /// `Admin.AdvanceClock` moves forward (docs/testing.md). Refused with
    /// --placement and with a --listen beyond loopback.
    #[arg(long, hide_short_help = true, env = "TROUPE_TEST_CLOCK", value_parser = clap::builder::BoolishValueParser::new())]
    pub test_clock: bool,
    /// Log lines on stderr: `text` for people, `json` (one object per line)
    /// for log collectors [default: text].
    #[arg(long, value_enum, env = "TROUPE_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
    #[command(flatten)]
    pub tls: TlsArgs,
}

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
    threads: Option<usize>,
    workers: Option<usize>,
    #[serde(default)]
    write_through: bool,
    otlp_endpoint: Option<String>,
    metrics_listen: Option<SocketAddr>,
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
    /// Where to serve plaintext health checks; `None`: only on `listen`.
    /// Allowed anywhere: it serves nothing but grpc.health.v1.
    pub health_listen: Option<SocketAddr>,
    /// Cluster membership; `None`: a single node owning every actor.
    pub cluster: Option<ClusterConfig>,
    /// Client API tokens; `None`: that API is open.
    pub api_tokens: Option<TokenSource>,
    /// App tokens; `None`: any process may attach as an app.
    pub app_tokens: Option<TokenSource>,
    /// TLS on the listener and to peers and placement; `None`: plaintext.
    pub tls: Option<troupe_tls::TlsSettings>,
    pub log_format: LogFormat,
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
        let mut runtime = RuntimeConfig::default();
        let memory = memory_limit::defaults_under(
            memory_limit,
            memory_limit::MemoryDefaults {
                sled_cache_bytes: troupe_storage_sled::DEFAULT_CACHE_BYTES,
                idempotency_memory_bytes: runtime.idempotency_memory_bytes,
            },
        );
        runtime.idempotency_memory_bytes = memory.idempotency_memory_bytes;
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
        runtime.max_activations = self.max_activations.or(file.max_activations);
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

        let listen = match self.listen.or(file.listen) {
            Some(a) => a,
            None => DEFAULT_LISTEN.parse().context("built-in listen address")?,
        };
        let data_dir = self
            .data_dir
            .clone()
            .or(file.data_dir)
            .unwrap_or_else(|| PathBuf::from("troupe-data"));
        let store = match self.store.clone().or(file.store).as_deref() {
            None | Some("sled") => StoreKind::Sled(data_dir),
            Some("memory") => StoreKind::Memory,
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                StoreKind::Postgres(PostgresUrl(url.to_owned()))
            }
            Some(other) => anyhow::bail!(
                "unknown --store {:?}; use `sled` (the default, under --data-dir), \
                 `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE` or `memory`",
                troupe_storage_postgres::PostgresStore::redact(other)
            ),
        };
        runtime.node = match self.node.clone().or(file.node) {
            Some(node) => node_name(&node)?,
            None => default_node_name(),
        };
        let cluster = match self.placement.clone().or(file.placement) {
            None => None,
            Some(replicas) => Some(ClusterConfig {
                placement: placement_addresses(&replicas)?,
                advertise: match self.advertise.clone().or(file.advertise) {
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
        let trace_export = match self.otlp_endpoint.clone().or(file.otlp_endpoint) {
            Some(url) => Some(TraceExport {
                endpoint: otlp_endpoint(&url)?,
                node: runtime.node.clone(),
            }),
            None => None,
        };
        let api_tokens = token_source(
            Credential::Api,
            self.api_token_file.clone().or(file.api_token_file),
        );
        let app_tokens = token_source(
            Credential::App,
            self.app_token_file.clone().or(file.app_token_file),
        );
        let insecure = self.insecure || file.insecure;
        let tls = self.tls.resolve(file.tls.as_ref(), TlsRole::Daemon)?;
        // Client certificates authenticate every caller as tokens would.
        let callers_proven = tls
            .as_ref()
            .is_some_and(|t| t.client_certs == troupe_tls::ClientCerts::Required);
        if !listen.ip().is_loopback() && !insecure && !callers_proven {
            let missing: Vec<&str> = [
                (&api_tokens, Credential::Api),
                (&app_tokens, Credential::App),
            ]
            .into_iter()
            .filter(|(tokens, _)| tokens.is_none())
            .map(|(_, credential)| credential.env_var())
            .collect();
            if !missing.is_empty() {
                let missing = missing.join(" and ");
                anyhow::bail!(
                    "--listen {listen} is reachable from other machines, and without {missing} \
                     anyone who reaches it can call, read and deactivate every actor or register \
                     as an app and take a type's calls. Set {missing} (or --api-token-file / \
                     --app-token-file; docs/security.md), listen on a loopback address, or pass \
                     --insecure if only trusted callers can reach it"
                );
            }
            if tls.is_none() {
                tracing::warn!(%listen, "listening beyond loopback without TLS: tokens and calls cross the network in plaintext; give --tls-cert, --tls-key and --tls-ca (docs/security.md)");
            }
        }
        let listen_unix = self.listen_unix.clone().or(file.listen_unix);
        if let (Some(path), Some(_)) = (&listen_unix, &tls) {
            anyhow::bail!(
                "--listen-unix {} serves without TLS, which would let local callers past the \
                 TLS settings of --listen; use one or the other",
                path.display()
            );
        }
        if let Some(metrics) = metrics_listen {
            if !metrics.ip().is_loopback() && !insecure && api_tokens.is_none() {
                anyhow::bail!(
                    "--metrics-listen {metrics} is reachable from other machines, and without \
                     TROUPE_API_TOKEN anyone who reaches it reads the metrics (actor types, peers, \
                     load). Set the API token (scrapers then send it as a bearer token, e.g. \
                     Prometheus's authorization.credentials_file), serve metrics on a loopback \
                     address, or pass --insecure if only the monitoring network can reach it"
                );
            }
        }
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
            health_listen: self.health_listen.or(file.health_listen),
            cluster,
            api_tokens,
            app_tokens,
            tls,
            log_format: self.log_format.or(file.log_format).unwrap_or_default(),
        })
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
            "--test-clock is for tests: it lets any caller move time forward, so a daemon in a              cluster (--placement) refuses it; start a lone test daemon on 127.0.0.1 instead"
        );
    }
    if !listen.ip().is_loopback() {
        anyhow::bail!(
            "--test-clock is for tests: it lets any caller move time forward, so it needs a              loopback --listen (e.g. 127.0.0.1:0), not {listen}"
        );
    }
    Ok(())
}
