//! `troupe injector`: the Kubernetes mutating admission webhook that adds
//! the daemon as a native sidecar to pods annotated
//! `troupe.dev/enabled: "true"` (the contract with the Helm chart is
//! docs/cli.md, `troupe injector`).
//!
//! This module owns the command: its arguments and process lifecycle
//! (here), the config file (`config`), the annotations (`annotations`, their
//! values' grammar in `values`),
//! the mutation (`mutate`, `pod`: pure, no I/O), the review envelope
//! (`review`) and the HTTPS server (`server`).

mod annotations;
mod config;
mod mutate;
mod pod;
mod review;
mod server;
#[cfg(test)]
mod tests;
mod values;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

use crate::telemetry::LogFormat;

/// Loopback unless told otherwise, as every troupe listener.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8443";

/// Flags of `troupe injector`; each also from its TROUPE_ variable.
#[derive(Debug, Clone, clap::Args)]
pub struct InjectorArgs {
    /// Address for the webhook's HTTPS server; port 0 picks a free one.
    #[arg(long, env = "TROUPE_INJECTOR_LISTEN", default_value = DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// The webhook's certificate chain (PEM), the one the webhook
    /// configuration's caBundle verifies. Re-read when it changes.
    #[arg(long = "tls-cert", env = "TROUPE_TLS_CERT", value_name = "FILE")]
    tls_cert: PathBuf,
    /// The certificate's private key (PEM).
    #[arg(long = "tls-key", env = "TROUPE_TLS_KEY", value_name = "FILE")]
    tls_key: PathBuf,
    /// The sidecar configuration (JSON: sidecar, volumes, appEnv,
    /// appVolumeMounts, terminationGracePeriodSeconds, podLabels). Re-read when it
    /// changes; a broken change keeps the last good one.
    #[arg(long, env = "TROUPE_INJECTOR_CONFIG", value_name = "FILE")]
    config: PathBuf,
    /// Log lines on stderr: `text` or `json` [default: text].
    #[arg(long, value_enum, env = "TROUPE_LOG_FORMAT")]
    log_format: Option<LogFormat>,
}

impl InjectorArgs {
    pub fn log_format(&self) -> LogFormat {
        self.log_format.unwrap_or_default()
    }
}

/// Runs the webhook until SIGTERM or SIGINT.
pub async fn run(args: InjectorArgs) -> anyhow::Result<()> {
    let config = Arc::new(config::ConfigSource::load(args.config.clone())?);
    let tls = troupe_tls::ServerTls::load(
        args.tls_cert.clone(),
        args.tls_key.clone(),
        crate::https::alpn(),
    )
    .context("setting up the injector's TLS (--tls-cert, --tls-key)")?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} (is another process using it? pick another with --listen)",
                args.listen
            )
        })?;
    let local = listener
        .local_addr()
        .context("reading the injector's listen address")?;
    let stop = crate::placement_cmd::shutdown_signal()?;
    // Tests and scripts wait for this line, as for `troupe serve`'s.
    println!("troupe injector listening on {local}");
    let _ = std::io::stdout().flush();
    tracing::info!(addr = %local, config = %args.config.display(), "troupe injector listening");
    server::serve(listener, &tls, config, stop)
        .await
        .context("serving the injector")?;
    tracing::info!("troupe injector stopped");
    Ok(())
}

#[cfg(test)]
mod args_tests {
    /// The chart configures the injector through its environment: every
    /// flag reads TROUPE_INJECTOR_ and its name, but for the TLS files and
    /// the log format, which read the variables `troupe serve` reads.
    #[test]
    fn every_flag_has_its_environment_variable() {
        use clap::CommandFactory;
        #[derive(Debug, clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: super::InjectorArgs,
        }
        let mut seen = Vec::new();
        for arg in Cli::command().get_arguments() {
            let long = arg.get_long().unwrap_or_default();
            let env = arg.get_env().and_then(|e| e.to_str()).unwrap_or_default();
            seen.push(format!("--{long}={env}"));
        }
        seen.sort();
        assert_eq!(
            seen,
            [
                "--config=TROUPE_INJECTOR_CONFIG",
                "--listen=TROUPE_INJECTOR_LISTEN",
                "--log-format=TROUPE_LOG_FORMAT",
                "--tls-cert=TROUPE_TLS_CERT",
                "--tls-key=TROUPE_TLS_KEY",
            ]
        );
    }
}
