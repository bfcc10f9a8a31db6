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
use troupe_placement_service::{Replica, ServiceConfig};

use crate::config::{TlsArgs, TlsRole};

/// Default listen address of a placement replica (loopback only).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7470";

#[derive(Debug, Subcommand)]
pub enum PlacementCommand {
    /// Run one placement replica (membership and tables, replicated with Raft).
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// This replica's id (a positive integer, unique among the replicas).
    #[arg(long)]
    id: u64,
    /// Address for the placement gRPC API; port 0 picks a free one.
    #[arg(long, default_value = DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// Directory for the Raft log, vote and snapshots.
    #[arg(long)]
    data_dir: PathBuf,
    /// Every replica as ID=HOST:PORT, comma-separated, this one included,
    /// e.g. 1=127.0.0.1:7471,2=127.0.0.1:7472,3=127.0.0.1:7473. Omitted: a
    /// single-replica service at the listen address.
    #[arg(long, value_parser = parse_peers)]
    peers: Option<Peers>,
    /// A daemon is removed after this long without a heartbeat.
    #[arg(long, value_parser = crate::duration::flag, default_value = "3s")]
    lease: Duration,
    /// How often daemons heartbeat.
    #[arg(long, value_parser = crate::duration::flag, default_value = "500ms")]
    heartbeat: Duration,
    /// Listen beyond loopback without TLS, so without knowing who calls
    /// (anyone who reaches it can join a node): only where nothing but
    /// daemons can reach the address.
    #[arg(long)]
    insecure: bool,
    /// mTLS: only daemons and replicas with a member certificate from
    /// --tls-ca connect, and replicas talk to each other over it.
    #[command(flatten)]
    tls: TlsArgs,
}

/// The `--peers` list.
#[derive(Debug, Clone)]
pub struct Peers(BTreeMap<u64, String>);

fn parse_peers(s: &str) -> Result<Peers, String> {
    let mut peers = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?} is not ID=HOST:PORT (e.g. 1=127.0.0.1:7471)"))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| format!("replica id {id:?} in {part:?} is not a positive integer"))?;
        let addr = addr.trim();
        if addr
            .rsplit_once(':')
            .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
        {
            return Err(format!("address {addr:?} of replica {id} is not HOST:PORT"));
        }
        if peers.insert(id, addr.to_owned()).is_some() {
            return Err(format!("replica id {id} appears twice in --peers"));
        }
    }
    if peers.is_empty() {
        return Err("--peers is empty; give every replica as ID=HOST:PORT".into());
    }
    Ok(Peers(peers))
}

pub async fn run(command: PlacementCommand) -> anyhow::Result<()> {
    match command {
        PlacementCommand::Serve(args) => serve(args).await,
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let tls = args
        .tls
        .resolve(None, TlsRole::Placement)?
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
    let peers = match args.peers {
        Some(Peers(p)) => p,
        None => BTreeMap::from([(args.id, local.to_string())]),
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
        tls,
        ..ServiceConfig::new(args.id, args.data_dir, peers)
    };
    let replica = Replica::start(config)
        .await
        .context("starting the placement replica")?;
    let shutdown = shutdown_signal()?;
    // Tests and scripts wait for this line: the socket is bound and the
    // replica is about to accept.
    println!("troupe placement listening on {local}");
    let _ = std::io::stdout().flush();
    tracing::info!(id = args.id, addr = %local, "troupe placement replica started");
    replica
        .serve(listener, shutdown)
        .await
        .context("serving the placement API")?;
    tracing::info!(id = args.id, "troupe placement replica stopped");
    Ok(())
}

/// Completes on SIGTERM or SIGINT. The handlers are installed before the
/// listening line is printed, so a signal sent right after it is not lost.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()> + Send> {
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
}
