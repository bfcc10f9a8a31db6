//! A caller's deadline (`grpc-timeout`), counted from the moment its
//! request reached the daemon, and how long that leaves to answer.
//!
//! tonic's server starts a timer of the header's length when a request
//! arrives and, when it fires, answers CANCELLED ("Timeout expired"): a
//! status a client cannot tell from a call it cancelled itself. The daemon
//! answers DEADLINE_EXCEEDED, naming the actor, a little before that timer.
//! Its own timer must run from the same moment: a handler starts only once
//! the request's body is read, and a body that comes late (a congested link,
//! a stalled client) used to push the daemon's answer past tonic's cut-off.
//! [`Arrival`] stamps the deadline as tonic reads the header; the handler
//! answers within what is left of it.

use std::task::{Context, Poll};
use std::time::Duration;

use tonic::codegen::{http, Service};
use tonic::metadata::MetadataMap;
use tonic::server::NamedService;

/// When a request's deadline passes, by the daemon's monotonic clock: put
/// in the request's extensions by [`Arrival`], which no caller can set.
#[derive(Debug, Clone, Copy)]
pub struct ArrivedDeadline(tokio::time::Instant);

/// How long the daemon has to answer a call whose caller set a deadline:
/// what is left of it since the request arrived, less a margin that keeps
/// the daemon's answer ahead of tonic's timer. A request stamped by no
/// [`Arrival`] (one a peer forwarded over a link, whose deadline travelled
/// in the envelope) counts from now.
pub fn answer_within(metadata: &MetadataMap, extensions: &tonic::Extensions) -> Option<Duration> {
    match extensions.get::<ArrivedDeadline>() {
        Some(ArrivedDeadline(at)) => {
            Some(at.saturating_duration_since(tokio::time::Instant::now()))
        }
        None => grpc_timeout(metadata).map(less_margin),
    }
}

/// The part of a deadline the daemon answers within. Enough to be ahead of
/// tonic's timer; small, because every hop of a call chain takes it off
/// again.
fn less_margin(timeout: Duration) -> Duration {
    let margin = (timeout / 100).clamp(Duration::from_millis(1), Duration::from_millis(10));
    timeout.saturating_sub(margin)
}

/// The caller's deadline from the `grpc-timeout` header ("100m", "5S", ...).
pub fn grpc_timeout(metadata: &MetadataMap) -> Option<Duration> {
    let value = metadata.get("grpc-timeout")?.to_str().ok()?;
    header_timeout(value)
}

fn header_timeout(value: &str) -> Option<Duration> {
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// A service whose requests with a deadline carry it as an
/// [`ArrivedDeadline`], stamped in the same call in which tonic's server
/// starts its timer. Requests without one pay a header lookup.
#[derive(Debug, Clone)]
pub struct Arrival<S> {
    inner: S,
}

impl<S> Arrival<S> {
    pub fn new(inner: S) -> Self {
        Self { inner }
    }
}

impl<S, B> Service<http::Request<B>> for Arrival<S>
where
    S: Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let timeout = request
            .headers()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(header_timeout);
        if let Some(timeout) = timeout {
            // A deadline too far to represent is no deadline to stamp.
            if let Some(at) = tokio::time::Instant::now().checked_add(less_margin(timeout)) {
                request.extensions_mut().insert(ArrivedDeadline(at));
            }
        }
        self.inner.call(request)
    }
}

impl<S: NamedService> NamedService for Arrival<S> {
    const NAME: &'static str = S::NAME;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_reads_in_every_unit() {
        assert_eq!(header_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(header_timeout("3M"), Some(Duration::from_secs(180)));
        assert_eq!(header_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(header_timeout("100m"), Some(Duration::from_millis(100)));
        assert_eq!(header_timeout("7u"), Some(Duration::from_micros(7)));
        assert_eq!(header_timeout("9n"), Some(Duration::from_nanos(9)));
        for bad in ["", "m", "5", "5x", "-5m", "99999999999999999999999S"] {
            assert_eq!(header_timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_margin_is_one_percent_between_1_and_10_ms() {
        let ms = Duration::from_millis;
        assert_eq!(less_margin(ms(50)), ms(49));
        assert_eq!(less_margin(ms(300)), ms(297));
        assert_eq!(
            less_margin(Duration::from_secs(60)),
            Duration::from_secs(60) - ms(10)
        );
        assert_eq!(less_margin(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn a_stamped_deadline_counts_from_arrival() {
        let mut metadata = MetadataMap::new();
        metadata.insert(
            "grpc-timeout",
            tonic::metadata::MetadataValue::from_static("300m"),
        );
        let stamped = |at| {
            let mut extensions = tonic::Extensions::new();
            extensions.insert(ArrivedDeadline(at));
            answer_within(&metadata, &extensions)
        };
        // Arrived 250 ms ago with 297 ms to answer: at most 47 ms are left.
        let now = tokio::time::Instant::now();
        let left = stamped(now + Duration::from_millis(47)).unwrap_or_default();
        assert!(
            left <= Duration::from_millis(47) && left > Duration::ZERO,
            "{left:?}"
        );
        // Past: nothing.
        let past = now.checked_sub(Duration::from_millis(1)).unwrap_or(now);
        assert_eq!(stamped(past), Some(Duration::ZERO));
        // Unstamped (forwarded by a peer): from now.
        assert_eq!(
            answer_within(&metadata, &tonic::Extensions::new()),
            Some(Duration::from_millis(297))
        );
    }
}
