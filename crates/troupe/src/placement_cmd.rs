//! `troupe placement serve`: one replica of the placement service.
//!
//! This module owns the command's arguments and its process lifecycle
//! (bind, announce, serve, stop on SIGTERM/SIGINT); the replica itself is
//! `troupe_placement_service`.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use troupe_placement_service::peers::read_file;
use troupe_placement_service::{Replica, ServiceConfig};

use crate::config::{TlsArgs, TlsRole};
use crate::health_listen;
use crate::placement_metrics::{self, MetricsSettings};
use crate::telemetry::LogFormat;

/// Default listen address of a placement replica (loopback only).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7470";

#[derive(Debug, Subcommand)]
pub enum PlacementCommand {
    /// Run one placement replica (membership and tables, replicated with Raft).
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("replica_id").required(true).args(["id", "id_from_hostname"]))]
pub struct ServeArgs {
    /// This replica's id (a positive integer, unique among the replicas).
    #[arg(long, env = "TROUPE_PLACEMENT_ID")]
    id: Option<u64>,
    /// Take the id from the hostname's ordinal plus one
    /// (`troupe-placement-0` is replica 1), as a StatefulSet names its pods.
    #[arg(
        long,
        env = "TROUPE_PLACEMENT_ID_FROM_HOSTNAME",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    id_from_hostname: bool,
    /// Address for the placement gRPC API; port 0 picks a free one.
    #[arg(long, env = "TROUPE_PLACEMENT_LISTEN", default_value = DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// Directory for the Raft log, vote and snapshots.
    #[arg(long, env = "TROUPE_PLACEMENT_DATA_DIR")]
    data_dir: PathBuf,
    /// Every replica as ID=HOST:PORT, comma-separated, this one included,
    /// e.g. 1=127.0.0.1:7471,2=127.0.0.1:7472,3=127.0.0.1:7473. Host names
    /// may resolve only later (replicas are dialled when needed, and again
    /// after a failure). Omitted (and no --peers-file): a single-replica
    /// service at the listen address.
    #[arg(long, env = "TROUPE_PLACEMENT_PEERS", value_parser = parse_peers, conflicts_with = "peers_file")]
    peers: Option<Peers>,
    /// A file with the --peers list (entries separated by commas or
    /// newlines, # comments), re-read every second: the Raft leader follows
    /// its current contents without a restart (a Kubernetes ConfigMap). A
    /// replica the file no longer lists keeps serving until it is stopped;
    /// an unreadable or broken file keeps the last good list.
    #[arg(long, env = "TROUPE_PLACEMENT_PEERS_FILE")]
    peers_file: Option<PathBuf>,
    /// A daemon is removed after this long without a heartbeat.
    #[arg(long, env = "TROUPE_PLACEMENT_LEASE", value_parser = crate::duration::flag, default_value = "3s")]
    lease: Duration,
    /// How often daemons heartbeat.
    #[arg(long, env = "TROUPE_PLACEMENT_HEARTBEAT", value_parser = crate::duration::flag, default_value = "500ms")]
    heartbeat: Duration,
    /// Listen beyond loopback without TLS, so without knowing who calls
    /// (anyone who reaches it can join a node): only where nothing but
    /// daemons can reach the address.
    #[arg(long, env = "TROUPE_INSECURE", value_parser = clap::builder::BoolishValueParser::new())]
    insecure: bool,
    /// Serve gRPC health checks (grpc.health.v1 only) in plaintext on this
    /// address too, for Kubernetes `grpc:` probes when TLS is on; allowed
    /// beyond loopback [default: off].
    #[arg(long, env = "TROUPE_HEALTH_LISTEN")]
    health_listen: Option<SocketAddr>,
    /// Serve Prometheus metrics at /metrics on this address: Raft role and
    /// progress, the placement table, the daemons' heartbeats; over HTTPS
    /// with --tls-cert. Beyond loopback it needs --read-token-file or TLS
    /// (then scrapers present a certificate from --tls-ca) [default: off].
    #[arg(long, env = "TROUPE_PLACEMENT_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Read-only tokens, one per line, that scrapes of --metrics-listen
    /// must send (re-read when the file changes; TROUPE_READ_TOKEN gives
    /// them inline).
    #[arg(long, env = "TROUPE_PLACEMENT_READ_TOKEN_FILE")]
    read_token_file: Option<PathBuf>,
    /// Log lines on stderr: `text` or `json` [default: text].
    #[arg(long, value_enum, env = "TROUPE_LOG_FORMAT")]
    log_format: Option<LogFormat>,
    /// mTLS: only daemons and replicas with a member certificate from
    /// --tls-ca connect, and replicas talk to each other over it.
    #[command(flatten)]
    tls: TlsArgs,
}

impl PlacementCommand {
    /// The log format asked for, to set up logging before the command runs.
    pub fn log_format(&self) -> LogFormat {
        match self {
            PlacementCommand::Serve(args) => args.log_format.unwrap_or_default(),
        }
    }
}

/// The `--peers` list.
#[derive(Debug, Clone)]
pub struct Peers(BTreeMap<u64, String>);

fn parse_peers(s: &str) -> Result<Peers, String> {
    troupe_placement_service::peers::parse(s)
        .map(Peers)
        .map_err(|e| e.to_string())
}

pub async fn run(command: PlacementCommand) -> anyhow::Result<()> {
    match command {
        PlacementCommand::Serve(args) => serve(args).await,
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let id = match (args.id, args.id_from_hostname) {
        (Some(id), _) => id,
        (None, true) => id_from_hostname(&hostname()?)?,
        // TROUPE_PLACEMENT_ID_FROM_HOSTNAME=false satisfies clap's group.
        (None, false) => bail!(
            "no replica id: give --id N (TROUPE_PLACEMENT_ID) or --id-from-hostname in a \
             StatefulSet"
        ),
    };
    if args.read_token_file.is_some() && args.metrics_listen.is_none() {
        bail!(
            "--read-token-file is what scrapes of --metrics-listen must send, and no \
             --metrics-listen is given: add one, or drop --read-token-file"
        );
    }
    let tls_settings = args.tls.resolve(None, TlsRole::Placement)?;
    let tls_files = tls_settings.as_ref().map(|t| t.files.clone());
    let tls = tls_settings
        .map(troupe_tls::Tls::load)
        .transpose()
        .context("setting up TLS")?;
    if !args.listen.ip().is_loopback() && !args.insecure && tls.is_none() {
        anyhow::bail!(
            "--listen {} is reachable from other machines, and without TLS placement cannot tell \
             who calls: anyone who reaches it could join a node and take actors. Give \
             --tls-cert, --tls-key and --tls-ca (only cluster members then connect), listen on a \
             loopback address, or pass --insecure if only the daemons can reach {} (a private \
             network or namespace)",
            args.listen,
            args.listen
        );
    }
    let metrics = args
        .metrics_listen
        .map(|listen| {
            placement_metrics::check(MetricsSettings {
                listen,
                read_token_file: args.read_token_file.clone(),
                tls_files,
                insecure: args.insecure,
            })
        })
        .transpose()?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {}: is another process using it? choose another --listen",
                args.listen
            )
        })?;
    let local = listener
        .local_addr()
        .context("reading the placement listen address")?;
    let (peers, peers_file) = match (args.peers, args.peers_file) {
        (Some(Peers(p)), _) => (p, None),
        (None, Some(path)) => {
            // No last good list yet: a file that does not read now is an
            // error, where a later one only keeps the list.
            let p = read_file(&path).with_context(|| {
                format!(
                    "--peers-file {}: give a readable file listing every replica as \
                     ID=HOST:PORT (comma- or newline-separated)",
                    path.display()
                )
            })?;
            (p, Some(path))
        }
        (None, None) => (BTreeMap::from([(id, local.to_string())]), None),
    };
    if args.listen.port() == 0 && peers.len() > 1 {
        bail!(
            "--listen with port 0 cannot be used with several --peers: the other replicas need \
             this replica's port in advance; give a fixed port"
        );
    }
    let config = ServiceConfig {
        lease: args.lease,
        heartbeat: args.heartbeat,
        tls: tls.clone(),
        peers_file,
        ..ServiceConfig::new(id, args.data_dir, peers)
    };
    let replica = Replica::start(config)
        .await
        .context("starting the placement replica")?;
    let health = match args.health_listen {
        Some(addr) => Some(health_listen::start(addr, replica.health()).await?),
        None => None,
    };
    let metrics = match metrics {
        Some(checked) => Some(placement_metrics::start(checked, replica.metrics(), tls).await?),
        None => None,
    };
    let shutdown = shutdown_signal()?;
    // Tests and scripts wait for this line: the socket is bound and the
    // replica is about to accept.
    println!("troupe placement listening on {local}");
    let _ = std::io::stdout().flush();
    tracing::info!(id, addr = %local, "troupe placement replica started");
    let served = replica
        .serve(listener, shutdown)
        .await
        .context("serving the placement API");
    if let Some(health) = health {
        health.stop().await;
    }
    if let Some(metrics) = metrics {
        metrics.stop().await;
    }
    served?;
    tracing::info!(id, "troupe placement replica stopped");
    Ok(())
}

/// This machine's (in Kubernetes: this pod's) host name.
fn hostname() -> anyhow::Result<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty());
    name.context(
        "--id-from-hostname: cannot read the host name (neither /proc/sys/kernel/hostname nor \
         HOSTNAME); give --id instead",
    )
}

/// The replica id a StatefulSet's pod name implies: its ordinal plus one
/// (`troupe-placement-0` → 1), since replica ids are positive.
fn id_from_hostname(hostname: &str) -> anyhow::Result<u64> {
    // A fully qualified name: the pod's name is the first label.
    let name = hostname.split('.').next().unwrap_or(hostname);
    let ordinal = name
        .rsplit_once('-')
        .map(|(_, n)| n)
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    let Some(ordinal) = ordinal else {
        bail!(
            "--id-from-hostname: the host name {hostname:?} does not end in -ORDINAL as a \
             StatefulSet's pods do (e.g. troupe-placement-0); run the replica in a StatefulSet \
             or give --id instead"
        );
    };
    ordinal
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_add(1))
        .with_context(|| {
            format!("--id-from-hostname: the ordinal {ordinal} in {hostname:?} is too large; give --id instead")
        })
}

/// Completes on SIGTERM or SIGINT. The handlers are installed before the
/// listening line is printed, so a signal sent right after it is not lost.
pub(crate) fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()> + Send> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate =
        signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_parse() {
        let p = parse_peers("1=127.0.0.1:1, 2=localhost:2").map_err(anyhow::Error::msg);
        let Ok(Peers(p)) = p else {
            panic!("peers did not parse: {p:?}");
        };
        assert_eq!(p.get(&2).map(String::as_str), Some("localhost:2"));
        assert!(parse_peers("1=127.0.0.1").is_err());
        assert!(parse_peers("x=127.0.0.1:1").is_err());
        assert!(parse_peers("1=a:1,1=b:2").is_err());
        assert!(parse_peers("").is_err());
    }

    #[test]
    fn peers_and_peers_file_are_exclusive() {
        use clap::Parser;
        #[derive(Debug, clap::Parser)]
        struct Cli {
            #[command(subcommand)]
            command: PlacementCommand,
        }
        let base = ["t", "serve", "--id", "1", "--data-dir", "/tmp/x"];
        let both = [&base[..], &["--peers", "1=a:1", "--peers-file", "/p"]].concat();
        assert!(Cli::try_parse_from(both).is_err());
        let file = [&base[..], &["--peers-file", "/p"]].concat();
        let parsed = Cli::try_parse_from(file).map_err(|e| e.to_string());
        let Ok(Cli {
            command: PlacementCommand::Serve(args),
        }) = parsed
        else {
            panic!("--peers-file alone did not parse: {parsed:?}");
        };
        assert_eq!(args.peers_file, Some(PathBuf::from("/p")));
    }

    #[test]
    fn the_id_is_the_statefulset_ordinal_plus_one() -> anyhow::Result<()> {
        assert_eq!(id_from_hostname("troupe-placement-0")?, 1);
        assert_eq!(id_from_hostname("troupe-placement-12")?, 13);
        assert_eq!(
            id_from_hostname("p-2.troupe-placement.ns.svc.cluster.local")?,
            3
        );
        for bad in [
            "troupe-placement",
            "laptop",
            "placement-",
            "placement-x1",
            "-",
        ] {
            let message = match id_from_hostname(bad) {
                Ok(id) => panic!("{bad:?} gave id {id}"),
                Err(e) => e.to_string(),
            };
            assert!(
                message.contains(bad) && message.contains("--id") && !message.contains("  "),
                "{message}"
            );
        }
        assert!(id_from_hostname("p-18446744073709551615").is_err());
        Ok(())
    }

    #[test]
    fn every_flag_has_its_environment_variable() {
        use clap::CommandFactory;
        #[derive(Debug, clap::Parser)]
        struct Cli {
            #[command(subcommand)]
            command: PlacementCommand,
        }
        let cli = Cli::command();
        let serve = cli.find_subcommand("serve");
        assert!(serve.is_some(), "no serve subcommand");
        let flags = serve.into_iter().flat_map(|s| s.get_arguments());
        for arg in flags.filter(|a| a.get_id() != "help") {
            let long = arg.get_long().unwrap_or_default();
            let env = arg.get_env().and_then(|e| e.to_str()).unwrap_or_default();
            let suffix = long.to_uppercase().replace('-', "_");
            assert!(
                env.starts_with("TROUPE_") && env.ends_with(&suffix),
                "placement serve --{long} reads {env:?}"
            );
        }
    }
}
