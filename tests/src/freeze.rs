//! Freezing a daemon at an exact line, as a SIGSTOP, a paused VM or
//! `docker pause` would at an unlucky moment: gdb attaches with a
//! breakpoint there, and when a thread reaches it the whole process stops
//! (gdb's all-stop mode) until the test lets it go.
//!
//! The line is found by its text in the source, so the test follows the
//! code as it moves. Tests need `gdb` and the debug binary (its line
//! tables); without gdb they print why and pass as skipped, unless
//! `TROUPE_REQUIRE_GDB=1` (as `.ci/run` sets), which makes that a failure.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::within;

/// `file:line` of the first line of `file` (relative to the repository)
/// that contains `text`.
pub fn source_line(file: &str, text: &str) -> anyhow::Result<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(file);
    let source =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let index = source
        .lines()
        .position(|l| l.contains(text))
        .with_context(|| format!("no line of {file} contains {text:?}"))?;
    Ok(format!("{file}:{}", index + 1))
}

/// Whether gdb can be run here; prints why `test` is skipped when not, or
/// fails when `TROUPE_REQUIRE_GDB=1`.
pub fn gdb_available(test: &str) -> anyhow::Result<bool> {
    let found = std::process::Command::new("gdb")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        if std::env::var("TROUPE_REQUIRE_GDB").is_ok_and(|v| v == "1") {
            bail!("{test} needs gdb (apt-get install gdb): TROUPE_REQUIRE_GDB=1");
        }
        eprintln!("SKIPPED {test}: needs gdb (apt-get install gdb) to freeze a daemon at a line");
    }
    Ok(found)
}

/// gdb attached to a running process with one breakpoint armed.
#[derive(Debug)]
pub struct Freeze {
    gdb: Child,
    stdin: ChildStdin,
    out: Lines<BufReader<ChildStdout>>,
    /// What gdb said, for messages.
    said: String,
}

impl Freeze {
    /// Attaches to `pid`, arms a breakpoint at `location` (`file:line`) and
    /// lets the process run on; returns once it runs.
    pub async fn arm(pid: u32, location: &str) -> anyhow::Result<Freeze> {
        // gdb reads the binary's symbols before it attaches: attaching
        // first stops the daemon for as long as that takes (seconds for a
        // debug build, past a cluster lease), which fences it before the
        // test begins.
        let mut gdb = Command::new("gdb")
            .args(["-q", "-nx", &format!("/proc/{pid}/exe")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting gdb")?;
        let stdin = gdb.stdin.take().context("gdb's stdin")?;
        let stdout = gdb.stdout.take().context("gdb's stdout")?;
        let mut freeze = Freeze {
            gdb,
            stdin,
            out: BufReader::new(stdout).lines(),
            said: String::new(),
        };
        // The daemon's own signals pass straight through; only the
        // breakpoint stops it.
        freeze
            .send(&format!(
                "set pagination off\nset confirm off\nbreak {location}\nattach {pid}\n\
                 handle all nostop noprint pass\necho ARMED\\n\ncontinue\n"
            ))
            .await?;
        freeze.wait_for("ARMED", Duration::from_secs(60)).await?;
        if freeze.said.contains("No line") || freeze.said.contains("No source file") {
            bail!(
                "gdb could not place a breakpoint at {location}:\n{}",
                freeze.said
            );
        }
        freeze
            .wait_for("Continuing.", Duration::from_secs(30))
            .await?;
        Ok(freeze)
    }

    /// Waits (at most `limit`) until a thread reached the breakpoint: the
    /// process is frozen from then on.
    pub async fn hit(&mut self, limit: Duration) -> anyhow::Result<()> {
        self.wait_for("hit Breakpoint", limit).await
    }

    /// Lets the process go on where it stopped, and gdb end.
    pub async fn release(mut self) -> anyhow::Result<()> {
        self.send("delete\ndetach\nquit\n").await?;
        within(Duration::from_secs(30), "gdb to detach", self.gdb.wait()).await??;
        Ok(())
    }

    async fn send(&mut self, commands: &str) -> anyhow::Result<()> {
        self.stdin.write_all(commands.as_bytes()).await?;
        self.stdin.flush().await?;
        Ok(())
    }

    async fn wait_for(&mut self, text: &str, limit: Duration) -> anyhow::Result<()> {
        let out = &mut self.out;
        let said = &mut self.said;
        let found = tokio::time::timeout(limit, async {
            while let Some(line) = out.next_line().await? {
                said.push_str(&line);
                said.push('\n');
                if line.contains(text) {
                    return anyhow::Ok(true);
                }
            }
            anyhow::Ok(false)
        })
        .await;
        match found {
            Ok(Ok(true)) => Ok(()),
            Ok(Ok(false)) => bail!("gdb ended before {text:?}:\n{}", self.said),
            Ok(Err(e)) => Err(e.context(format!("reading gdb's output:\n{}", self.said))),
            Err(_) => bail!("no {text:?} from gdb within {limit:?}:\n{}", self.said),
        }
    }
}
