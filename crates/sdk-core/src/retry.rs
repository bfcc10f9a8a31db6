//! Retries of invoke and tell: the policy, the loop, and what a call that
//! still failed reports about them.
//!
//! UNAVAILABLE means the daemon restarted, a forward to another daemon broke,
//! or the connection was refused or reset: the attempt may or may not have
//! reached the actor. The call's idempotency key ([`crate::key`]) makes a
//! resend safe, so [`with_retries`] resends the same request on UNAVAILABLE,
//! and on nothing else, while the call's deadline leaves time. The SDKs' users
//! read what happened in the error's message; [`Retried`] carries what the
//! language layers need to write it as they always have.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tonic::Code;

use crate::backoff::jittered;
use crate::CallError;

/// The pause after the first UNAVAILABLE.
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

/// Why the retries stopped while the daemon was still UNAVAILABLE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GaveUp {
    /// The call's deadline left no time for another attempt.
    Deadline,
    /// A call without a deadline used up [`NO_DEADLINE_RETRY_WINDOW`].
    Window,
}

/// A call that failed, with what its retries did: the last attempt's status,
/// how many times it was resent, over how long, and whether it stopped for
/// lack of time with the daemon still UNAVAILABLE.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{status} (retried {retries} times over {elapsed:?})")]
pub struct Retried {
    /// The last attempt's status.
    pub status: CallError,
    /// Attempts after the first.
    pub retries: u32,
    /// From the first attempt's start to the failure.
    pub elapsed: Duration,
    /// Set when the retries ran out of time (then `status` is UNAVAILABLE).
    pub gave_up: Option<GaveUp>,
    /// The message of the last UNAVAILABLE before `status` ("no details" for
    /// an empty one): what explains a DEADLINE_EXCEEDED or NOT_FOUND that
    /// ended the retries.
    pub last_unavailable: Option<String>,
}

impl Retried {
    /// A failure before or at the first attempt: nothing was retried.
    pub fn once(status: CallError) -> Self {
        Self {
            status,
            retries: 0,
            elapsed: Duration::ZERO,
            gave_up: None,
            last_unavailable: None,
        }
    }
}

/// One retry about to happen, for a layer that logs it in its own words.
#[derive(Debug, Clone)]
pub struct RetryNote {
    /// 1 for the first retry.
    pub retry: u32,
    pub pause: Duration,
    /// The UNAVAILABLE's message.
    pub details: String,
}

/// Runs `attempt(time_left)` until it answers, fails with another status
/// than UNAVAILABLE, or `timeout` (from now; `None`: no deadline, retries for
/// [`NO_DEADLINE_RETRY_WINDOW`]) leaves no time for another attempt. Without
/// `retry` it runs once. `attempt` must resend the same request, idempotency
/// key included; `on_retry` hears of each retry before its pause, and
/// `what` names the call in the debug line of each.
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
        let failed = |status, gave_up, last_unavailable| Retried {
            status,
            retries,
            elapsed: now.saturating_duration_since(start),
            gave_up,
            last_unavailable,
        };
        if !retry || status.code != Code::Unavailable {
            // Another status ends the retries: the restarted daemon's
            // NOT_FOUND, or the deadline passing while a retry waited (then
            // the UNAVAILABLE explains more).
            return Err(failed(status, None, last));
        }
        let details = if status.message.is_empty() {
            "no details".to_owned()
        } else {
            status.message.clone()
        };
        let end = *window_end
            .get_or_insert_with(|| now.checked_add(NO_DEADLINE_RETRY_WINDOW).unwrap_or(now));
        // The last pause is cut short so that the attempt after it still fits.
        // No room at all is giving up too: an attempt with exactly
        // MIN_ATTEMPT left already failed, and time may not have moved since.
        let room = end
            .checked_duration_since(now)
            .and_then(|left| left.checked_sub(MIN_ATTEMPT))
            .filter(|room| !room.is_zero());
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
        let pause = jittered(backoff).min(room);
        retries = retries.saturating_add(1);
        tracing::debug!(
            call = %what,
            retry = retries,
            pause_ms = pause.as_millis() as u64,
            details = %details,
            "UNAVAILABLE; retrying with the same idempotency key"
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
