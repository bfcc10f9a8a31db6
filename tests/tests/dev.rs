//! `troupe dev -- COMMAND` with the real binary and `bench_app` as the app:
//! what it prints, that actors answer at the address it prints, restarts of
//! a failing app and on a watched change, a clean stop on SIGINT, and the
//! errors of a command that cannot run. Every wait reads dev's own lines
//! (stderr) up to a bound; nothing sleeps to synchronise.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};

use anyhow::{bail, ensure, Context};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use troupe_tests::{poll_until, run_cli, run_cli_env, troupe_bin, within, WAIT};

const BENCH_APP: &str = env!("CARGO_BIN_EXE_bench_app");

/// A running `troupe dev`, its stderr read line by line.
struct Dev {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    /// Every line read so far, for failure messages.
    seen: Vec<String>,
    /// Holds the read end of dev's stderr.
    reader: tokio::task::JoinHandle<()>,
}

impl Dev {
    fn start(args: &[&str]) -> anyhow::Result<Dev> {
        let mut child = Command::new(troupe_bin())
            .arg("dev")
            .args(args)
            .env_remove("TROUPE_ADDR")
            .stdin(Stdio::null())
            // The app's output; dev's own lines are on stderr.
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("spawning troupe dev")?;
        let stderr = child.stderr.take().context("no stderr pipe")?;
        let (tx, lines) = mpsc::unbounded_channel();
        let reader = tokio::spawn(async move {
            let mut reader = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Dev {
            child,
            lines,
            seen: Vec::new(),
            reader,
        })
    }

    /// Closes the read end of dev's stderr, as `| head` does once it has
    /// its lines.
    async fn stop_reading(&mut self) {
        self.reader.abort();
        // Done once the task (and the pipe it holds) is dropped.
        let _ = (&mut self.reader).await;
    }

    /// Reads lines until one contains `needle`; returns it.
    async fn expect(&mut self, needle: &str) -> anyhow::Result<String> {
        let found = within(WAIT, needle, async {
            while let Some(line) = self.lines.recv().await {
                self.seen.push(line.clone());
                if line.contains(needle) {
                    return Some(line);
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(line)) => Ok(line),
            Ok(None) => bail!(
                "troupe dev ended before printing {needle:?}; it printed:\n{}",
                self.seen.join("\n")
            ),
            Err(e) => Err(e.context(format!("troupe dev printed:\n{}", self.seen.join("\n")))),
        }
    }

    /// The daemon's address, from its "daemon listening on ADDR" line.
    async fn address(&mut self) -> anyhow::Result<SocketAddr> {
        let line = self.expect("daemon listening on ").await?;
        after(&line, "daemon listening on ")?
            .parse()
            .with_context(|| format!("no address in {line:?}"))
    }

    /// The pid of the app it started next, from "started `...` (pid N)".
    async fn app_pid(&mut self) -> anyhow::Result<u32> {
        let line = self.expect("started `").await?;
        let pid = after(&line, "(pid ")?;
        pid.split(')')
            .next()
            .and_then(|p| p.parse().ok())
            .with_context(|| format!("no pid in {line:?}"))
    }

    async fn interrupt(&mut self) -> anyhow::Result<ExitStatus> {
        let pid = self.child.id().context("troupe dev has already exited")?;
        let kill = Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .await?;
        ensure!(kill.success(), "kill -INT {pid} failed");
        self.exit().await
    }

    /// Waits (bounded) for dev to exit, reading the rest of its lines.
    async fn exit(&mut self) -> anyhow::Result<ExitStatus> {
        let status = within(WAIT, "troupe dev to exit", self.child.wait()).await??;
        // The pipe closes when the app, which shares it, is gone too.
        within(WAIT, "the end of dev's output", async {
            while let Some(line) = self.lines.recv().await {
                self.seen.push(line);
            }
        })
        .await?;
        Ok(status)
    }
}

fn after<'a>(line: &'a str, prefix: &str) -> anyhow::Result<&'a str> {
    line.split_once(prefix)
        .map(|(_, rest)| rest.split_whitespace().next().unwrap_or_default())
        .with_context(|| format!("{prefix:?} not in {line:?}"))
}

#[tokio::test]
async fn dev_prints_the_address_and_the_app_answers_there() -> anyhow::Result<()> {
    let mut dev = Dev::start(&["--", BENCH_APP])?;
    let addr = dev.address().await?;
    let hint = dev.expect("troupe status").await?;
    ensure!(
        hint.contains(&format!("TROUPE_ADDR={addr}")),
        "the CLI hint does not name the address: {hint}"
    );
    dev.app_pid().await?;
    let types = dev.expect("registered actor types: ").await?;
    ensure!(types.contains("counter (bench-app)"), "{types}");
    dev.expect("troupe invoke counter").await?;

    let env = [("TROUPE_ADDR", addr.to_string())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    for expected in ["1", "2"] {
        let (status, out, err) = run_cli_env(&["invoke", "counter", "c1", "incr"], &env).await?;
        ensure!(status.success(), "invoke failed: {out}{err}");
        ensure!(
            out.trim() == expected,
            "invoke printed {out:?}, expected {expected}"
        );
    }
    let (status, out, err) = run_cli_env(&["status"], &env).await?;
    ensure!(
        status.success() && out.contains("counter"),
        "status: {out}{err}"
    );

    ensure!(dev.interrupt().await?.success());
    Ok(())
}

#[tokio::test]
async fn an_app_that_fails_is_restarted_after_a_backoff() -> anyhow::Result<()> {
    let mut dev = Dev::start(&["--", BENCH_APP, "--exit-after-register", "3"])?;
    let first = dev.app_pid().await?;
    dev.expect("registered actor types: ").await?;
    let failed = dev.expect("exited with status 3").await?;
    ensure!(failed.contains("restarting in 0.5s"), "{failed}");
    let second = dev.app_pid().await?;
    ensure!(first != second, "the same pid {first} twice");
    dev.expect("registered actor types: ").await?;
    let again = dev.expect("exited with status 3").await?;
    ensure!(
        again.contains("restarting in 1.0s"),
        "the delay should double: {again}"
    );
    ensure!(dev.interrupt().await?.success());
    Ok(())
}

#[tokio::test]
async fn no_restart_stops_with_the_failing_app() -> anyhow::Result<()> {
    let mut dev = Dev::start(&[
        "--no-restart",
        "--",
        BENCH_APP,
        "--exit-after-register",
        "3",
    ])?;
    dev.expect("registered actor types: ").await?;
    dev.expect("not restarted (--no-restart)").await?;
    let status = dev.exit().await?;
    ensure!(status.code() == Some(1), "exit {status}");
    Ok(())
}

#[tokio::test]
async fn an_app_that_exits_0_ends_dev() -> anyhow::Result<()> {
    let mut dev = Dev::start(&["--", "true"])?;
    dev.expect("`true` exited with status 0").await?;
    let status = dev.exit().await?;
    ensure!(status.success(), "exit {status}:\n{}", dev.seen.join("\n"));
    Ok(())
}

#[tokio::test]
async fn a_change_under_watch_restarts_the_app() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let source = dir.path().join("app.py");
    std::fs::write(&source, "v1")?;
    let watched = dir.path().to_string_lossy().into_owned();
    let mut dev = Dev::start(&["--watch", &watched, "--", BENCH_APP])?;
    let first = dev.app_pid().await?;
    dev.expect("registered actor types: ").await?;
    // Files tools write are not changes; the source is.
    std::fs::create_dir(dir.path().join("__pycache__"))?;
    std::fs::write(dir.path().join("__pycache__/app.pyc"), "bytecode")?;
    std::fs::write(&source, "v2")?;
    let changed = dev.expect("changed: restarting").await?;
    ensure!(changed.contains("app.py changed"), "{changed}");
    let second = dev.app_pid().await?;
    ensure!(first != second, "not restarted: pid {first} twice");
    ensure!(!pid_alive(first), "the first app (pid {first}) still runs");
    dev.expect("registered actor types: ").await?;
    ensure!(dev.interrupt().await?.success());
    Ok(())
}

#[tokio::test]
async fn sigint_stops_the_app_then_the_daemon() -> anyhow::Result<()> {
    let mut dev = Dev::start(&["--", BENCH_APP])?;
    let addr = dev.address().await?;
    let state = dev.expect("state in ").await?;
    let state = PathBuf::from(after(&state, "state in ")?);
    ensure!(state.is_dir(), "no state directory {}", state.display());
    let app = dev.app_pid().await?;
    dev.expect("registered actor types: ").await?;

    let status = dev.interrupt().await?;
    ensure!(status.success(), "exit {status}:\n{}", dev.seen.join("\n"));
    ensure!(!pid_alive(app), "the app (pid {app}) outlived troupe dev");
    ensure!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "{addr} still accepts connections"
    );
    ensure!(!state.exists(), "{} was not removed", state.display());
    let said = dev.seen.join("\n");
    ensure!(said.contains("SIGINT: stopping `"), "{said}");
    ensure!(said.contains("SIGINT: stopping the daemon"), "{said}");
    Ok(())
}

/// A reader that went away (`troupe dev -- app 2>&1 | head`) is no reason
/// to stop: dev still restarts the app it supervises, and Ctrl-C still
/// stops both and removes the state.
#[tokio::test]
async fn dev_outlives_the_reader_of_its_lines() -> anyhow::Result<()> {
    let mut dev = Dev::start(&["--", BENCH_APP])?;
    let addr = dev.address().await?;
    let state = dev.expect("state in ").await?;
    let state = PathBuf::from(after(&state, "state in ")?);
    let app = dev.app_pid().await?;
    dev.expect("registered actor types: ").await?;
    dev.stop_reading().await;

    // Its end and the restart are lines dev writes to the closed pipe.
    let kill = Command::new("kill")
        .args(["-KILL", &app.to_string()])
        .status()
        .await?;
    ensure!(kill.success(), "kill -KILL {app} failed");
    poll_until(WAIT, "the killed app to be gone", || async {
        Ok((!pid_alive(app)).then_some(()))
    })
    .await?;
    let env = [("TROUPE_ADDR", addr.to_string())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    poll_until(WAIT, "the restarted app to answer", || async {
        let (status, _, _) = run_cli_env(&["invoke", "counter", "c1", "incr"], &env).await?;
        Ok(status.success().then_some(()))
    })
    .await?;

    let status = dev.interrupt().await?;
    ensure!(status.success(), "exit {status}");
    ensure!(!state.exists(), "{} was not removed", state.display());
    Ok(())
}

#[tokio::test]
async fn processes_the_app_started_are_stopped_with_it() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let pid_file = dir.path().join("worker.pid");
    // A worker in the background, then the app in the shell's place.
    let script = format!(
        "sleep 300 & echo $! > '{}'; exec '{BENCH_APP}'",
        pid_file.display()
    );
    let mut dev = Dev::start(&["--", "sh", "-c", &script])?;
    dev.expect("registered actor types: ").await?;
    let worker: u32 = std::fs::read_to_string(&pid_file)?.trim().parse()?;
    ensure!(pid_alive(worker), "the worker {worker} is not running");
    ensure!(dev.interrupt().await?.success());
    ensure!(
        !pid_alive(worker),
        "the app's worker (pid {worker}) outlived troupe dev"
    );
    Ok(())
}

#[tokio::test]
async fn a_command_that_cannot_run_is_a_clear_error() -> anyhow::Result<()> {
    let (status, _, err) = run_cli(&["dev", "--", "troupe-no-such-command"]).await?;
    ensure!(status.code() == Some(2), "exit {status}: {err}");
    ensure!(
        err.contains("cannot run `troupe-no-such-command`: command not found"),
        "{err}"
    );
    let (status, _, err) = run_cli(&["dev"]).await?;
    ensure!(status.code() == Some(2), "exit {status}: {err}");
    ensure!(err.contains("<COMMAND>"), "{err}");
    Ok(())
}

/// Whether a process with this pid runs. A zombie does not: an orphan's
/// reaper (pid 1 in a container) may take its time.
fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "PID (COMM) STATE ...": the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}
