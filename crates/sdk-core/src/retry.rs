//! Retries of invoke and tell: the policy, the loop, and what a call that
//! still failed reports about them.
//!
//! Two answers are resent, with the same request and idempotency key, while
//! the call's deadline leaves time:
//! - UNAVAILABLE: the daemon restarted, a forward to another daemon broke,
//!   or the connection was refused or reset. The attempt may or may not have
//!   reached the actor; the call's idempotency key ([`crate::key`]) makes the
//!   resend safe.
//! - RESOURCE_EXHAUSTED carrying gRPC's retry pushback (`grpc-retry-pushback-ms`):
//!   the daemon refused the call before it ran (a full mailbox, memory near
//!   its limit), and says how long to wait at least. Without the pushback
//!   (a message over a size limit) a resend would fail alike, so it is not
//!   resent.
//!
//! The SDKs' users read what happened in the error's message; [`Retried`]
//! carries what the language layers need to write it as they always have.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tonic::Code;

use crate::backoff::jittered;
use crate::CallError;

/// The trailer in which the daemon says a RESOURCE_EXHAUSTED ran nothing,
/// and how many milliseconds to wait at least before resending it (gRFC A6).
pub const PUSHBACK_TRAILER: &str = "grpc-retry-pushback-ms";

/// The pause after the first refusal.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// The longest pause: each one doubles up to this.
pub const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// A call without a deadline would otherwise retry forever against a daemon
/// that never comes back; this bounds its retries, counted from its first
/// failure.
pub const NO_DEADLINE_RETRY_WINDOW: Duration = Duration::from_secs(10);
/// Below this much time left another attempt is not sent: it would most
/// likely end in DEADLINE_EXCEEDED, hiding the UNAVAILABLE that explains the
/// failure.
pub const MIN_ATTEMPT: Duration = Duration::from_millis(50);

/// Why the retries stopped while the daemon still refused the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GaveUp {
    /// The call's deadline left no time for another attempt.
    Deadline,
    /// A call without a deadline used up [`NO_DEADLINE_RETRY_WINDOW`].
    Window,
}

/// A call that failed, with what its retries did: the last attempt's status,
/// how many times it was resent, over how long, and whether it stopped for
/// lack of time with the daemon still refusing it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{status} (retried {retries} times over {elapsed:?})")]
pub struct Retried {
    /// The last attempt's status.
    pub status: CallError,
    /// Attempts after the first.
    pub retries: u32,
    /// From the first attempt's start to the failure.
    pub elapsed: Duration,
    /// Set when the retries ran out of time (then `status` is the last
    /// refusal: UNAVAILABLE, or RESOURCE_EXHAUSTED with a pushback).
    pub gave_up: Option<GaveUp>,
    /// The last refusal that was retried, as `CODE: message` ("no details"
    /// for an empty message): what explains a DEADLINE_EXCEEDED or
    /// NOT_FOUND that ended the retries.
    pub last_refusal: Option<String>,
}

impl Retried {
    /// A failure before or at the first attempt: nothing was retried.
    pub fn once(status: CallError) -> Self {
        Self {
            status,
            retries: 0,
            elapsed: Duration::ZERO,
            gave_up: None,
            last_refusal: None,
        }
    }
}

/// One retry about to happen, for a layer that logs it in its own words.
#[derive(Debug, Clone)]
pub struct RetryNote {
    /// 1 for the first retry.
    pub retry: u32,
    pub pause: Duration,
    /// The refusal, as `CODE: message`.
    pub details: String,
}

/// Runs `attempt(time_left)` until it answers, fails with a status that is
/// not a refusal to resend ([`min_pause`]), or `timeout` (from now; `None`: no
/// deadline, retries for [`NO_DEADLINE_RETRY_WINDOW`]) leaves no time for
/// another attempt. Without `retry` it runs once. `attempt` must resend the
/// same request, idempotency key included; `on_retry` hears of each retry
/// before its pause, and `what` names the call in the debug line of each.
pub async fn with_retries<T, F, Fut>(
    retry: bool,
    timeout: Option<Duration>,
    what: &(dyn Display + Sync),
    mut on_retry: impl FnMut(&RetryNote),
    mut attempt: F,
) -> Result<T, Retried>
where
    F: FnMut(Option<Duration>) -> Fut,
    Fut: Future<Output = Result<T, CallError>>,
{
    let start = Instant::now();
    // A timeout too large for the clock is no deadline at all.
    let deadline = timeout.and_then(|t| start.checked_add(t));
    let mut attempt_timeout = timeout;
    let mut window_end = deadline;
    let mut backoff = FIRST_BACKOFF;
    let mut retries: u32 = 0;
    let mut last: Option<String> = None;
    loop {
        let status = match attempt(attempt_timeout).await {
            Ok(answer) => return Ok(answer),
            Err(status) => status,
        };
        let now = Instant::now();
        let failed = |status, gave_up, last_refusal| Retried {
            status,
            retries,
            elapsed: now.saturating_duration_since(start),
            gave_up,
            last_refusal,
        };
        let Some(least) = min_pause(&status).filter(|_| retry) else {
            // Another status ends the retries: the restarted daemon's
            // NOT_FOUND, or the deadline passing while a retry waited (then
            // the refusal before it explains more).
            return Err(failed(status, None, last));
        };
        let details = refusal(&status);
        let end = *window_end
            .get_or_insert_with(|| now.checked_add(NO_DEADLINE_RETRY_WINDOW).unwrap_or(now));
        // The last pause is cut short so that the attempt after it still fits,
        // but never below what the daemon asked for. No room at all is giving
        // up too: an attempt with exactly MIN_ATTEMPT left already failed, and
        // time may not have moved since.
        let room = end
            .checked_duration_since(now)
            .and_then(|left| left.checked_sub(MIN_ATTEMPT))
            .filter(|room| !room.is_zero() && *room >= least);
        let Some(room) = room else {
            let why = if deadline.is_some() {
                GaveUp::Deadline
            } else {
                GaveUp::Window
            };
            return Err(failed(status, Some(why), Some(details)));
        };
        // Jitter keeps many clients of a restarted daemon from retrying in
        // lockstep.
        let pause = jittered(backoff).max(least).min(room);
        retries = retries.saturating_add(1);
        tracing::debug!(
            call = %what,
            retry = retries,
            pause_ms = pause.as_millis() as u64,
            details = %details,
            "refused; retrying with the same idempotency key"
        );
        on_retry(&RetryNote {
            retry: retries,
            pause,
            details: details.clone(),
        });
        last = Some(details);
        tokio::time::sleep(pause).await;
        backoff = backoff.saturating_mul(2).min(MAX_BACKOFF);
        if let Some(deadline) = deadline {
            attempt_timeout = Some(deadline.saturating_duration_since(Instant::now()));
        }
    }
}

/// For a refusal worth resending, the least pause before the resend: none
/// of its own for UNAVAILABLE, the daemon's pushback for RESOURCE_EXHAUSTED.
/// `None` for every other status, and for a RESOURCE_EXHAUSTED without a
/// pushback (or with a negative one, which gRFC A6 makes a "do not retry").
pub fn min_pause(status: &CallError) -> Option<Duration> {
    match status.code {
        Code::Unavailable => Some(Duration::ZERO),
        Code::ResourceExhausted => status
            .trailers
            .iter()
            .find(|(key, _)| key == PUSHBACK_TRAILER)
            .and_then(|(_, ms)| ms.trim().parse::<u64>().ok())
            .map(Duration::from_millis),
        _ => None,
    }
}

/// A refusal as the retries' notes and the final error quote it.
fn refusal(status: &CallError) -> String {
    let code = match status.code {
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        _ => "UNAVAILABLE",
    };
    let message = if status.message.is_empty() {
        "no details"
    } else {
        &status.message
    };
    format!("{code}: {message}")
}
