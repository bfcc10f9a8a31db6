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
//! Retries are also bounded per client (per channel) by a [`RetryBudget`],
//! gRPC's retry throttling (gRFC A6 `retryThrottling`): while the daemon is
//! down or overloaded, every concurrent call would otherwise keep resending
//! for its whole deadline, multiplying the load on a daemon that is trying
//! to recover.
//!
//! The SDKs' users read what happened in the error's message; [`Retried`]
//! carries what the language layers need to write it as they always have.

use std::fmt::Display;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tonic::Code;
use troupe_backoff::Backoff;

use crate::CallError;
use crate::JITTER;

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

/// The budget's size when the SDK's user does not choose one: ten times
/// gRFC A6's example (`maxTokens` 10), whose 4 retries from a full budget
/// are spent in under a second of backoff, so a lone client would no longer
/// ride out a daemon's restart. With 100, a burst of 50 failing calls or
/// more is sent once each, while a lone call still retries through a
/// restart of 10 s (about 13 retries) three times over before successes
/// refill it.
pub const DEFAULT_MAX_TOKENS: u32 = 100;
/// What each success puts back by default: gRFC A6's example (`tokenRatio`
/// 0.1).
pub const DEFAULT_TOKEN_RATIO: f64 = 0.1;
/// The largest `maxTokens` gRFC A6 allows.
pub const MAX_MAX_TOKENS: u32 = 1000;
/// Tokens are counted in thousandths, as gRPC's own implementations do:
/// gRFC A6 gives `tokenRatio` three decimal places, and whole thousandths
/// add up exactly where repeated float additions would drift.
const MILLI: u32 = 1000;

/// The size of a [`RetryBudget`], as gRFC A6's `retryThrottling` names it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetOptions {
    /// Tokens in a full budget (1 to [`MAX_MAX_TOKENS`]); retries are sent
    /// only while more than half of them are left.
    pub max_tokens: u32,
    /// What each successful call puts back (above 0; counted to three
    /// decimal places, as gRFC A6 does).
    pub token_ratio: f64,
}

impl BudgetOptions {
    /// These options if gRFC A6 allows them, as [`RetryBudget::new`] checks
    /// them: a layer that builds its budgets later (one per connection)
    /// refuses bad ones when it is given them.
    pub fn checked(self) -> Result<Self, BudgetError> {
        RetryBudget::new(self).map(|_| self)
    }
}

impl Default for BudgetOptions {
    fn default() -> Self {
        Self {
            max_tokens: DEFAULT_MAX_TOKENS,
            token_ratio: DEFAULT_TOKEN_RATIO,
        }
    }
}

/// A budget's options out of gRFC A6's range; the language layers check
/// them first in their own words, so this reaches a user only through a bug.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BudgetError {
    #[error("a retry budget's max tokens must be 1 to 1000, not {0}")]
    MaxTokens(u32),
    #[error("a retry budget's token ratio must be at least 0.001, not {0}")]
    TokenRatio(f64),
}

/// gRPC's retry throttling (gRFC A6 `retryThrottling`), one per client: a
/// bucket of `max_tokens` tokens, full at the start. Every attempt that
/// fails with a status worth resending takes one token (never below zero);
/// every call that succeeds puts back `token_ratio`, up to `max_tokens`; and
/// a retry is sent only while more than `max_tokens / 2` tokens are left.
/// While the daemon is healthy the bucket stays full and changes nothing;
/// when it is down, a client's calls together make a few retries and then
/// fail at once, instead of each resending for its whole deadline.
#[derive(Debug)]
pub struct RetryBudget {
    /// Thousandths of a token ([`MILLI`]).
    tokens: AtomicU32,
    max: u32,
    ratio: u32,
}

impl RetryBudget {
    pub fn new(options: BudgetOptions) -> Result<Self, BudgetError> {
        if !(1..=MAX_MAX_TOKENS).contains(&options.max_tokens) {
            return Err(BudgetError::MaxTokens(options.max_tokens));
        }
        let max = options.max_tokens * MILLI;
        let ratio = (options.token_ratio * f64::from(MILLI)).round();
        if !ratio.is_finite() || ratio < 1.0 {
            return Err(BudgetError::TokenRatio(options.token_ratio));
        }
        // More than a full budget per success refills it all the same.
        let ratio = ratio.min(f64::from(max)) as u32;
        Ok(Self {
            tokens: AtomicU32::new(max),
            max,
            ratio,
        })
    }

    /// An attempt failed with a status worth resending: takes a token, and
    /// says whether a retry may follow (more than half the budget left).
    pub fn on_failure(&self) -> bool {
        let (Ok(before) | Err(before)) =
            self.tokens
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                    Some(t.saturating_sub(MILLI))
                });
        before.saturating_sub(MILLI) > self.max / 2
    }

    /// A call succeeded: puts back the token ratio, up to a full budget.
    pub fn on_success(&self) {
        let _ = self
            .tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_add(self.ratio).min(self.max))
            });
    }

    /// The tokens left, for tests and logs.
    pub fn tokens(&self) -> f64 {
        f64::from(self.tokens.load(Ordering::Relaxed)) / f64::from(MILLI)
    }
}

/// Why the retries stopped while the daemon still refused the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GaveUp {
    /// The call's deadline left no time for another attempt.
    Deadline,
    /// A call without a deadline used up [`NO_DEADLINE_RETRY_WINDOW`].
    Window,
    /// The client's [`RetryBudget`] was spent: its calls had failed too
    /// often lately for another retry.
    Budget,
}

/// What [`Retried`]'s text adds when the budget ended the retries.
fn budget_note(gave_up: &Option<GaveUp>) -> &'static str {
    match gave_up {
        Some(GaveUp::Budget) => "; retry budget exhausted",
        _ => "",
    }
}

/// A call that failed, with what its retries did: the last attempt's status,
/// how many times it was resent, over how long, and whether it stopped for
/// lack of time or of retry budget with the daemon still refusing it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{status} (retried {retries} times over {elapsed:?}{})", budget_note(.gave_up))]
pub struct Retried {
    /// The last attempt's status.
    pub status: CallError,
    /// Attempts after the first.
    pub retries: u32,
    /// From the first attempt's start to the failure.
    pub elapsed: Duration,
    /// Set when the retries ran out of time or of budget (then `status` is
    /// the last refusal: UNAVAILABLE, or RESOURCE_EXHAUSTED with a pushback).
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
/// another attempt, or `budget` (the client's; `None`: no limit) refuses
/// one. Without `retry` it runs once and leaves the budget alone. `attempt`
/// must resend the same request, idempotency key included; `on_retry` hears
/// of each retry before its pause, and `what` names the call in the debug
/// line of each.
pub async fn with_retries<T, F, Fut>(
    retry: bool,
    budget: Option<&RetryBudget>,
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
    let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF, JITTER);
    let mut retries: u32 = 0;
    let mut last: Option<String> = None;
    // A call sent once is outside the retry policy, and so outside its
    // throttling (as in gRPC).
    let budget = budget.filter(|_| retry);
    loop {
        let status = match attempt(attempt_timeout).await {
            Ok(answer) => {
                if let Some(budget) = budget {
                    budget.on_success();
                }
                return Ok(answer);
            }
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
        // Every refusal takes its token, the last one of a call too (gRFC
        // A6), even when time would end the retries anyway.
        let throttled = budget.is_some_and(|budget| !budget.on_failure());
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
        if throttled {
            return Err(failed(status, Some(GaveUp::Budget), Some(details)));
        }
        // Jitter keeps many clients of a restarted daemon from retrying in
        // lockstep.
        let pause = backoff.next_pause().max(least).min(room);
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
