//! `troupe dev -- COMMAND`: a daemon and an app together, for development.
//! This module owns the command line and the order of things: the state
//! directory, the in-process daemon (the `serve` code path, on a free
//! loopback port), handing the app to the supervisor, and the graceful stop
//! of the daemon afterwards. The app's process is `child`, the restart rule
//! `supervise`, file watching `watch`, the messages `say`.

mod child;
mod say;
mod supervise;
mod watch;

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use anyhow::Context;
use tokio::sync::oneshot;
use tracing::info;

use crate::config::{ServeArgs, ServeConfig};
use crate::serve_end::ShutdownSignals;
use crate::server;
use child::AppCommand;
use say::Say;
use supervise::{Ending, Supervisor};
use watch::Watch;

/// Flags of `troupe dev`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Examples:\n  troupe dev -- python app.py\n  troupe dev --watch . \
                        -- node app.js\n\nThe app is restarted when it fails (exits non-zero or \
                        is killed), with a growing delay; when it exits 0, dev stops (with \
                        --watch: waits for a change). Ctrl-C stops the app, then the daemon."
)]
pub struct DevArgs {
    /// Keep the daemon's state in DIR, kept at exit [default: a fresh
    /// temporary directory, removed at exit].
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Keep the daemon's state in memory only.
    #[arg(long, conflicts_with = "data_dir")]
    pub memory: bool,
    /// Listen on 127.0.0.1:PORT [default: a free port].
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,
    /// Restart the app when files under PATH change (repeatable).
    #[arg(long, value_name = "PATH")]
    pub watch: Vec<PathBuf>,
    /// Do not restart the app when it fails; stop with it (exit 1).
    #[arg(long)]
    pub no_restart: bool,
    /// Daemon settings (limits, timeouts) from a TOML file, as for `troupe
    /// serve --config`; its listen address and store are dev's own.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The app to run, after `--`: a command and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Runs the daemon and the app until the app is done or a signal arrives.
pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    let command = AppCommand::new(args.command.clone())?;
    // First: a Ctrl-C from here on must reach the stop sequence.
    let mut signals = ShutdownSignals::install()?;
    if let Some(port) = args.port {
        // The daemon's own message names `serve`'s flag; say dev's.
        drop(
            std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port)).with_context(|| {
                format!(
                    "cannot listen on 127.0.0.1:{port} (--port): something else uses it; pick \
                 another port, or leave --port out for a free one"
                )
            })?,
        );
    }
    let state = State::create(&args)?;
    let config = args.serve_config(&state)?;
    let watch = if args.watch.is_empty() {
        None
    } else {
        Some(Watch::start(&args.watch, state.dir())?)
    };
    let mut say = Say::new();

    let (listening_tx, listening_rx) = oneshot::channel();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let daemon = tokio::spawn(server::run_until(
        config,
        async {
            let _ = stop_rx.await;
        },
        move |listening| {
            let _ = listening_tx.send(listening);
        },
    ));
    let Ok(listening) = listening_rx.await else {
        // It ended before listening: its error says why.
        joined(daemon.await).context("starting the daemon")?;
        anyhow::bail!("the daemon stopped before it listened");
    };
    let addr = listening.address.to_string();
    info!(address = %addr, state = %state, "dev daemon listening");
    say.line(format_args!("daemon listening on {addr}"));
    say.line(format_args!("state {state}"));
    say.line(format_args!(
        "inspect it from another shell: TROUPE_ADDR={addr} troupe status"
    ));

    let ending = Supervisor::new(&command, addr, listening.runtime, &mut signals, &mut say)
        .restarts(!args.no_restart)
        .watching(watch)
        .run()
        .await;
    if let Ok(Ending::Signal(name)) = &ending {
        say.line(format_args!("{name}: stopping the daemon"));
    } else {
        say.line("stopping the daemon");
    }
    let _ = stop_tx.send(());
    let stopped = joined(daemon.await);
    state.finish(&mut say);
    match (ending, stopped) {
        (Err(e), _) | (Ok(_), Err(e)) => Err(e),
        (Ok(_), Ok(())) => {
            say.line("stopped");
            Ok(())
        }
    }
}

/// The daemon task's result, a panic included.
fn joined(result: Result<anyhow::Result<()>, tokio::task::JoinError>) -> anyhow::Result<()> {
    result.context("the daemon task failed")?
}

impl DevArgs {
    /// `serve`'s settings with dev's listener and store.
    fn serve_config(&self, state: &State) -> anyhow::Result<ServeConfig> {
        let serve = ServeArgs {
            config: self.config.clone(),
            listen: Some(SocketAddr::from((
                Ipv4Addr::LOCALHOST,
                self.port.unwrap_or(0),
            ))),
            data_dir: state.dir().map(Path::to_owned),
            store: Some(
                if state.dir().is_some() {
                    "sled"
                } else {
                    "memory"
                }
                .to_owned(),
            ),
            ..ServeArgs::default()
        };
        let config = serve.resolve()?;
        if config.cluster.is_some() {
            anyhow::bail!(
                "--config sets placement, but `troupe dev` runs one daemon on its own; remove \
                 `placement` from the file (or run `troupe serve` for a cluster)"
            );
        }
        if config.tls.is_some() {
            anyhow::bail!(
                "--config turns TLS on, but `troupe dev` serves plaintext on loopback (the app \
                 gets a plain TROUPE_ADDR); remove the TLS settings from the file"
            );
        }
        Ok(config)
    }
}

/// Where the daemon keeps its state while dev runs.
#[derive(Debug)]
enum State {
    /// A fresh directory, removed at exit.
    Temporary(tempfile::TempDir),
    /// `--data-dir`: the user's, kept.
    Kept(PathBuf),
    /// `--memory`.
    Memory,
}

impl State {
    fn create(args: &DevArgs) -> anyhow::Result<Self> {
        if args.memory {
            return Ok(Self::Memory);
        }
        if let Some(dir) = &args.data_dir {
            return Ok(Self::Kept(dir.clone()));
        }
        let dir = tempfile::Builder::new()
            .prefix("troupe-dev-")
            .tempdir()
            .context(
                "cannot create a temporary directory for the daemon's state; set TMPDIR to a \
                 writable directory or give --data-dir",
            )?;
        Ok(Self::Temporary(dir))
    }

    fn dir(&self) -> Option<&Path> {
        match self {
            Self::Temporary(dir) => Some(dir.path()),
            Self::Kept(dir) => Some(dir),
            Self::Memory => None,
        }
    }

    /// Removes a temporary directory, saying so.
    fn finish(self, say: &mut Say) {
        if let Self::Temporary(dir) = self {
            let path = dir.path().display().to_string();
            if let Err(e) = dir.close() {
                say.line(format_args!(
                    "could not remove {path}: {e}; remove it by hand"
                ));
            }
        }
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Temporary(dir) => write!(f, "in {} (removed at exit)", dir.path().display()),
            Self::Kept(dir) => write!(f, "in {} (kept)", dir.display()),
            Self::Memory => write!(f, "in memory (lost at exit)"),
        }
    }
}
