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
//! and never reach logs, errors or status output; each is named by its
//! place instead (`token_use`), which is how status, `/metrics` and the
//! audit trail tell them apart.

use std::path::PathBuf;

use troupe_transport::link::Authorization;

mod bearer;
mod guard;
mod read_only;
mod refusals;
mod token_use;
mod tokens;

pub use bearer::{bearer_value, BearerToken, UnsendableToken};
pub use guard::{Caller, Guard};
pub use read_only::Stamped;
pub use refusals::{Reason, Refusals};
pub use token_use::{encode as encode_token_use, Place, Source, TokenUsage};
pub use tokens::{Tokens, MIN_TOKEN_CHARS};

/// The metadata key tokens travel in, as gRPC clients send them.
pub const AUTHORIZATION: &str = "authorization";

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

    /// `api`, `app` or `read`, as status and `/metrics` name it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Api => "api",
            Self::App => "app",
            Self::Read => "read",
        }
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
    /// Refuse tokens shorter than [`MIN_TOKEN_CHARS`]: set where they
    /// guard a listener other machines reach, which a guesser can try
    /// them from. A file that gains one is not taken (its tokens before
    /// stay); at the start, the daemon does not start.
    pub refuse_short: bool,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSource")
            .field("credential", &self.credential)
            .field("inline_tokens", &self.inline.len())
            .field("file", &self.file)
            .field("refuse_short", &self.refuse_short)
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
    #[error(
        "{place} is {chars} characters, and this daemon can be reached from other machines, \
         where a token under {MIN_TOKEN_CHARS} characters falls to guessing; replace it with 32 \
         random bytes (head -c 32 /dev/urandom | base64), listen on a loopback address, or pass \
         --insecure if only trusted callers can reach it"
    )]
    TooShort { place: Place, chars: usize },
}

#[cfg(test)]
mod tests;
