//! `troupe serve` settings: flags override the config file, which overrides
//! the built-in defaults.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;
use troupe_runtime::{RuntimeConfig, StateMode};
use troupe_transport::link::{ChannelPlan, LinksConfig, Window};

/// Flags of `troupe serve`. Every setting can also come from `--config`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeArgs {
    /// TOML file with any of the settings below (flag names with `_`).
    #[arg(long, env = "TROUPE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address for the gRPC API [default: 127.0.0.1:7420]; port 0 picks a free one.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Directory for the embedded state store [default: ./troupe-data].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// State store: `sled` (under --data-dir), `postgres://USER[:PASSWORD]@HOST[:PORT]/DB`
    /// (shared by several daemons) or `memory` (nothing survives) [default: sled].
    #[arg(long)]
    pub store: Option<String>,
    /// Largest payload or state value in bytes [default: 4194304].
    #[arg(long)]
    pub max_payload_bytes: Option<usize>,
    /// Calls queued or running in the daemon before RESOURCE_EXHAUSTED [default: 100000].
    #[arg(long)]
    pub max_pending_calls: Option<usize>,
    /// Calls of one actor type queued or running before RESOURCE_EXHAUSTED, for
    /// types that set none [default: half of --max-pending-calls].
    #[arg(long)]
    pub max_pending_per_type: Option<usize>,
    /// Longest one turn may run, for types that set none; past it the caller gets
    /// DEADLINE_EXCEEDED and the actor is deactivated [default: 60s].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub turn_timeout: Option<Duration>,
    /// Default per-actor mailbox bound, for types that set none [default: 1000].
    #[arg(long)]
    pub max_mailbox: Option<usize>,
    /// Default idle time before an actor is deactivated [default: 10m].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub idle_timeout: Option<Duration>,
    /// Longest any call may take [default: 60s].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub call_timeout: Option<Duration>,
    /// How long calls wait for an app to register their type [default: 10s].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub host_wait: Option<Duration>,
    /// Write-behind flush interval [default: 1s].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub flush_interval: Option<Duration>,
    /// Dirty bytes that trigger an early flush [default: 16777216].
    #[arg(long)]
    pub flush_max_dirty_bytes: Option<usize>,
    /// How long a graceful shutdown waits for turns and deactivations [default: 30s].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub shutdown_grace: Option<Duration>,
    /// How long SIGTERM then tries to write what is left; past it the daemon
    /// logs the actors and keys it could not write and exits 1 [default: 10s].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub shutdown_flush_timeout: Option<Duration>,
    /// Turn dispatch workers [default: number of CPUs].
    #[arg(long)]
    pub workers: Option<usize>,
    /// Benchmark baseline: write each turn's state changes before replying,
    /// one store write per turn (no write-behind, no group commit).
    #[arg(long)]
    pub write_through: bool,
    /// Export traces over OTLP/gRPC to this collector, e.g. `http://127.0.0.1:4317`
    /// [default: off].
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// Serve Prometheus metrics (`GET /metrics`) on this address, e.g.
    /// `127.0.0.1:9464`; port 0 picks a free one [default: off].
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
    /// Join a cluster: the placement replicas' addresses, `HOST:PORT[,HOST:PORT...]`
    /// [default: off, this daemon owns every actor].
    #[arg(long, value_delimiter = ',', env = "TROUPE_PLACEMENT")]
    pub placement: Option<Vec<String>>,
    /// This daemon's name in the cluster, unique per process run
    /// [default: HOSTNAME-PID-RANDOM].
    #[arg(long, env = "TROUPE_NODE")]
    pub node: Option<String>,
    /// `HOST:PORT` other daemons dial to forward calls here [default: the --listen address].
    #[arg(long)]
    pub advertise: Option<String>,
    /// Channels of the links to each other daemon and their connections:
    /// `call=N,bulk=M` (small calls apart from chunked payloads of 64 KiB and
    /// more) or `single=N` (everything on N connections, no chunking)
    /// [default: control=1,call=2,bulk=4].
    #[arg(long)]
    pub peer_channels: Option<ChannelPlan>,
    /// HTTP/2 windows of the links: `auto` (grown to each connection's
    /// bandwidth-delay product), `default` (the HTTP/2 library's) or bytes
    /// [default: auto].
    #[arg(long)]
    pub peer_window: Option<Window>,
    /// Bytes one channel may hold queued for one peer; past it forwarded calls
    /// get RESOURCE_EXHAUSTED [default: 268435456].
    #[arg(long)]
    pub peer_queue_bytes: Option<usize>,
}

/// The same settings as read from a TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
    store: Option<String>,
    max_payload_bytes: Option<usize>,
    max_pending_calls: Option<usize>,
    max_pending_per_type: Option<usize>,
    #[serde(default, with = "humantime_serde")]
    turn_timeout: Option<Duration>,
    max_mailbox: Option<usize>,
    #[serde(default, with = "humantime_serde")]
    idle_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    call_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    host_wait: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    flush_interval: Option<Duration>,
    flush_max_dirty_bytes: Option<usize>,
    #[serde(default, with = "humantime_serde")]
    shutdown_grace: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    shutdown_flush_timeout: Option<Duration>,
    workers: Option<usize>,
    #[serde(default)]
    write_through: bool,
    otlp_endpoint: Option<String>,
    metrics_listen: Option<SocketAddr>,
    placement: Option<Vec<String>>,
    node: Option<String>,
    advertise: Option<String>,
    peer_channels: Option<String>,
    peer_window: Option<String>,
    peer_queue_bytes: Option<usize>,
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
    pub store: StoreKind,
    pub runtime: RuntimeConfig,
    /// Where to export traces; `None`: no export.
    pub trace_export: Option<TraceExport>,
    /// Where to serve `/metrics`; `None`: no endpoint, and no collection.
    pub metrics_listen: Option<SocketAddr>,
    /// Cluster membership; `None`: a single node owning every actor.
    pub cluster: Option<ClusterConfig>,
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
    pub fn resolve(&self) -> anyhow::Result<ServeConfig> {
        let file = match &self.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let links = self.link_settings(&file)?;
        let mut runtime = RuntimeConfig::default();
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
        // Before anything starts, with the setting's name in the message.
        runtime.check()?;
        Ok(ServeConfig {
            listen,
            store,
            runtime,
            trace_export,
            metrics_listen,
            cluster,
        })
    }

    fn link_settings(&self, file: &FileConfig) -> anyhow::Result<LinkSettings> {
        let defaults = LinksConfig::default();
        let channels = match (self.peer_channels, &file.peer_channels) {
            (Some(plan), _) => plan,
            (None, Some(text)) => text.parse()?,
            (None, None) => defaults.channels,
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
            channels,
            window,
            queue_bytes,
        })
    }

    /// Trace export as configured, for setting up logging before `serve`
    /// runs. `None` also when the settings are invalid: `serve` resolves
    /// them again and reports why.
    pub fn trace_export(&self) -> Option<TraceExport> {
        self.resolve().ok()?.trace_export
    }
}

/// A node name from --node: printable, no spaces, so it reads well in logs
/// and tables and stays one token in the activation log.
fn node_name(node: &str) -> anyhow::Result<String> {
    let node = node.trim();
    if node.is_empty()
        || node.len() > 200
        || node.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        anyhow::bail!(
            "--node {node:?} is not a usable node name; give 1-200 characters without spaces, \
             unique per daemon process (or leave it out for HOSTNAME-PID-RANDOM)"
        );
    }
    Ok(node.to_owned())
}

/// Unique per process run: a restarted daemon must join as a new member, so
/// the pid alone (reused across container restarts) is not enough.
fn default_node_name() -> String {
    // Once per process: `resolve` runs more than once (logging is set up
    // before `serve`) and every caller must see the same name.
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(new_node_name).clone()
}

fn new_node_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "troupe".to_owned());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() ^ (d.as_secs() as u32));
    let random = std::collections::hash_map::RandomState::new();
    let mixed = std::hash::BuildHasher::hash_one(&random, nanos) as u32;
    format!("{host}-{}-{mixed:08x}", std::process::id())
}

/// The replicas of --placement, each checked to be `host:port`.
fn placement_addresses(replicas: &[String]) -> anyhow::Result<Vec<String>> {
    let replicas: Vec<String> = replicas
        .iter()
        .map(|r| r.trim())
        .filter(|r| !r.is_empty())
        .map(|r| host_port("--placement", r))
        .collect::<anyhow::Result<_>>()?;
    if replicas.is_empty() {
        anyhow::bail!(
            "--placement names no replica; give the placement service's addresses as \
             HOST:PORT[,HOST:PORT...], or leave it out to run a single node"
        );
    }
    Ok(replicas)
}

/// `HOST:PORT` (an `http://` prefix is allowed and dropped).
fn host_port(flag: &str, value: &str) -> anyhow::Result<String> {
    let bare = value.trim().trim_start_matches("http://");
    let ok = bare
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0));
    if !ok || bare.contains('/') {
        anyhow::bail!("{flag} {value:?} is not HOST:PORT (e.g. 10.0.0.5:7420)");
    }
    Ok(bare.to_owned())
}

/// Checks an OTLP/gRPC collector URL, so that a typo fails at start rather
/// than as export errors later.
fn otlp_endpoint(url: &str) -> anyhow::Result<String> {
    const HOW: &str = "give the collector's OTLP/gRPC address as http://HOST:PORT \
                       (usually port 4317), e.g. --otlp-endpoint http://127.0.0.1:4317";
    let url = url.trim();
    let uri: tonic::codegen::http::Uri = url
        .parse()
        .map_err(|e| anyhow::anyhow!("--otlp-endpoint {url:?} is not a URL ({e}); {HOW}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        // TLS would add a second crypto stack to the binary; a sidecar
        // normally reaches a collector on the same host or pod.
        Some("https") => anyhow::bail!(
            "--otlp-endpoint {url:?}: this build exports without TLS; point it at a \
             collector reachable over plain http (e.g. a local OpenTelemetry Collector \
             that forwards over TLS), as http://HOST:PORT"
        ),
        _ => anyhow::bail!("--otlp-endpoint {url:?} has no http:// scheme; {HOW}"),
    }
    if uri.authority().is_none_or(|a| a.host().is_empty()) {
        anyhow::bail!("--otlp-endpoint {url:?} names no host; {HOW}");
    }
    Ok(url.to_owned())
}

fn read_file(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    toml::from_str(&text).with_context(|| {
        format!(
            "config file {} is not valid: settings are the `serve` flag names with `_` \
             (e.g. listen = \"127.0.0.1:7420\", flush_interval = \"500ms\")",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_file_which_overrides_defaults() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("troupe.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:9000\"\nflush_interval = \"250ms\"\nmax_mailbox = 7\n",
        )?;
        let args = ServeArgs {
            config: Some(path),
            max_mailbox: Some(9),
            ..ServeArgs::default()
        };
        let cfg = args.resolve()?;
        assert_eq!(cfg.listen.port(), 9000);
        assert_eq!(cfg.runtime.flush_interval, Duration::from_millis(250));
        assert_eq!(cfg.runtime.default_max_mailbox, 9);
        assert_eq!(cfg.store, StoreKind::Sled(PathBuf::from("troupe-data")));
        Ok(())
    }

    #[test]
    fn a_postgres_url_selects_postgres_and_never_shows_its_password() -> anyhow::Result<()> {
        let args = ServeArgs {
            store: Some("postgres://troupe:s3cret@db.internal:5433/state".into()),
            ..ServeArgs::default()
        };
        let cfg = args.resolve()?;
        let StoreKind::Postgres(url) = &cfg.store else {
            anyhow::bail!("expected a PostgreSQL store, got {:?}", cfg.store);
        };
        assert_eq!(
            url.expose(),
            "postgres://troupe:s3cret@db.internal:5433/state"
        );
        let shown = format!("{cfg:?}");
        assert!(
            shown.contains("postgres://troupe@db.internal:5433/state"),
            "{shown}"
        );
        assert!(!shown.contains("s3cret"), "{shown}");

        let args = ServeArgs {
            store: Some("mysql://u:s3cret@h/db".into()),
            ..ServeArgs::default()
        };
        let Err(e) = args.resolve() else {
            anyhow::bail!("an unknown store was accepted");
        };
        assert!(!e.to_string().contains("s3cret"), "{e}");
        Ok(())
    }

    #[test]
    fn export_and_metrics_are_off_unless_asked_for() -> anyhow::Result<()> {
        let cfg = ServeArgs::default().resolve()?;
        assert_eq!(cfg.trace_export, None);
        assert_eq!(cfg.metrics_listen, None);
        assert!(!cfg.runtime.metrics);

        let dir = tempfile::tempdir()?;
        let path = dir.path().join("troupe.toml");
        std::fs::write(
            &path,
            "otlp_endpoint = \"http://127.0.0.1:4317\"\nmetrics_listen = \"127.0.0.1:9464\"\n",
        )?;
        let cfg = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        }
        .resolve()?;
        assert_eq!(
            cfg.trace_export.map(|t| t.endpoint).as_deref(),
            Some("http://127.0.0.1:4317")
        );
        assert_eq!(cfg.metrics_listen, Some("127.0.0.1:9464".parse()?));
        assert!(cfg.runtime.metrics);
        Ok(())
    }

    #[test]
    fn a_bad_otlp_endpoint_says_what_to_give() -> anyhow::Result<()> {
        let bad = [
            "127.0.0.1:4317",
            "grpc://collector:4317",
            "http://",
            "https://collector:4317",
            "ht tp://x",
        ];
        for url in bad {
            let args = ServeArgs {
                otlp_endpoint: Some(url.into()),
                ..ServeArgs::default()
            };
            let Err(e) = args.resolve() else {
                anyhow::bail!("{url:?} was accepted as an OTLP endpoint");
            };
            let text = e.to_string();
            assert!(text.contains("--otlp-endpoint"), "{text}");
            assert!(text.contains("http://"), "{text}");
        }
        Ok(())
    }

    #[test]
    fn cluster_settings_from_flags_and_file() -> anyhow::Result<()> {
        let cfg = ServeArgs::default().resolve()?;
        assert_eq!(cfg.cluster, None);
        // One name per process run, and the runtime names itself by it.
        let again = ServeArgs::default().resolve()?;
        assert_eq!(cfg.runtime.node, again.runtime.node);
        assert!(cfg.runtime.node.contains(&std::process::id().to_string()));
        assert_ne!(new_node_name(), new_node_name());

        let dir = tempfile::tempdir()?;
        let path = dir.path().join("troupe.toml");
        std::fs::write(
            &path,
            "placement = [\"10.0.0.1:7500\", \"10.0.0.2:7500\"]\nnode = \"a\"\n\
             store = \"memory\"\npeer_channels = \"single=16\"\n",
        )?;
        let cfg = ServeArgs {
            config: Some(path),
            advertise: Some("10.0.0.9:7420".into()),
            ..ServeArgs::default()
        }
        .resolve()?;
        assert_eq!(cfg.runtime.node, "a");
        assert_eq!(
            cfg.cluster,
            Some(ClusterConfig {
                placement: vec!["10.0.0.1:7500".into(), "10.0.0.2:7500".into()],
                advertise: Some("10.0.0.9:7420".into()),
                links: LinkSettings {
                    channels: ChannelPlan::Single(16),
                    window: Window::Auto,
                    queue_bytes: LinksConfig::default().queue_bytes,
                },
            })
        );

        // A cluster on sled would lose state whenever an actor moves.
        let on_sled = ServeArgs {
            placement: Some(vec!["10.0.0.1:7500".into()]),
            ..ServeArgs::default()
        };
        let Err(e) = on_sled.resolve() else {
            anyhow::bail!("a cluster on sled was accepted");
        };
        assert!(e.to_string().contains("--store postgres://"), "{e}");

        for (placement, advertise, node) in [
            (vec!["10.0.0.1"], None, None),
            (vec![""], None, None),
            (vec!["h:1"], Some("nohost"), None),
            (vec!["h:1"], None, Some("two words")),
        ] {
            let args = ServeArgs {
                placement: Some(placement.iter().map(|s| s.to_string()).collect()),
                advertise: advertise.map(Into::into),
                node: node.map(Into::into),
                ..ServeArgs::default()
            };
            let Err(e) = args.resolve() else {
                anyhow::bail!("{placement:?} {advertise:?} {node:?} was accepted");
            };
            assert!(e.to_string().contains("--"), "{e}");
        }
        Ok(())
    }

    #[test]
    fn unknown_settings_are_refused() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("troupe.toml");
        std::fs::write(&path, "flush_intervall = \"1s\"\n")?;
        let args = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        };
        assert!(args.resolve().is_err());
        Ok(())
    }
}
