//! Harness for the end-to-end tests: runs the real `troupe` binary and talks
//! to it over gRPC, as an app (a Rust counter app, or a raw stream for tests
//! that must misbehave) and as a client.
//!
//! Every wait in here is bounded: nothing can hang a test run.

use std::future::Future;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{anyhow, bail};
use tokio::process::Command;
use tonic::Status;

pub use troupe_proto::v1 as pb;
pub use troupe_proto::v1::deactivate::Reason;

pub mod auth_call;
mod client;
pub mod cluster_fixture;
pub mod cluster_harness;
mod daemon;
pub mod freeze;
pub mod injector;
pub mod log_app;
pub mod log_seed;
pub mod otlp;
pub mod prometheus;
mod raw_app;
pub mod replicas;
pub mod scrape;
pub mod store;
mod test_app;
pub mod tls;

pub use client::*;
pub use daemon::*;
pub use raw_app::*;
pub use store::{PgDatabase, PgServer, TestStore, WriteLog, WriteStream};
pub use test_app::*;

/// The default bound for any single wait in a test.
pub const WAIT: Duration = Duration::from_secs(15);

/// Awaits `fut` for at most `limit`, naming `what` if it takes longer.
pub async fn within<T>(
    limit: Duration,
    what: &str,
    fut: impl Future<Output = T>,
) -> anyhow::Result<T> {
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| anyhow!("timed out after {limit:?} waiting for {what}"))
}

/// Polls `check` until it returns `Some`, at most `limit`. For conditions
/// that only the daemon knows (admin output, state), not for sleeping.
pub async fn poll_until<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("condition not reached within {limit:?}: {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Runs the troupe CLI with `args`, bounded; (exit status, stdout, stderr).
pub async fn run_cli(args: &[&str]) -> anyhow::Result<(ExitStatus, String, String)> {
    run_cli_env(args, &[]).await
}

/// Runs the CLI against `daemon`; fails unless it exits with `code`.
/// Returns its standard output and standard error.
pub async fn cli_against(
    daemon: &Daemon,
    args: &[&str],
    code: i32,
) -> anyhow::Result<(String, String)> {
    let addr = daemon.addr.to_string();
    let mut all = args.to_vec();
    all.extend(["--addr", &addr]);
    let (status, out, err) = run_cli(&all).await?;
    anyhow::ensure!(
        status.code() == Some(code),
        "`troupe {}` exited {:?}, expected {code}\nstdout:\n{out}\nstderr:\n{err}",
        all.join(" "),
        status.code()
    );
    Ok((out, err))
}

/// [`run_cli`] with environment variables set (TROUPE_ADDR is unset unless
/// `env` sets it).
pub async fn run_cli_env(
    args: &[&str],
    env: &[(&str, &str)],
) -> anyhow::Result<(ExitStatus, String, String)> {
    let output = within(
        Duration::from_secs(30),
        "the troupe CLI",
        Command::new(troupe_bin())
            .args(args)
            .env_remove("TROUPE_ADDR")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await??;
    Ok((
        output.status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

/// Whether a status carries `code`, with a readable failure otherwise.
pub fn expect_code<T: std::fmt::Debug>(
    result: Result<T, Status>,
    code: tonic::Code,
) -> anyhow::Result<Status> {
    match result {
        Ok(v) => bail!("expected {code:?}, the call succeeded with {v:?}"),
        Err(status) if status.code() == code => Ok(status),
        Err(status) => bail!(
            "expected {code:?}, got {:?}: {}",
            status.code(),
            status.message()
        ),
    }
}

/// A fresh daemon on a temporary data dir with a [`TestApp`] hosting
/// `types` attached, and a client. Keep the `TempDir` alive for the test.
pub async fn daemon_with_app(
    extra_args: &[&str],
    types: Vec<pb::ActorTypeSpec>,
) -> anyhow::Result<(tempfile::TempDir, Daemon, TestApp, Client)> {
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), extra_args).await?;
    let app = TestApp::attach(daemon.addr, types).await?;
    let client = daemon.client().await?;
    Ok((dir, daemon, app, client))
}

/// A fresh daemon on a temporary data dir with a [`RawApp`] hosting
/// `types` registered, and a client. Keep the `TempDir` alive for the test.
pub async fn daemon_with_raw_app(
    types: Vec<pb::ActorTypeSpec>,
) -> anyhow::Result<(tempfile::TempDir, Daemon, RawApp, Client)> {
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &[]).await?;
    let (app, _) = RawApp::register(daemon.addr, types).await?;
    let client = daemon.client().await?;
    Ok((dir, daemon, app, client))
}
