//! Who may call the daemon: the client/admin API token and the app token,
//! sent as `authorization: Bearer <token>` metadata and checked by a tonic
//! interceptor in front of each service.
//!
//! Two credentials, so that a process holding the client token cannot
//! register as an app and take a type's calls; and a third, optional, the
//! read-only token, for dashboards and people who inspect but must not
//! change anything (`read_only`). Each accepts several tokens
//! at once (for rotation), from the environment (`TROUPE_API_TOKEN`,
//! `TROUPE_APP_TOKEN`, as the CLI and SDKs read them) and from files named
//! by flags, one token per line; a file is read again when it changes.
//! Tokens are kept only as SHA-256 digests and compared in constant time,
//! and never reach logs, errors or status output.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tonic::metadata::MetadataMap;
use tonic::Status;
use tracing::{info, warn};
use troupe_transport::link::Authorization;

mod bearer;
mod guard;
mod read_only;
mod refusals;

pub use bearer::{bearer_value, BearerToken, UnsendableToken};
pub use guard::{Caller, Guard};
pub use read_only::Stamped;
pub use refusals::{Reason, Refusals};

/// The metadata key tokens travel in, as gRPC clients send them.
pub const AUTHORIZATION: &str = "authorization";

/// How often token files are looked at for changes.
const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// Which credential a service wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    /// Clients and the CLI: `ActorClient`, `Admin`, reflection, and daemons
    /// forwarding to each other.
    Api,
    /// Apps hosting actors: `AppHost`.
    App,
    /// Inspection only: the `READ_ONLY_METHODS` of `Admin` and
    /// `ActorClient`, reflection, and `/metrics`.
    Read,
}

impl Credential {
    pub fn env_var(self) -> &'static str {
        match self {
            Self::Api => "TROUPE_API_TOKEN",
            Self::App => "TROUPE_APP_TOKEN",
            Self::Read => "TROUPE_READ_TOKEN",
        }
    }

    pub fn flag(self) -> &'static str {
        match self {
            Self::Api => "--api-token-file",
            Self::App => "--app-token-file",
            Self::Read => "--read-token-file",
        }
    }

    /// The tokens in this credential's environment variable.
    pub fn env_tokens(self) -> Vec<String> {
        std::env::var(self.env_var())
            .map(|text| parse_tokens(&text))
            .unwrap_or_default()
    }

    fn what(self) -> &'static str {
        match self {
            Self::Api => "the client API token",
            Self::App => "the app token",
            Self::Read => "the read-only token",
        }
    }
}

/// Where one credential's tokens come from. Its `Debug` names the file and
/// counts the tokens; it never shows one.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenSource {
    pub credential: Credential,
    /// Tokens given in the environment.
    pub inline: Vec<String>,
    pub file: Option<PathBuf>,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSource")
            .field("credential", &self.credential)
            .field("inline_tokens", &self.inline.len())
            .field("file", &self.file)
            .finish()
    }
}

impl TokenSource {
    /// The tokens in the file, if one is named.
    fn file_tokens(&self) -> Result<Option<Vec<String>>, TokenError> {
        let Some(path) = &self.file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path).map_err(|source| TokenError::Unreadable {
            path: path.clone(),
            flag: self.credential.flag(),
            source,
        })?;
        Ok(Some(parse_tokens(&text)))
    }

    /// The first token given: the environment's, else the file's.
    fn first_token(&self) -> Result<Option<String>, TokenError> {
        if let Some(token) = self.inline.first() {
            return Ok(Some(token.clone()));
        }
        Ok(self
            .file_tokens()?
            .and_then(|tokens| tokens.into_iter().next()))
    }
}

/// Why this daemon cannot present its API token to its peers.
#[derive(Debug, thiserror::Error)]
pub enum PeerTokenError {
    #[error(transparent)]
    Token(#[from] TokenError),
    #[error(transparent)]
    Unsendable(#[from] UnsendableToken),
}

/// What this daemon presents to its peers: the source's first token, read
/// again at each new connection, so moving a new token to the top of the
/// file rotates what peers see without a restart. Read once here too, so a
/// token that cannot be sent stops the start; later, a file that cannot be
/// read or is empty for a moment keeps the token it gave before.
pub fn peer_authorization(source: TokenSource) -> Result<Authorization, PeerTokenError> {
    let what = source.credential.env_var();
    let first = source
        .first_token()?
        .map(|token| bearer_value(&token, what))
        .transpose()?;
    let last = parking_lot::Mutex::new(first);
    Ok(Authorization::new(move || {
        let fresh = source
            .first_token()
            .ok()
            .flatten()
            .and_then(|token| bearer_value(&token, what).ok());
        let mut last = last.lock();
        if fresh.is_some() {
            *last = fresh;
        }
        last.clone()
    }))
}

/// Tokens from text: one per line or separated by commas; blank lines and
/// lines starting with `#` are skipped, surrounding spaces trimmed.
pub fn parse_tokens(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.starts_with('#'))
        .flat_map(|line| line.split(','))
        .map(str::trim)
        .filter(|token| !token.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Why tokens could not be had.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read the token file {path} ({source}); check the path given to {flag}")]
    Unreadable {
        path: PathBuf,
        flag: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{flag} {path} holds no token; put one token per line (several while rotating)")]
    Empty { path: PathBuf, flag: &'static str },
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

/// The digests a credential accepts now.
#[derive(Default)]
struct Accepted {
    digests: Vec<[u8; 32]>,
}

impl Accepted {
    /// Compares against every accepted digest, without stopping at a match,
    /// so the time taken says nothing about which token (or how much of one)
    /// was right.
    fn accepts(&self, token: &[u8]) -> bool {
        let given = digest(token);
        let mut any = subtle::Choice::from(0);
        for accepted in &self.digests {
            any |= accepted.ct_eq(&given);
        }
        any.into()
    }
}

/// One credential's accepted tokens, reloaded from its file when it changes.
pub struct Tokens {
    source: TokenSource,
    accepted: ArcSwap<Accepted>,
    /// The file as it was just before it was first read: a change after
    /// that, even before the watcher first looks, is one to read.
    loaded: Option<FileStamp>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("source", &self.source)
            .finish()
    }
}

/// A file's identity and version, to notice a change (also a replacement by
/// rename, as Kubernetes updates mounted secrets).
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
    #[cfg(unix)]
    inode: u64,
}

fn stamp(path: &Path) -> Option<FileStamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(FileStamp {
        modified: meta.modified().ok(),
        len: meta.len(),
        #[cfg(unix)]
        inode: std::os::unix::fs::MetadataExt::ino(&meta),
    })
}

impl Tokens {
    /// Reads the source once; fails when its file cannot be read or holds
    /// no token, so a daemon never starts believing it is protected when
    /// it is not.
    pub fn load(source: TokenSource) -> Result<Arc<Self>, TokenError> {
        let loaded = source.file.as_deref().and_then(stamp);
        let accepted = Self::read(&source)?;
        Ok(Arc::new(Self {
            source,
            accepted: ArcSwap::from_pointee(accepted),
            loaded,
        }))
    }

    fn read(source: &TokenSource) -> Result<Accepted, TokenError> {
        let mut tokens = source.inline.clone();
        if let (Some(path), Some(from_file)) = (&source.file, source.file_tokens()?) {
            if from_file.is_empty() {
                return Err(TokenError::Empty {
                    path: path.clone(),
                    flag: source.credential.flag(),
                });
            }
            tokens.extend(from_file);
        }
        Ok(Accepted {
            digests: tokens.iter().map(|t| digest(t.as_bytes())).collect(),
        })
    }

    /// The credential these tokens are.
    pub fn credential(&self) -> Credential {
        self.source.credential
    }

    /// How many tokens are accepted now (for the startup log).
    pub fn count(&self) -> usize {
        self.accepted.load().digests.len()
    }

    /// Looks at the file every second and takes its tokens when it changed.
    /// A file that became unreadable or empty keeps the tokens it had (and
    /// says so): a half-written rotation must not lock everyone out.
    pub fn watch(self: &Arc<Self>) -> Option<tokio::task::JoinHandle<()>> {
        let path = self.source.file.clone()?;
        let mut seen = self.loaded.clone();
        let tokens = Arc::downgrade(self);
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(RELOAD_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(tokens) = tokens.upgrade() else {
                    return;
                };
                let now = stamp(&path);
                if now == seen {
                    continue;
                }
                seen = now;
                match Self::read(&tokens.source) {
                    Ok(accepted) => {
                        let count = accepted.digests.len();
                        tokens.accepted.store(Arc::new(accepted));
                        info!(file = %path.display(), tokens = count, "token file changed: reloaded");
                    }
                    Err(error) => warn!(
                        %error,
                        "token file changed but cannot be used; keeping the tokens it held before"
                    ),
                }
            }
        }))
    }

    /// Whether `metadata` carries one of the accepted tokens; the status to
    /// answer otherwise.
    pub fn check(&self, metadata: &MetadataMap) -> Result<(), Status> {
        let credential = self.source.credential;
        let Some(value) = metadata.get(AUTHORIZATION) else {
            return Err(Status::unauthenticated(format!(
                "this daemon requires {}: send the metadata `authorization: Bearer <token>` with a \
                 token the daemon accepts (the troupe CLI and SDKs send {} from the environment; \
                 the daemon takes it from {} or {})",
                credential.what(),
                credential.env_var(),
                credential.env_var(),
                credential.flag()
            )));
        };
        let token = value
            .as_bytes()
            .strip_prefix(b"Bearer ")
            .or_else(|| value.as_bytes().strip_prefix(b"bearer "));
        let Some(token) = token else {
            return Err(Status::unauthenticated(format!(
                "the authorization metadata is not `Bearer <token>`; send {} as `Bearer <token>`",
                credential.what()
            )));
        };
        if self.accepted.load().accepts(token.trim_ascii()) {
            return Ok(());
        }
        Err(Status::unauthenticated(format!(
            "the token sent is not {} this daemon accepts; use the value of {} or of the file \
             given to {} on the daemon (an app token is not a client token, nor the reverse)",
            credential.what(),
            credential.env_var(),
            credential.flag()
        )))
    }
}

#[cfg(test)]
mod tests;
