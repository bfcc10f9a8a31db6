//! Which of a credential's tokens are in use: each accepted token's place
//! (the environment variable or file it came from, and its position there),
//! how many requests it let in, and when and from where it last did. A
//! rotation ends by removing the old token, and removing one a client still
//! sends locks that client out: this is how an operator sees that nothing
//! presents it any more, or who still does, without the token or a digest
//! of it ever leaving the daemon.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Credential;

/// How finely the last acceptance is kept: within this, a token's use only
/// counts, so the requests it lets in do not all write the time and look up
/// their address.
const SAMPLE_EVERY_MS: u64 = 1_000;

/// Where a token is configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The credential's environment variable.
    Env(&'static str),
    /// The token file given by the credential's flag.
    File(Arc<Path>),
}

/// A token's place: its source and its position among that source's
/// tokens, from 1. Names the token without showing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub source: Source,
    pub position: u32,
}

impl Place {
    /// `env` or `file`, as `/metrics` labels the source.
    pub fn kind(&self) -> &'static str {
        match self.source {
            Source::Env(_) => "env",
            Source::File(_) => "file",
        }
    }

    /// The variable's name or the file's path.
    pub fn source_name(&self) -> String {
        match &self.source {
            Source::Env(name) => (*name).to_owned(),
            Source::File(path) => path.display().to_string(),
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "token {} of {}", self.position, self.source_name())
    }
}

/// One token's use since the daemon started. Shared by every place the
/// token has (the same token twice) and kept across a file's reloads for
/// as long as the token stays accepted.
#[derive(Debug, Default)]
pub(super) struct Use {
    accepted: AtomicU64,
    /// Unix ms of the last sampled acceptance; 0: none yet.
    last_ms: AtomicU64,
    /// Who was let in at `last_ms`, when known.
    last_from: Mutex<Option<SocketAddr>>,
}

impl Use {
    /// Counts one request let in; at most once per [`SAMPLE_EVERY_MS`] also
    /// notes when and from where (`from` is asked only then).
    pub(super) fn record(&self, from: impl FnOnce() -> Option<SocketAddr>) {
        self.accepted.fetch_add(1, Ordering::Relaxed);
        let now = unix_ms(SystemTime::now());
        let last = self.last_ms.load(Ordering::Relaxed);
        // Either way: a clock stepped back must not freeze the time shown.
        if last != 0 && now.abs_diff(last) < SAMPLE_EVERY_MS {
            return;
        }
        // One of the callers racing past the same `last` notes its own.
        if self
            .last_ms
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            *self.last_from.lock() = from();
        }
    }
}

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|since| u64::try_from(since.as_millis()).ok())
        .unwrap_or(0)
        // 0 means "never": a clock at the epoch still shows a use.
        .max(1)
}

/// One accepted token's use, as status and `/metrics` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenUsage {
    pub credential: Credential,
    pub place: Arc<Place>,
    /// Requests (and link connections) let in since the daemon started.
    pub accepted: u64,
    /// When one was last let in, in Unix ms to the second; `None`: not
    /// since start.
    pub last_accepted_unix_ms: Option<u64>,
    /// The address of a caller let in then, when known.
    pub last_from: Option<SocketAddr>,
    /// Shorter than `tokens::MIN_TOKEN_CHARS`: guessable.
    pub short: bool,
}

impl TokenUsage {
    pub(super) fn of(credential: Credential, place: Arc<Place>, usage: &Use, short: bool) -> Self {
        let last_ms = usage.last_ms.load(Ordering::Relaxed);
        Self {
            credential,
            place,
            accepted: usage.accepted.load(Ordering::Relaxed),
            last_accepted_unix_ms: (last_ms != 0).then_some(last_ms),
            last_from: *usage.last_from.lock(),
            short,
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    credential: &'static str,
    source: &'static str,
    position: String,
}

/// Appends each accepted token's last acceptance to `out` (OpenMetrics
/// text ending in `# EOF`), labelled by its place, never by the token: 0
/// until one, so a query for a token still in use finds the series.
pub fn encode(usage: &[TokenUsage], out: &mut String) -> fmt::Result {
    let family = Family::<Labels, Gauge>::default();
    for token in usage {
        let seconds = token
            .last_accepted_unix_ms
            .map_or(0, |ms| i64::try_from(ms / 1000).unwrap_or(i64::MAX));
        family
            .get_or_create(&Labels {
                credential: token.credential.label(),
                source: token.place.kind(),
                position: token.place.position.to_string(),
            })
            .set(seconds);
    }
    let mut registry = Registry::with_prefix("troupe");
    registry.register(
        "auth_token_last_accepted_timestamp_seconds",
        "When each accepted token last let a request in, to the second (0: not since the \
         daemon started), by credential (api, app, read), source (env, file) and position \
         there",
        family,
    );
    prometheus_client::encoding::text::encode(out, &registry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_use_and_samples_the_caller_once_a_second() {
        let usage = Use::default();
        let first: SocketAddr = ([10, 0, 0, 1], 4000).into();
        let second: SocketAddr = ([10, 0, 0, 2], 4000).into();
        usage.record(|| Some(first));
        let mut asked = false;
        usage.record(|| {
            asked = true;
            Some(second)
        });
        assert!(!asked, "the caller was looked up again within the second");
        let shown = TokenUsage::of(Credential::Api, Arc::new(env_place()), &usage, false);
        assert_eq!(shown.accepted, 2);
        assert_eq!(shown.last_from, Some(first));
        assert!(shown.last_accepted_unix_ms.is_some());
    }

    #[test]
    fn a_token_not_used_shows_no_time() {
        let shown = TokenUsage::of(
            Credential::App,
            Arc::new(env_place()),
            &Use::default(),
            true,
        );
        assert_eq!((shown.accepted, shown.last_accepted_unix_ms), (0, None));
    }

    #[test]
    fn a_place_names_its_source_and_position() {
        let place = Place {
            source: Source::File(Arc::from(Path::new("/etc/troupe/api-token"))),
            position: 2,
        };
        assert_eq!(place.to_string(), "token 2 of /etc/troupe/api-token");
        assert_eq!(place.kind(), "file");
        assert_eq!(env_place().to_string(), "token 1 of TROUPE_API_TOKEN");
    }

    fn env_place() -> Place {
        Place {
            source: Source::Env("TROUPE_API_TOKEN"),
            position: 1,
        }
    }
}
