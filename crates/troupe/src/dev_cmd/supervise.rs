//! The restart rule of `troupe dev`: runs the app, reports its
//! registrations, and decides what each ending means.
//!
//! - The app fails (non-zero status, or killed by a signal dev did not
//!   send): it starts again after a backoff (0.5 s doubling to 10 s, reset
//!   after a 10 s run); with `--no-restart` dev stops and exits 1.
//! - The app exits 0: its work is done and dev stops (exit 0); with
//!   `--watch` dev instead waits for a change to start it again.
//! - A file under `--watch` changes: the app is stopped and started at once.
//! - SIGINT or SIGTERM: the app is stopped and dev stops (exit 0).

use std::future::pending;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::sync::watch as tokio_watch;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::info;
use troupe_runtime::Runtime;

use super::child::{describe, App, AppCommand, Backoff};
use super::say::Say;
use super::watch::Watch;
use crate::serve_end::ShutdownSignals;

/// How long a stopped app may take to exit before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Why supervision ended without an error.
#[derive(Debug)]
pub enum Ending {
    /// The app exited 0 (and nothing is watched).
    AppFinished,
    /// A signal, by name.
    Signal(&'static str),
}

/// How one run of the app ended.
#[derive(Debug)]
enum RunEnd {
    Exited(ExitStatus),
    Signal(&'static str),
    Changed(PathBuf),
}

/// What ended a pause between runs.
#[derive(Debug)]
enum PauseEnd {
    Elapsed,
    Signal(&'static str),
    Changed(PathBuf),
}

#[derive(Debug)]
pub struct Supervisor<'a> {
    command: &'a AppCommand,
    addr: String,
    runtime: Runtime,
    /// Kept across runs so that no registration goes unreported.
    registrations: tokio_watch::Receiver<u64>,
    restart: bool,
    watch: Option<Watch>,
    signals: &'a mut ShutdownSignals,
    say: &'a mut Say,
    /// The call hint is printed once, with the first registration.
    hinted: bool,
}

impl<'a> Supervisor<'a> {
    pub fn new(
        command: &'a AppCommand,
        addr: String,
        runtime: Runtime,
        signals: &'a mut ShutdownSignals,
        say: &'a mut Say,
    ) -> Self {
        Self {
            command,
            addr,
            registrations: runtime.registrations(),
            runtime,
            restart: true,
            watch: None,
            signals,
            say,
            hinted: false,
        }
    }

    pub fn restarts(mut self, on: bool) -> Self {
        self.restart = on;
        self
    }

    pub fn watching(mut self, watch: Option<Watch>) -> Self {
        self.watch = watch;
        self
    }

    pub async fn run(mut self) -> anyhow::Result<Ending> {
        let shown = self.command.shown().to_owned();
        let mut backoff = Backoff::new();
        loop {
            let mut app = self.command.spawn(&self.addr)?;
            info!(pid = app.pid(), command = %shown, "app started");
            self.say.line(format_args!(
                "started `{shown}` (pid {}) with TROUPE_ADDR={}",
                app.pid(),
                self.addr
            ));
            let pause = match self.run_app(&mut app).await? {
                RunEnd::Signal(name) => {
                    self.say.line(format_args!("{name}: stopping `{shown}`"));
                    let status = self.stop(app).await?;
                    self.say
                        .line(format_args!("`{shown}` {}", describe(status)));
                    return Ok(Ending::Signal(name));
                }
                RunEnd::Changed(path) => {
                    self.say.line(format_args!(
                        "{} changed: restarting `{shown}`",
                        path.display()
                    ));
                    self.stop(app).await?;
                    backoff.reset();
                    continue;
                }
                RunEnd::Exited(status) if status.success() => {
                    info!(pid = app.pid(), "app exited 0");
                    if self.watch.is_none() {
                        self.say
                            .line(format_args!("`{shown}` exited with status 0"));
                        return Ok(Ending::AppFinished);
                    }
                    self.say.line(format_args!(
                        "`{shown}` exited with status 0; it starts again when a watched file \
                         changes (Ctrl-C stops)"
                    ));
                    self.pause(None).await
                }
                RunEnd::Exited(status) => {
                    let ran = app.uptime();
                    info!(pid = app.pid(), ?status, ?ran, "app failed");
                    if !self.restart {
                        anyhow::bail!(
                            "`{shown}` {} after {}; not restarted (--no-restart)",
                            describe(status),
                            seconds(ran)
                        );
                    }
                    let delay = backoff.after_failure(ran);
                    self.say.line(format_args!(
                        "`{shown}` {} after {}; restarting in {} (Ctrl-C stops)",
                        describe(status),
                        seconds(ran),
                        seconds(delay)
                    ));
                    self.pause(Some(delay)).await
                }
            };
            match pause {
                PauseEnd::Elapsed => {}
                PauseEnd::Signal(name) => return Ok(Ending::Signal(name)),
                PauseEnd::Changed(path) => {
                    self.say.line(format_args!(
                        "{} changed: starting `{shown}`",
                        path.display()
                    ));
                    backoff.reset();
                }
            }
        }
    }

    /// One run: reports registrations and progress until the app exits, a
    /// signal arrives or a watched file changes.
    async fn run_app(&mut self, app: &mut App) -> anyhow::Result<RunEnd> {
        let started = Instant::now();
        let mut waiting = true;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                status = app.exited() => {
                    // It may have registered just before it exited.
                    if self.registrations.has_changed().unwrap_or(false) {
                        self.registrations.borrow_and_update();
                        self.registered();
                    }
                    self.say.done_waiting();
                    return Ok(RunEnd::Exited(status?));
                }
                name = self.signals.next() => {
                    self.say.done_waiting();
                    return Ok(RunEnd::Signal(name));
                }
                path = next_change(&mut self.watch) => {
                    self.say.done_waiting();
                    return Ok(RunEnd::Changed(path));
                }
                () = next_registration(&mut self.registrations) => {
                    waiting = false;
                    self.registered();
                }
                _ = tick.tick(), if waiting => {
                    self.say.waiting(self.command.shown(), started.elapsed());
                }
            }
        }
    }

    /// Waits `delay` (forever if `None`) unless a signal or a change comes
    /// first.
    async fn pause(&mut self, delay: Option<Duration>) -> PauseEnd {
        let elapsed = async {
            match delay {
                Some(delay) => tokio::time::sleep(delay).await,
                None => pending().await,
            }
        };
        tokio::select! {
            () = elapsed => PauseEnd::Elapsed,
            name = self.signals.next() => PauseEnd::Signal(name),
            path = next_change(&mut self.watch) => PauseEnd::Changed(path),
        }
    }

    /// Stops the app; a second signal meanwhile kills it at once.
    async fn stop(&mut self, app: App) -> anyhow::Result<ExitStatus> {
        let signals = &mut *self.signals;
        app.stop(STOP_GRACE, async move {
            signals.next().await;
        })
        .await
    }

    /// Says which types are hosted now, and the first time how to call one.
    fn registered(&mut self) {
        let hosted: Vec<_> = self
            .runtime
            .status()
            .types
            .into_iter()
            .filter(|t| !t.apps.is_empty())
            .collect();
        let listed: Vec<String> = hosted
            .iter()
            .map(|t| format!("{} ({})", t.name, t.apps.join(", ")))
            .collect();
        info!(types = ?listed, "app registered");
        self.say.done_waiting();
        self.say.line(format_args!(
            "registered actor types: {}",
            listed.join(", ")
        ));
        if let (false, Some(first)) = (self.hinted, hosted.first()) {
            self.hinted = true;
            self.say.line(format_args!(
                "call one: TROUPE_ADDR={} troupe invoke {} ID METHOD",
                self.addr, first.name
            ));
        }
    }
}

/// The next debounced change, or never without `--watch`.
async fn next_change(watch: &mut Option<Watch>) -> PathBuf {
    match watch {
        Some(watch) => match watch.changed().await {
            Some(path) => path,
            None => pending().await,
        },
        None => pending().await,
    }
}

/// The next registration (never, should the runtime be gone).
async fn next_registration(registrations: &mut tokio_watch::Receiver<u64>) {
    if registrations.changed().await.is_err() {
        pending::<()>().await;
    }
}

/// "0.5s", "12.3s".
fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}
