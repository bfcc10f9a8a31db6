//! How `troupe serve` and `troupe dev` end: the signals that start a
//! graceful shutdown, and what a shutdown that could not write everything
//! tells the operator.

use anyhow::Context;
use tracing::error;

/// Actors a log names one by one when a shutdown could not write them; the
/// rest are counted, so a daemon with a million dirty actors still stops.
const UNWRITTEN_LOGGED: usize = 1000;

/// Logs what the store did not confirm (names only: values may be secrets)
/// and says what the operator can do.
pub(crate) fn unwritten_error(report: &troupe_runtime::ShutdownReport) -> anyhow::Error {
    for state in report.unwritten_state.iter().take(UNWRITTEN_LOGGED) {
        error!(
            actor_type = %state.actor_type,
            actor_id = %state.actor_id,
            keys = ?state.keys,
            "state not written to the store"
        );
    }
    let actors = report.unwritten_state.len();
    if actors > UNWRITTEN_LOGGED {
        error!(
            more_actors = actors - UNWRITTEN_LOGGED,
            "more actors' state not written to the store"
        );
    }
    let mut what = Vec::new();
    if actors > 0 {
        what.push(format!(
            "the state of {actors} actors (each logged above with its keys)"
        ));
    }
    if report.failed_reminder_writes > 0 {
        what.push(format!(
            "{} reminder writes (those reminders may fire again after a restart)",
            report.failed_reminder_writes
        ));
    }
    if report.abandoned_tasks {
        what.push("a store write that was still running".to_owned());
    }
    anyhow::anyhow!(
        "stopped without the store confirming {}: it failed or did not answer within \
         --shutdown-flush-timeout. Check the store; unconfirmed state changes are lost unless it \
         applied them before it stopped answering",
        what.join(", ")
    )
}

/// SIGTERM and SIGINT, the signals that start a graceful shutdown.
#[derive(Debug)]
pub(crate) struct ShutdownSignals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    pub(crate) fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            terminate: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            interrupt: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        })
    }

    pub(crate) async fn received(mut self) {
        self.next().await;
    }

    /// The next signal, by name. Cancel-safe.
    pub(crate) async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.interrupt.recv() => "SIGINT",
        }
    }
}
