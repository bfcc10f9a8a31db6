//! Runtime limits and defaults.

use std::time::Duration;

use crate::error::{CallError, ConfigError};
use crate::input::{range, UserDuration};
use crate::types::{StateMode, TypeOptions, TypeSpec};

/// Limits and defaults of one runtime. Every bound the runtime enforces is here.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Threads' worth of turn dispatchers; actors are spread over them.
    pub workers: usize,
    /// Largest payload or state value accepted.
    pub max_payload_bytes: usize,
    /// Calls queued or running across the daemon before RESOURCE_EXHAUSTED.
    pub max_pending_calls: usize,
    pub default_max_mailbox: usize,
    pub default_idle_timeout: Duration,
    pub default_state_mode: StateMode,
    /// Longest a call may take, whatever deadline the caller set.
    pub call_timeout: Duration,
    /// How long calls for a type with no connected app wait for one (also the
    /// grace period after start during which unknown types wait).
    pub host_wait: Duration,
    pub flush_interval: Duration,
    /// Dirty bytes that trigger a flush before the interval is over.
    pub flush_max_dirty_bytes: usize,
    /// How long a graceful shutdown waits for turns and deactivations.
    pub shutdown_grace: Duration,
    /// How long a shutdown, after the grace period, tries to write what is
    /// left before it gives up and reports what it could not write.
    pub shutdown_flush_timeout: Duration,
    /// Baseline for benchmarks: write each turn's changes to the store on
    /// their own before replying (no batching), as naive actor runtimes do.
    pub write_through: bool,
    /// Collect metrics for [`Runtime::encode_metrics`]; off, the hot path
    /// does not even read the clock for them.
    ///
    /// [`Runtime::encode_metrics`]: crate::Runtime::encode_metrics
    pub metrics: bool,
    /// This daemon's name in status output and traces.
    pub node: String,
    /// Actors one call chain may pass through before calls from it are
    /// refused as runaway recursion.
    pub max_chain_depth: usize,
    /// Longest a turn may run, for types that set none.
    pub default_turn_timeout: Duration,
    /// Calls of one type queued or running, for types that set no bound
    /// of their own: a type whose app hangs holds at most this many of the
    /// daemon's `max_pending_calls`. `None`: half of them.
    pub max_pending_per_type: Option<usize>,
    /// Scheduling time (reminders, alarms, timers) from a [`TestClock`]
    /// that [`Runtime::advance_clock`] moves forward, instead of the system
    /// clock. For tests only: the daemon refuses it in a cluster.
    ///
    /// [`TestClock`]: crate::clock::TestClock
    /// [`Runtime::advance_clock`]: crate::Runtime::advance_clock
    pub test_clock: bool,
    /// How long the answer of a keyed call (idempotency key) is kept: a
    /// retry within it gets the recorded answer (the `idempotency` module).
    pub idempotency_retention: Duration,
    /// The least an answer is kept for a caller that says it sends its key
    /// again only for a while (`CallExtra::key_retention`): a margin over
    /// the flush that stores it and the retries in flight.
    pub min_key_retention: Duration,
    /// Bytes the live actors may spend together remembering which keys the
    /// store holds answers for; past it, those holding the most keep them as
    /// tags only or forget them, and retries of their keys read the store
    /// (`idempotency::budget`).
    pub idempotency_memory_bytes: usize,
    /// Activations this daemon holds before it deactivates the ones idle
    /// longest ahead of their idle timeout (`lifecycle::capacity`); `None`:
    /// no bound but the idle timeouts.
    pub max_activations: Option<usize>,
    /// Refuse new work while resident memory is at this share of the
    /// limit (`memory_gate`); `None`: never.
    pub memory_shedding: Option<crate::MemoryShedding>,
    /// Actors and types whose events this daemon holds for watchers at
    /// once (`watch`); a watch past it is refused with RESOURCE_EXHAUSTED.
    pub max_watched_actors: usize,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            workers: std::thread::available_parallelism().map_or(2, |n| n.get()),
            max_payload_bytes: 4 * 1024 * 1024,
            max_pending_calls: 100_000,
            default_max_mailbox: 1_000,
            default_idle_timeout: Duration::from_secs(600),
            default_state_mode: StateMode::WriteBehind,
            call_timeout: Duration::from_secs(60),
            host_wait: Duration::from_secs(10),
            flush_interval: Duration::from_secs(1),
            flush_max_dirty_bytes: 16 * 1024 * 1024,
            shutdown_grace: Duration::from_secs(30),
            shutdown_flush_timeout: Duration::from_secs(10),
            write_through: false,
            metrics: false,
            node: "local".into(),
            max_chain_depth: 32,
            default_turn_timeout: Duration::from_secs(60),
            max_pending_per_type: None,
            test_clock: false,
            idempotency_retention: Duration::from_secs(24 * 3600),
            min_key_retention: Duration::from_secs(60),
            idempotency_memory_bytes: 64 * 1024 * 1024,
            max_activations: None,
            memory_shedding: None,
            max_watched_actors: 65_536,
        }
    }
}

/// Bounds a type registration may ask for.
const MAX_MAILBOX_LIMIT: usize = 1_000_000;
const MIN_IDLE_TIMEOUT: Duration = Duration::from_millis(10);
/// Activations track idleness in u32 milliseconds (49 days); stay well inside.
const MAX_IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 24 * 3600);
/// An actor type's retention: from a minute (a shorter one is more likely
/// "30" meant as days than a wish to erase actors within seconds).
const RETENTIONS: std::ops::RangeInclusive<Duration> =
    std::ops::RangeInclusive::new(Duration::from_secs(60), crate::input::MAX_DURATION);
/// A turn may run from a millisecond to a day.
const TURN_TIMEOUTS: std::ops::RangeInclusive<Duration> =
    std::ops::RangeInclusive::new(Duration::from_millis(1), Duration::from_secs(24 * 3600));

impl RuntimeConfig {
    /// Checks every limit; errors name the setting as the daemon's config
    /// file and flags spell it.
    pub fn check(&self) -> Result<(), ConfigError> {
        let positive = [
            ("`workers` (--workers)", self.workers),
            (
                "`max_payload_bytes` (--max-payload-bytes)",
                self.max_payload_bytes,
            ),
            (
                "`max_pending_calls` (--max-pending-calls)",
                self.max_pending_calls,
            ),
            ("`max_mailbox` (--max-mailbox)", self.default_max_mailbox),
            (
                "`max_watched_actors` (--max-watched-actors)",
                self.max_watched_actors,
            ),
            (
                "`flush_max_dirty_bytes` (--flush-max-dirty-bytes)",
                self.flush_max_dirty_bytes,
            ),
            (
                "`idempotency_memory_bytes` (--idempotency-memory-bytes)",
                self.idempotency_memory_bytes,
            ),
            (
                "`max_pending_per_type` (--max-pending-per-type)",
                self.max_pending_per_type.unwrap_or(1),
            ),
            (
                "`max_activations` (--max-activations)",
                self.max_activations.unwrap_or(1),
            ),
        ];
        for (what, value) in positive {
            if value == 0 {
                return Err(ConfigError(format!("{what} must be at least 1")));
            }
        }
        if let Some(shedding) = self.memory_shedding {
            if !(1..=100).contains(&shedding.percent) {
                return Err(ConfigError(format!(
                    "`memory_shed_percent` (--memory-shed-percent) is {}; give a share of the \
                     memory limit from 1 to 100, or 0 to never shed load",
                    shedding.percent
                )));
            }
        }
        let idle = MIN_IDLE_TIMEOUT..=MAX_IDLE_TIMEOUT;
        for (what, value, allowed) in [
            (
                "`flush_interval` (--flush-interval)",
                self.flush_interval,
                &range::POSITIVE,
            ),
            (
                "`call_timeout` (--call-timeout)",
                self.call_timeout,
                &range::POSITIVE,
            ),
            (
                "`idle_timeout` (--idle-timeout)",
                self.default_idle_timeout,
                &idle,
            ),
            (
                "`host_wait` (--host-wait)",
                self.host_wait,
                &range::UP_TO_A_DAY,
            ),
            (
                "`shutdown_grace` (--shutdown-grace)",
                self.shutdown_grace,
                &range::UP_TO_A_DAY,
            ),
            (
                "`shutdown_flush_timeout` (--shutdown-flush-timeout)",
                self.shutdown_flush_timeout,
                &range::UP_TO_A_DAY,
            ),
            (
                "`idempotency_retention` (--idempotency-retention)",
                self.idempotency_retention,
                &range::POSITIVE,
            ),
        ] {
            UserDuration::new(what, value, allowed).map_err(|e| ConfigError(e.to_string()))?;
        }
        Ok(())
    }

    /// Fills in defaults and checks what an app asked for.
    pub(crate) fn resolve(&self, spec: &TypeSpec) -> Result<TypeOptions, CallError> {
        let idle_timeout = spec.idle_timeout.unwrap_or(self.default_idle_timeout);
        if !(MIN_IDLE_TIMEOUT..=MAX_IDLE_TIMEOUT).contains(&idle_timeout) {
            return Err(CallError::InvalidArgument(format!(
                "actor type '{}': idle timeout {idle_timeout:?} must be between \
                 {MIN_IDLE_TIMEOUT:?} and {MAX_IDLE_TIMEOUT:?}",
                spec.name
            )));
        }
        let max_mailbox = spec.max_mailbox.unwrap_or(self.default_max_mailbox);
        if !(1..=MAX_MAILBOX_LIMIT).contains(&max_mailbox) {
            return Err(CallError::InvalidArgument(format!(
                "actor type '{}': max_mailbox {max_mailbox} must be between 1 and {MAX_MAILBOX_LIMIT}",
                spec.name
            )));
        }
        let turn_timeout = spec.turn_timeout.unwrap_or(self.default_turn_timeout);
        UserDuration::new(
            &format!("actor type '{}': turn timeout", spec.name),
            turn_timeout,
            &TURN_TIMEOUTS,
        )?;
        let max_pending_calls = spec
            .max_pending_calls
            .or(self.max_pending_per_type)
            .unwrap_or((self.max_pending_calls / 2).max(1))
            .min(self.max_pending_calls);
        if max_pending_calls == 0 {
            return Err(CallError::InvalidArgument(format!(
                "actor type '{}': max_pending_calls must be at least 1",
                spec.name
            )));
        }
        if let Some(retention) = spec.retention {
            UserDuration::new(
                &format!("actor type '{}': retention", spec.name),
                retention,
                &RETENTIONS,
            )?;
        }
        let mut readonly_methods = spec.readonly_methods.clone();
        readonly_methods.sort();
        readonly_methods.dedup();
        Ok(TypeOptions {
            name: spec.name.as_str().into(),
            idle_timeout,
            max_mailbox,
            reentrant: spec.reentrant,
            state_mode: spec.state_mode.unwrap_or(self.default_state_mode),
            readonly_methods,
            turn_timeout,
            max_pending_calls,
            durable_tells: spec.durable_tells,
            retention: spec.retention,
        })
    }
}
