//! The `troupe` binary as a process: found, started on an ephemeral port
//! with a temp data dir, signalled and killed.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tonic::transport::Channel;

use crate::*;

/// The `troupe` binary: `$TROUPE_BIN`, else `target/<profile>/troupe` next
/// to this test's `deps` directory.
pub fn troupe_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("TROUPE_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    for dir in exe.ancestors() {
        if dir.file_name().is_some_and(|n| n == "deps") {
            if let Some(profile) = dir.parent() {
                let bin = profile.join("troupe");
                if bin.is_file() {
                    return bin;
                }
            }
        }
    }
    panic!(
        "cannot find the troupe binary next to {} (looked for target/<profile>/troupe); \
         run `cargo build -p troupe` first, or set TROUPE_BIN",
        exe.display()
    );
}

/// Spawns `cmd` (a troupe server), its stderr into `log`, and waits for the
/// stdout line `announce` + ADDR that says it serves; keeps draining stdout
/// after it so the server never writes into a closed pipe.
pub async fn spawn_announced(
    mut cmd: Command,
    log: &tempfile::NamedTempFile,
    announce: &str,
) -> anyhow::Result<(Child, SocketAddr)> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log.reopen()?)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("spawning {:?}", cmd.as_std()))?;
    let stdout = child.stdout.take().context("no stdout pipe")?;
    let mut lines = BufReader::new(stdout);
    let mut line = String::new();
    let read = within(
        Duration::from_secs(20),
        "the server's listening line",
        lines.read_line(&mut line),
    )
    .await;
    let addr = match read {
        Ok(Ok(n)) if n > 0 => line
            .trim()
            .strip_prefix(announce)
            .and_then(|a| a.parse::<SocketAddr>().ok()),
        _ => None,
    };
    let Some(addr) = addr else {
        let _ = child.start_kill();
        let text = std::fs::read_to_string(log.path()).unwrap_or_default();
        bail!(
            "{:?} did not announce its address (got {line:?}); its log:\n{text}",
            cmd.as_std()
        );
    };
    tokio::spawn(async move {
        let mut sink = Vec::new();
        let _ = lines.read_to_end(&mut sink).await;
    });
    Ok((child, addr))
}

/// One running `troupe serve` process. Killed when dropped.
#[derive(Debug)]
pub struct Daemon {
    child: Child,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    log: tempfile::NamedTempFile,
    /// How clients dial it when its listener has TLS on.
    pub tls: Option<troupe_tls::Connector>,
}

impl Daemon {
    /// Starts `troupe serve --listen 127.0.0.1:0 --data-dir DIR ARGS...` and
    /// waits for its "troupe listening on ADDR" line.
    pub async fn start(data_dir: &Path, extra_args: &[&str]) -> anyhow::Result<Daemon> {
        Self::start_with_env(data_dir, extra_args, &[]).await
    }

    /// [`Daemon::start`] with environment variables set for the daemon
    /// (e.g. `OTEL_BSP_SCHEDULE_DELAY`).
    pub async fn start_with_env(
        data_dir: &Path,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Daemon> {
        let mut cmd = Command::new(troupe_bin());
        cmd.envs(env.iter().copied());
        Self::launch(cmd, data_dir, extra_args).await
    }

    /// [`Daemon::start`] with the daemon in the cgroup whose `cgroup.procs`
    /// is `procs` from its first instruction: a shell joins it, then execs
    /// the daemon in its place.
    pub async fn start_in_cgroup(
        data_dir: &Path,
        extra_args: &[&str],
        procs: &Path,
    ) -> anyhow::Result<Daemon> {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", r#"echo $$ > "$0" && exec "$@""#])
            .arg(procs)
            .arg(troupe_bin());
        Self::launch(cmd, data_dir, extra_args).await
    }

    /// Runs `cmd serve --listen 127.0.0.1:0 --data-dir DIR ARGS...`, `cmd`
    /// being the daemon or what execs it.
    async fn launch(cmd: Command, data_dir: &Path, extra_args: &[&str]) -> anyhow::Result<Daemon> {
        Self::launch_on(cmd, "127.0.0.1:0", data_dir, extra_args).await
    }

    /// Stops the daemon (SIGTERM) and starts it again on the same address
    /// and data dir with `extra_args`, as a restart in place would: clients
    /// that dial its address reach the new one.
    pub async fn restart(&mut self, extra_args: &[&str]) -> anyhow::Result<()> {
        self.terminate().await?;
        let listen = self.addr.to_string();
        let cmd = Command::new(troupe_bin());
        *self = Self::launch_on(cmd, &listen, &self.data_dir, extra_args).await?;
        Ok(())
    }

    async fn launch_on(
        mut cmd: Command,
        listen: &str,
        data_dir: &Path,
        extra_args: &[&str],
    ) -> anyhow::Result<Daemon> {
        let log = tempfile::Builder::new()
            .prefix("troupe-daemon-")
            .suffix(".log")
            .tempfile()?;
        cmd.arg("serve")
            .args(["--listen", listen, "--data-dir"])
            .arg(data_dir)
            .args(extra_args);
        let (child, addr) = spawn_announced(cmd, &log, "troupe listening on ").await?;
        Ok(Daemon {
            child,
            addr,
            data_dir: data_dir.to_owned(),
            log,
            tls: None,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The daemon's stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    pub fn pid(&self) -> anyhow::Result<u32> {
        self.child.id().context("the daemon has already exited")
    }

    /// SIGTERM, then waits (bounded) for the exit.
    pub async fn terminate(&mut self) -> anyhow::Result<ExitStatus> {
        let pid = self.pid()?;
        let status = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await?;
        if !status.success() {
            bail!("kill -TERM {pid} failed: {status}");
        }
        let waited = within(
            Duration::from_secs(30),
            "the daemon to exit after SIGTERM",
            self.child.wait(),
        )
        .await;
        match waited {
            Ok(status) => Ok(status?),
            Err(e) => {
                let _ = self.child.start_kill();
                Err(e.context(self.log()))
            }
        }
    }

    /// SIGKILL, then waits for the exit.
    pub async fn kill9(&mut self) -> anyhow::Result<()> {
        self.child.start_kill()?;
        within(WAIT, "the daemon to die", self.child.wait()).await??;
        Ok(())
    }

    /// Waits for the daemon to exit by itself (e.g. at a crash point).
    pub async fn exited(&mut self) -> anyhow::Result<ExitStatus> {
        Ok(within(WAIT, "the daemon to exit", self.child.wait()).await??)
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub async fn channel(&self) -> anyhow::Result<Channel> {
        let endpoint = Channel::from_shared(self.url())?;
        Ok(crate::tls::connect(endpoint, self.tls.as_ref()).await?)
    }

    /// A client that, like the SDKs' clients, takes replies of any size the
    /// daemon sends (tonic's own default would stop at 4 MiB).
    pub async fn client(&self) -> anyhow::Result<Client> {
        Ok(Client(
            pb::actor_client_client::ActorClientClient::new(self.channel().await?)
                .max_decoding_message_size(usize::MAX)
                .max_encoding_message_size(usize::MAX),
        ))
    }

    pub async fn admin(&self) -> anyhow::Result<pb::admin_client::AdminClient<Channel>> {
        Ok(pb::admin_client::AdminClient::new(self.channel().await?))
    }

    /// Moves a `--test-clock` daemon's clock on by `by` ("59m", "0s") and
    /// waits until what came due has fired; its time then, in Unix ms.
    pub async fn advance_clock(&self, by: &str) -> anyhow::Result<u64> {
        Ok(self
            .admin()
            .await?
            .advance_clock(pb::AdvanceClockRequest { by: by.into() })
            .await?
            .into_inner()
            .now_unix_ms)
    }

    /// [`Daemon::advance_clock`] by `by_ms` (`0`: what time it is, once
    /// what is due now has fired).
    pub async fn advance_clock_ms(&self, by_ms: u64) -> anyhow::Result<u64> {
        self.advance_clock(&format!("{by_ms}ms")).await
    }

    /// What `troupe status` shows, as the Admin API answers it.
    pub async fn status(&self) -> anyhow::Result<pb::StatusResponse> {
        Ok(self
            .admin()
            .await?
            .status(pb::StatusRequest {})
            .await?
            .into_inner())
    }

    /// Lists every active actor (all pages).
    pub async fn actors(&self) -> anyhow::Result<Vec<pb::ActorInfo>> {
        let mut admin = self.admin().await?;
        let mut all = Vec::new();
        let mut page_token = String::new();
        loop {
            let page = admin
                .list_actors(pb::ListActorsRequest {
                    r#type: String::new(),
                    page_size: 1000,
                    page_token,
                })
                .await?
                .into_inner();
            all.extend(page.actors);
            if page.next_page_token.is_empty() {
                return Ok(all);
            }
            page_token = page.next_page_token;
        }
    }
}
