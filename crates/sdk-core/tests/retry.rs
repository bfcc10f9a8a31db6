//! The retry policy on tokio's paused clock: which statuses are retried, how
//! long the pauses are, and where the retries stop and what they report; and
//! the client-wide retry budget (gRFC A6 retry throttling).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cell::RefCell;
use std::time::Duration;

use tokio::time::Instant;
use tonic::Code;
use troupe_sdk_core::retry::{
    with_retries, BudgetError, BudgetOptions, GaveUp, RetryBudget, MIN_ATTEMPT, PUSHBACK_TRAILER,
};
use troupe_sdk_core::CallError;

/// What the fake attempts saw: when each started (from the call's start)
/// and the time it was given.
#[derive(Default)]
struct Seen {
    attempts: Vec<(Duration, Option<Duration>)>,
}

fn unavailable() -> CallError {
    CallError::new(Code::Unavailable, "connection refused")
}

/// A refusal that ran nothing, with the daemon's pushback.
fn refused(pushback: &str) -> CallError {
    let mut status = CallError::new(Code::ResourceExhausted, "memory near its limit");
    status
        .trailers
        .push((PUSHBACK_TRAILER.to_owned(), pushback.to_owned()));
    status
}

/// Fails the first `failures` attempts with `status`, then answers 7.
async fn run(
    retry: bool,
    timeout: Option<Duration>,
    failures: usize,
    status: impl Fn() -> CallError,
) -> (Result<u32, troupe_sdk_core::retry::Retried>, Seen) {
    run_within(None, retry, timeout, failures, status).await
}

/// As [`run`], within `budget`.
async fn run_within(
    budget: Option<&RetryBudget>,
    retry: bool,
    timeout: Option<Duration>,
    failures: usize,
    status: impl Fn() -> CallError,
) -> (Result<u32, troupe_sdk_core::retry::Retried>, Seen) {
    let start = Instant::now();
    let seen = RefCell::new(Seen::default());
    let result = with_retries(
        retry,
        budget,
        timeout,
        &"test",
        |_| {},
        |left| {
            let n = {
                let mut seen = seen.borrow_mut();
                seen.attempts.push((start.elapsed(), left));
                seen.attempts.len()
            };
            let answer = if n <= failures { Err(status()) } else { Ok(7) };
            async move { answer }
        },
    )
    .await;
    (result, seen.into_inner())
}

#[tokio::test(start_paused = true)]
async fn unavailable_is_retried_after_doubling_jittered_pauses() {
    let (result, seen) = run(true, Some(Duration::from_secs(30)), 4, unavailable).await;
    assert_eq!(result.unwrap(), 7);
    let starts: Vec<Duration> = seen.attempts.iter().map(|a| a.0).collect();
    assert_eq!(starts.len(), 5);
    // 50, 100, 200, 400 ms, each within ×0.8–1.2.
    for (i, pair) in starts.windows(2).enumerate() {
        let pause = pair[1] - pair[0];
        let nominal = Duration::from_millis(50 << i);
        assert!(
            pause >= nominal.mul_f64(0.8) && pause <= nominal.mul_f64(1.2),
            "pause {i} was {pause:?}"
        );
    }
    // Each attempt is given what is left of the call's deadline.
    let (at, left) = seen.attempts[4];
    assert_eq!(left, Some(Duration::from_secs(30) - at));
}

#[tokio::test(start_paused = true)]
async fn pauses_stop_doubling_at_a_second() {
    let (result, seen) = run(true, Some(Duration::from_secs(60)), 8, unavailable).await;
    assert_eq!(result.unwrap(), 7);
    let starts: Vec<Duration> = seen.attempts.iter().map(|a| a.0).collect();
    let last = starts[8] - starts[7];
    assert!(last >= Duration::from_millis(800) && last <= Duration::from_millis(1200));
}

#[tokio::test(start_paused = true)]
async fn another_code_is_not_retried() {
    let not_found = || CallError::new(Code::NotFound, "no such actor type");
    let (result, seen) = run(true, Some(Duration::from_secs(5)), 1, not_found).await;
    let err = result.unwrap_err();
    assert_eq!(err.status.code, Code::NotFound);
    assert_eq!((err.retries, seen.attempts.len()), (0, 1));
    assert_eq!(err.last_refusal, None);
}

#[tokio::test(start_paused = true)]
async fn without_retry_a_call_is_sent_once() {
    let (result, seen) = run(false, Some(Duration::from_secs(5)), 1, unavailable).await;
    let err = result.unwrap_err();
    assert_eq!(err.status.code, Code::Unavailable);
    assert_eq!(
        (err.retries, err.gave_up, seen.attempts.len()),
        (0, None, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn retries_end_at_the_deadline_with_the_last_unavailable_explained() {
    let timeout = Duration::from_millis(1000);
    let (result, seen) = run(true, Some(timeout), usize::MAX, unavailable).await;
    let err = result.unwrap_err();
    assert_eq!(err.status.code, Code::Unavailable);
    assert_eq!(err.gave_up, Some(GaveUp::Deadline));
    assert_eq!(
        err.last_refusal.as_deref(),
        Some("UNAVAILABLE: connection refused")
    );
    assert_eq!(err.retries as usize, seen.attempts.len() - 1);
    assert!(err.elapsed <= timeout);
    // No attempt started with less than MIN_ATTEMPT left; the last pause was
    // cut short so that the last attempt had exactly that.
    for (at, left) in &seen.attempts {
        assert!(*left >= Some(MIN_ATTEMPT), "attempt at {at:?} had {left:?}");
    }
    let (at, _) = seen.attempts.last().unwrap();
    assert_eq!(timeout - *at, MIN_ATTEMPT);
}

#[tokio::test(start_paused = true)]
async fn a_call_without_deadline_retries_for_ten_seconds_from_its_first_failure() {
    let (result, seen) = run(true, None, usize::MAX, unavailable).await;
    let err = result.unwrap_err();
    assert_eq!(err.gave_up, Some(GaveUp::Window));
    assert!(seen.attempts.iter().all(|a| a.1.is_none()));
    let (last, _) = seen.attempts.last().unwrap();
    assert_eq!(*last, Duration::from_secs(10) - MIN_ATTEMPT);
    assert!(err.elapsed >= *last && err.elapsed <= Duration::from_secs(10));
}

#[tokio::test(start_paused = true)]
async fn a_deadline_during_the_retries_is_reported_after_the_unavailable() {
    let mut n = 0;
    let status = move || {
        n += 1;
        if n == 1 {
            unavailable()
        } else {
            CallError::deadline_exceeded()
        }
    };
    let status = RefCell::new(status);
    let (result, _) = run(true, Some(Duration::from_secs(1)), 2, || {
        (status.borrow_mut())()
    })
    .await;
    let err = result.unwrap_err();
    assert_eq!(err.status.code, Code::DeadlineExceeded);
    assert_eq!(err.retries, 1);
    assert_eq!(err.gave_up, None);
    assert_eq!(
        err.last_refusal.as_deref(),
        Some("UNAVAILABLE: connection refused")
    );
}

#[tokio::test(start_paused = true)]
async fn a_refusal_with_a_pushback_is_retried_no_sooner_than_it_asks() {
    let (result, seen) = run(true, Some(Duration::from_secs(30)), 3, || refused("500")).await;
    assert_eq!(result.unwrap(), 7);
    let starts: Vec<Duration> = seen.attempts.iter().map(|a| a.0).collect();
    assert_eq!(starts.len(), 4);
    // The pushback (500 ms) is the least pause; the backoff (50, 100, 200
    // ms) is below it each time.
    for (i, pair) in starts.windows(2).enumerate() {
        let pause = pair[1] - pair[0];
        assert_eq!(pause, Duration::from_millis(500), "pause {i}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_pushback_below_the_backoff_leaves_the_backoff() {
    let (result, seen) = run(true, Some(Duration::from_secs(30)), 4, || refused("1")).await;
    assert_eq!(result.unwrap(), 7);
    let last = seen.attempts[4].0 - seen.attempts[3].0;
    assert!(
        last >= Duration::from_millis(320) && last <= Duration::from_millis(480),
        "{last:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn resource_exhausted_without_a_pushback_is_final() {
    for status in [
        CallError::new(Code::ResourceExhausted, "reply larger than the limit"),
        refused("-1"),
        refused("soon"),
    ] {
        let (result, seen) = run(true, Some(Duration::from_secs(5)), 1, || status.clone()).await;
        let err = result.unwrap_err();
        assert_eq!(err.status.code, Code::ResourceExhausted);
        assert_eq!((err.retries, seen.attempts.len()), (0, 1));
    }
}

#[tokio::test(start_paused = true)]
async fn a_pushback_longer_than_the_time_left_ends_the_retries() {
    let (result, seen) = run(true, Some(Duration::from_millis(1200)), usize::MAX, || {
        refused("500")
    })
    .await;
    let err = result.unwrap_err();
    assert_eq!(err.gave_up, Some(GaveUp::Deadline));
    assert_eq!(
        err.last_refusal.as_deref(),
        Some("RESOURCE_EXHAUSTED: memory near its limit")
    );
    // At 0, 500 and 1000 ms; then only 200 ms are left, less than the
    // pushback, so the call fails now rather than resend sooner than asked.
    let starts: Vec<Duration> = seen.attempts.iter().map(|a| a.0).collect();
    assert_eq!(starts, [0, 500, 1000].map(Duration::from_millis));
    assert_eq!(err.retries, 2);
    assert_eq!(err.elapsed, Duration::from_millis(1000));
}

fn budget(max_tokens: u32, token_ratio: f64) -> RetryBudget {
    RetryBudget::new(BudgetOptions {
        max_tokens,
        token_ratio,
    })
    .unwrap()
}

#[test]
fn the_budget_falls_with_failures_stops_retries_at_half_and_refills_by_the_ratio() {
    let b = budget(10, 0.1);
    assert_eq!(b.tokens(), 10.0, "a budget starts full");
    // Each failure takes a token; a retry may follow while more than 5 are left.
    let allowed: Vec<bool> = (0..6).map(|_| b.on_failure()).collect();
    assert_eq!(allowed, [true, true, true, true, false, false]);
    assert_eq!(b.tokens(), 4.0);
    for _ in 0..10 {
        b.on_failure();
    }
    assert_eq!(b.tokens(), 0.0, "never below zero");
    // Each success puts back a tenth: from 0, retries come back above 5, after
    // 51 successes (exactly: thousandths, no float drift).
    for _ in 0..50 {
        b.on_success();
    }
    assert_eq!(b.tokens(), 5.0);
    assert!(!b.on_failure(), "4 tokens left after this failure");
    for _ in 0..11 {
        b.on_success();
    }
    assert_eq!(b.tokens(), 5.1);
    assert!(!b.on_failure(), "4.1 left: still not above half");
    for _ in 0..100 {
        b.on_success();
    }
    assert_eq!(b.tokens(), 10.0, "never above a full budget");
    assert!(b.on_failure(), "9 left");
    // An odd size's half is a fraction: 3 tokens retry while more than 1.5 are left.
    let odd = budget(3, 1.0);
    assert_eq!([odd.on_failure(), odd.on_failure()], [true, false]);
    odd.on_success();
    assert!(!odd.on_failure(), "2 back to 1");
    // The ratio counts to three decimals, as gRFC A6 says.
    let fine = budget(2, 0.0014);
    fine.on_failure();
    fine.on_success();
    assert_eq!(fine.tokens(), 1.001);
}

#[test]
fn a_budget_out_of_grfc_a6_range_is_refused() {
    let options = |max_tokens, token_ratio| BudgetOptions {
        max_tokens,
        token_ratio,
    };
    assert_eq!(
        RetryBudget::new(options(0, 0.1)).unwrap_err(),
        BudgetError::MaxTokens(0)
    );
    assert!(RetryBudget::new(options(1001, 0.1)).is_err());
    assert!(RetryBudget::new(options(1000, 0.1)).is_ok());
    for ratio in [0.0, -1.0, 0.0004, f64::NAN, f64::INFINITY] {
        assert!(RetryBudget::new(options(10, ratio)).is_err(), "{ratio}");
    }
    assert_eq!(BudgetOptions::default(), options(100, 0.1));
    // A session checks its budget when it is given it, before building any.
    assert_eq!(
        options(0, 0.1).checked().unwrap_err(),
        BudgetError::MaxTokens(0)
    );
    assert_eq!(options(2, 0.1).checked(), Ok(options(2, 0.1)));
}

#[tokio::test(start_paused = true)]
async fn a_spent_budget_ends_the_retries_of_every_call_on_it() {
    let b = budget(10, 0.1);
    let timeout = Some(Duration::from_secs(30));
    // The first call takes 10 -> 9, 8, 7, 6 with a retry after each, and the
    // failure that leaves 5 ends it: 4 retries, not 30 s of them.
    let (result, seen) = run_within(Some(&b), true, timeout, usize::MAX, unavailable).await;
    let err = result.unwrap_err();
    assert_eq!((err.retries, seen.attempts.len()), (4, 5));
    assert_eq!(err.gave_up, Some(GaveUp::Budget));
    assert_eq!(err.status.code, Code::Unavailable);
    assert_eq!(
        err.last_refusal.as_deref(),
        Some("UNAVAILABLE: connection refused")
    );
    assert!(
        err.to_string().ends_with("; retry budget exhausted)"),
        "{err}"
    );
    // The calls after it fail after their first attempt.
    for _ in 0..3 {
        let (result, seen) = run_within(Some(&b), true, timeout, usize::MAX, unavailable).await;
        let err = result.unwrap_err();
        assert_eq!((err.retries, seen.attempts.len()), (0, 1));
        assert_eq!(err.gave_up, Some(GaveUp::Budget));
    }
    assert_eq!(b.tokens(), 2.0);
    // A pushed-back refusal draws on the same budget.
    let (result, _) = run_within(Some(&b), true, timeout, usize::MAX, || refused("10")).await;
    assert_eq!(result.unwrap_err().gave_up, Some(GaveUp::Budget));
    // A refusal that is not resent, and a call sent once, leave it alone.
    let not_found = || CallError::new(Code::NotFound, "no such actor type");
    let (result, _) = run_within(Some(&b), true, timeout, 1, not_found).await;
    assert_eq!(result.unwrap_err().gave_up, None);
    let (result, _) = run_within(Some(&b), false, timeout, 1, unavailable).await;
    assert_eq!(result.unwrap_err().gave_up, None);
    assert_eq!(b.tokens(), 1.0);
    // Answers refill it; with none, the same call would have retried on.
    let (result, _) = run_within(Some(&b), true, timeout, 0, unavailable).await;
    assert_eq!(result.unwrap(), 7);
    assert_eq!(b.tokens(), 1.1);
    let (result, seen) = run(true, timeout, 20, unavailable).await;
    assert_eq!((result.unwrap(), seen.attempts.len()), (7, 21));
}

#[tokio::test(start_paused = true)]
async fn time_running_out_is_reported_before_the_budget() {
    // The first failure leaves 1 of 2 tokens, not above half; but a 50 ms
    // deadline leaves no room for a retry either, and the deadline is what
    // the caller can act on.
    let b = budget(2, 0.1);
    let (result, _) = run_within(Some(&b), true, Some(MIN_ATTEMPT), usize::MAX, unavailable).await;
    let err = result.unwrap_err();
    assert_eq!(err.gave_up, Some(GaveUp::Deadline));
    assert_eq!(b.tokens(), 1.0, "the failure took its token all the same");
}
