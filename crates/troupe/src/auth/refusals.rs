//! The requests the guards refused: counted by service and reason for
//! `/metrics` (`troupe_auth_refused_total`), and logged at most once per
//! [`LOG_EVERY_MS`] with how many went unlogged since, so that an operator
//! sees a client left with a rotated-out token, or someone guessing, without
//! a log line per attempt to flood the log.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tonic::metadata::MetadataMap;
use tracing::warn;

use super::AUTHORIZATION;

/// The least time between two refusal warnings, in milliseconds.
const LOG_EVERY_MS: u64 = 10_000;

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// No `authorization` metadata (or header) at all.
    NoToken,
    /// A token that is none of those the service accepts, or not `Bearer`.
    BadToken,
    /// The read-only token, on a method that is not inspection.
    ReadOnly,
    /// Under mTLS, a link whose certificate names no cluster member.
    NotMember,
}

impl Reason {
    /// A token check failed on `metadata`: no token sent, or a wrong one.
    pub fn of_missing_or_wrong(metadata: &MetadataMap) -> Self {
        if metadata.contains_key(AUTHORIZATION) {
            Self::BadToken
        } else {
            Self::NoToken
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::NoToken => "no_token",
            Self::BadToken => "bad_token",
            Self::ReadOnly => "read_only",
            Self::NotMember => "not_member",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    service: &'static str,
    reason: &'static str,
}

/// Shared by every guard of a daemon and its metrics endpoint.
#[derive(Debug, Clone)]
pub struct Refusals(Arc<Inner>);

/// One service's refusals for one reason, since the daemon started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub service: &'static str,
    pub reason: Reason,
    pub count: u64,
}

#[derive(Debug)]
struct Inner {
    /// Rare (refusals only), and read by both `/metrics` and status.
    counts: Mutex<BTreeMap<(&'static str, Reason), u64>>,
    started: Instant,
    /// When the last warning was logged, in ms since `started`, plus one
    /// (0: never).
    logged_at: AtomicU64,
    /// Refusals since the last warning that it did not name.
    unlogged: AtomicU64,
}

impl Default for Refusals {
    fn default() -> Self {
        Self(Arc::new(Inner {
            counts: Mutex::default(),
            started: Instant::now(),
            logged_at: AtomicU64::new(0),
            unlogged: AtomicU64::new(0),
        }))
    }
}

impl Refusals {
    /// Counts one refusal by `service` (`client`, `admin`, `link`...) and
    /// logs it unless another was logged within [`LOG_EVERY_MS`].
    pub fn record(&self, service: &'static str, reason: Reason, from: Option<SocketAddr>) {
        let inner = &self.0;
        {
            let mut counts = inner.counts.lock();
            let count = counts.entry((service, reason)).or_default();
            *count = count.saturating_add(1);
        }
        let now = u64::try_from(inner.started.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        let last = inner.logged_at.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= LOG_EVERY_MS;
        // One of the callers racing past the same `last` logs.
        if !due
            || inner
                .logged_at
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            inner.unlogged.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let unlogged = inner.unlogged.swap(0, Ordering::Relaxed);
        let from = from.map_or_else(|| "unknown".to_owned(), |addr| addr.to_string());
        warn!(
            service,
            reason = reason.label(),
            from = %from,
            unlogged_since_last = unlogged,
            "refused a request for its credentials (troupe_auth_refused_total counts them all; \
             docs/security.md says which token each service wants)"
        );
    }

    /// Shows `service`'s refusals for `reasons` on `/metrics` at 0 until the
    /// first. A counter born at its first increment loses that increment to
    /// Prometheus's `rate()` and `increase()`, which need a sample before
    /// it: a lone refusal would never raise an alert on them.
    pub fn count_from_zero(&self, service: &'static str, reasons: &[Reason]) {
        let mut counts = self.0.counts.lock();
        for &reason in reasons {
            counts.entry((service, reason)).or_insert(0);
        }
    }

    /// Every service and reason refused so far, in a stable order.
    pub fn snapshot(&self) -> Vec<Refused> {
        let mut refused = self.all();
        refused.retain(|r| r.count > 0);
        refused
    }

    /// [`Refusals::snapshot`] with the expected ones not refused yet.
    fn all(&self) -> Vec<Refused> {
        self.0
            .counts
            .lock()
            .iter()
            .map(|(&(service, reason), &count)| Refused {
                service,
                reason,
                count,
            })
            .collect()
    }

    /// Appends the family to `out`, OpenMetrics text ending in `# EOF`.
    pub fn encode(&self, out: &mut String) -> std::fmt::Result {
        let family = Family::<Labels, Counter>::default();
        for refused in self.all() {
            family
                .get_or_create(&Labels {
                    service: refused.service,
                    reason: refused.reason.label(),
                })
                .inc_by(refused.count);
        }
        let mut registry = Registry::with_prefix("troupe");
        registry.register(
            "auth_refused",
            "Requests refused for their credentials, by service and reason (no_token, \
             bad_token, read_only, not_member)",
            family,
        );
        prometheus_client::encoding::text::encode(out, &registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_service_and_reason() {
        let refusals = Refusals::default();
        refusals.record("client", Reason::NoToken, None);
        refusals.record("client", Reason::NoToken, None);
        refusals.record("admin", Reason::ReadOnly, None);
        let mut out = String::new();
        assert!(refusals.encode(&mut out).is_ok());
        assert!(
            out.contains(r#"troupe_auth_refused_total{service="client",reason="no_token"} 2"#),
            "{out}"
        );
        assert!(
            out.contains(r#"troupe_auth_refused_total{service="admin",reason="read_only"} 1"#),
            "{out}"
        );
    }

    #[test]
    fn expected_refusals_show_at_zero_on_metrics_and_not_in_the_snapshot() {
        let refusals = Refusals::default();
        refusals.count_from_zero("client", &[Reason::NoToken, Reason::BadToken]);
        refusals.record("client", Reason::BadToken, None);
        let mut out = String::new();
        assert!(refusals.encode(&mut out).is_ok());
        assert!(
            out.contains(r#"troupe_auth_refused_total{service="client",reason="no_token"} 0"#),
            "{out}"
        );
        assert!(
            out.contains(r#"troupe_auth_refused_total{service="client",reason="bad_token"} 1"#),
            "{out}"
        );
        assert_eq!(
            refusals.snapshot(),
            vec![Refused {
                service: "client",
                reason: Reason::BadToken,
                count: 1
            }]
        );
    }

    #[test]
    fn the_snapshot_holds_what_metrics_show() {
        let refusals = Refusals::default();
        refusals.record("client", Reason::BadToken, None);
        refusals.record("admin", Reason::NoToken, None);
        refusals.record("client", Reason::BadToken, None);
        assert_eq!(
            refusals.snapshot(),
            vec![
                Refused {
                    service: "admin",
                    reason: Reason::NoToken,
                    count: 1
                },
                Refused {
                    service: "client",
                    reason: Reason::BadToken,
                    count: 2
                },
            ]
        );
    }

    #[test]
    fn logs_one_warning_per_interval_and_counts_the_rest() {
        let refusals = Refusals::default();
        for _ in 0..5 {
            refusals.record("link", Reason::NotMember, None);
        }
        // The first was logged; the four after it wait for the next warning.
        assert_eq!(refusals.0.unlogged.load(Ordering::Relaxed), 4);
    }
}
