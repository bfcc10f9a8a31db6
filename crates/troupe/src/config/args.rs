//! The flags of `troupe serve` (and their TROUPE_* variables); `mod.rs`
//! resolves them with the config file into a `ServeConfig`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use troupe_transport::link::{ChannelPlan, LinkProtocol, Window};

use super::TlsArgs;
use crate::telemetry::LogFormat;

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
    /// Actors (and whole types) whose events this daemon holds for
    /// watchers at once (`troupe actors watch`, ActorClient.Watch and
    /// WatchType; up to 1 MiB per actor, 8 MiB per type); a watch past it
    /// is refused with RESOURCE_EXHAUSTED [default: 65536].
    #[arg(long, env = "TROUPE_MAX_WATCHED_ACTORS")]
    pub max_watched_actors: Option<usize>,
    /// Under a memory limit (cgroup), refuse new calls and reminder, alarm
    /// and timer settings with RESOURCE_EXHAUSTED while resident memory is
    /// at this percentage of the limit or above, until it is five points
    /// below, and deactivate the actors idle longest to give memory back;
    /// 0: never [default: 80].
    #[arg(long, env = "TROUPE_MEMORY_SHED_PERCENT")]
    pub memory_shed_percent: Option<u8>,
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
    /// Serve /metrics over plain HTTP even when the daemon has a
    /// certificate (--tls-cert), which it otherwise serves HTTPS with: for
    /// a scraper on loopback or behind a mesh that encrypts. Plain HTTP
    /// checks no client certificate, so beyond loopback it needs the API
    /// token (or --insecure) even with --tls-client-certs required.
    #[arg(long, env = "TROUPE_METRICS_PLAIN_HTTP", value_parser = clap::builder::BoolishValueParser::new())]
    pub metrics_plain_http: bool,
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
    /// File of read-only tokens, as --api-token-file; `TROUPE_READ_TOKEN`
    /// adds more. One lets a caller inspect (status, actors, state,
    /// reminders, dead letters, /metrics) and change nothing. Needs an API
    /// token.
    #[arg(long, env = "TROUPE_READ_TOKEN_FILE")]
    pub read_token_file: Option<PathBuf>,
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
