//! The app process `troupe dev` supervises: starting it in a process group
//! of its own with `TROUPE_ADDR` set, stopping that whole group (SIGTERM,
//! then SIGKILL after a grace period), describing how it ended, and the
//! backoff between restarts.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::Context;
use rustix::process::{kill_process_group, Pid, Signal};
use tokio::process::{Child, Command};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::cli::{fail, Exit};

/// The app's command line as the user gave it after `--`.
#[derive(Debug, Clone)]
pub struct AppCommand {
    program: OsString,
    args: Vec<OsString>,
    /// For messages: the words joined, quoted where a shell would need it.
    shown: String,
}

impl AppCommand {
    pub fn new(mut words: Vec<OsString>) -> anyhow::Result<Self> {
        if words.is_empty() {
            return Err(fail(
                Exit::Usage,
                "no app command given; put it after `--`, e.g. `troupe dev -- python app.py`",
            ));
        }
        let shown = words
            .iter()
            .map(|w| crate::shell_word::quoted(&w.to_string_lossy()))
            .collect::<Vec<_>>();
        let program = words.remove(0);
        let command = Self {
            program,
            args: words,
            shown: shown.join(" "),
        };
        command.check_runnable()?;
        Ok(command)
    }

    /// Fails as a start would, before the daemon is started for nothing.
    /// The start itself still reports what changes in between.
    fn check_runnable(&self) -> anyhow::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let program = Path::new(&self.program);
        let candidates: Vec<PathBuf> = if program.components().count() > 1 {
            vec![program.to_owned()]
        } else {
            std::env::var_os("PATH")
                .map(|path| {
                    std::env::split_paths(&path)
                        .map(|dir| dir.join(program))
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut found = None;
        for candidate in candidates {
            match std::fs::metadata(&candidate) {
                Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => {
                    return Ok(())
                }
                Ok(meta) if meta.is_file() => {
                    found.get_or_insert(std::io::ErrorKind::PermissionDenied);
                }
                _ => {}
            }
        }
        let kind = found.unwrap_or(std::io::ErrorKind::NotFound);
        Err(self.spawn_error(&std::io::Error::from(kind)))
    }

    /// The command as a user would type it.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Starts the app with `TROUPE_ADDR=addr`, stdout and stderr inherited.
    pub fn spawn(&self, addr: &str) -> anyhow::Result<App> {
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .env("TROUPE_ADDR", addr)
            // Its own group, so a stop reaches the processes it started
            // too. A background group reading the terminal would be
            // stopped (SIGTTIN) and look hung, hence no stdin.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            // dev itself failing must not leave the app running.
            .kill_on_drop(true);
        let child = command.spawn().map_err(|e| self.spawn_error(&e))?;
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(Pid::from_raw)
            .context("the app started but has no process id")?;
        debug!(pid = pid.as_raw_nonzero().get(), command = %self.shown, "app started");
        Ok(App {
            child,
            group: pid,
            started: Instant::now(),
        })
    }

    fn spawn_error(&self, e: &std::io::Error) -> anyhow::Error {
        let program = self.program.to_string_lossy();
        let what = match e.kind() {
            std::io::ErrorKind::NotFound => format!(
                "cannot run `{program}`: command not found. Check the spelling, install it, or \
                 give its path (e.g. `troupe dev -- ./{program}`)"
            ),
            std::io::ErrorKind::PermissionDenied => format!(
                "cannot run `{program}`: permission denied. Make it executable (`chmod +x \
                 {program}`) or run it through its interpreter (e.g. `troupe dev -- python \
                 {program}`)"
            ),
            _ => format!("cannot run `{}`: {e}", self.shown),
        };
        fail(Exit::Usage, what)
    }
}

/// A running app: the leader of its own process group.
#[derive(Debug)]
pub struct App {
    child: Child,
    group: Pid,
    started: Instant,
}

impl App {
    pub fn pid(&self) -> i32 {
        self.group.as_raw_nonzero().get()
    }

    /// How long it has been running.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// Waits for the app's main process to end, then ends what it left in
    /// its group (a restart must not run beside the old app's workers).
    /// Cancel-safe.
    pub async fn exited(&mut self) -> anyhow::Result<ExitStatus> {
        let status = self.child.wait().await.context("waiting for the app")?;
        self.signal_group(Signal::KILL);
        Ok(status)
    }

    /// Stops the app: SIGTERM to its group, SIGKILL after `grace` or as soon
    /// as `hurry` completes (a second Ctrl-C). Returns how it ended.
    pub async fn stop(
        mut self,
        grace: Duration,
        hurry: impl std::future::Future<Output = ()>,
    ) -> anyhow::Result<ExitStatus> {
        let pid = self.pid();
        self.signal_group(Signal::TERM);
        tokio::select! {
            status = self.exited() => return status,
            () = tokio::time::sleep(grace) => {
                warn!(pid, ?grace, "the app did not stop within the grace period; killing it");
            }
            () = hurry => debug!(pid, "asked again; killing the app"),
        }
        self.signal_group(Signal::KILL);
        self.exited().await
    }

    fn signal_group(&self, signal: Signal) {
        match kill_process_group(self.group, signal) {
            // ESRCH: nobody is left in the group, the usual case.
            Ok(()) | Err(rustix::io::Errno::SRCH) => {}
            Err(e) => {
                warn!(pgid = self.pid(), ?signal, error = %e, "cannot signal the app's process group")
            }
        }
    }
}

/// How an app ended, for a person: "exited with status 3", "was killed by
/// SIGSEGV".
pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by {}", signal_name(signal)),
        (None, None) => format!("ended ({status})"),
    }
}

fn signal_name(signal: i32) -> String {
    let name = match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => return format!("signal {signal}"),
    };
    name.to_owned()
}

/// Delays between restarts of a failing app: 0.5 s doubling to 10 s, back
/// to 0.5 s once a run lasted [`Backoff::RESET_AFTER`] — a crash loop
/// should not spin, a rare crash should restart at once.
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(500);
    const MAX: Duration = Duration::from_secs(10);
    pub const RESET_AFTER: Duration = Duration::from_secs(10);

    pub fn new() -> Self {
        Self { next: Self::FIRST }
    }

    /// The delay before restarting an app that failed after running `ran`.
    pub fn after_failure(&mut self, ran: Duration) -> Duration {
        if ran >= Self::RESET_AFTER {
            self.reset();
        }
        let delay = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        delay
    }

    pub fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap_and_resets_after_a_long_run() {
        let mut b = Backoff::new();
        let short = Duration::from_millis(100);
        let delays: Vec<_> = (0..7).map(|_| b.after_failure(short).as_millis()).collect();
        assert_eq!(delays, [500, 1000, 2000, 4000, 8000, 10_000, 10_000]);
        assert_eq!(b.after_failure(Backoff::RESET_AFTER).as_millis(), 500);
        assert_eq!(b.after_failure(short).as_millis(), 1000);
    }

    #[test]
    fn commands_are_shown_as_typed() {
        let words = ["python", "app.py", "--name", "a b", "it's"].map(OsString::from);
        let command = AppCommand::new(words.to_vec()).map(|c| c.shown().to_owned());
        assert_eq!(
            command.ok().as_deref(),
            Some(r"python app.py --name 'a b' 'it'\''s'")
        );
    }

    #[test]
    fn endings_are_named() {
        assert_eq!(
            describe(ExitStatus::from_raw(3 << 8)),
            "exited with status 3"
        );
        assert_eq!(describe(ExitStatus::from_raw(11)), "was killed by SIGSEGV");
    }
}
