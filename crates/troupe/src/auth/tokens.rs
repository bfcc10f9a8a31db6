//! One credential's accepted tokens: the check each request passes, the
//! file they are read from again when it changes, and each token's use.
//! Tokens are held as SHA-256 digests only, compared in constant time.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};
use tonic::metadata::MetadataMap;
use tonic::Status;
use tracing::{info, warn};

use super::token_use::Use;
use super::{Credential, Place, Source, TokenError, TokenSource, TokenUsage, AUTHORIZATION};

/// How often token files are looked at for changes.
const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// Tokens shorter than this are called out (a warning, status, `--check`),
/// and refused where other machines can reach the daemon
/// (`TokenSource::refuse_short`): a word or a short code falls to guessing,
/// where 16 random base64 characters (96 bits) do not.
pub const MIN_TOKEN_CHARS: usize = 16;

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

/// The digests a credential accepts now, each with its place and use.
#[derive(Default)]
struct Accepted {
    entries: Vec<Entry>,
}

struct Entry {
    digest: [u8; 32],
    place: Arc<Place>,
    usage: Arc<Use>,
    /// Under [`MIN_TOKEN_CHARS`]: within a guesser's reach.
    short: bool,
}

impl Accepted {
    /// The tokens in their places, keeping the use of those `before` held
    /// too (a reload that moves a token keeps what it counted).
    fn of(places: Vec<(String, Place)>, before: Option<&Accepted>) -> Self {
        let mut uses: HashMap<[u8; 32], Arc<Use>> = before
            .map(|b| {
                b.entries
                    .iter()
                    .map(|e| (e.digest, e.usage.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let entries = places
            .into_iter()
            .map(|(token, place)| {
                let digest = digest(token.as_bytes());
                Entry {
                    digest,
                    place: Arc::new(place),
                    usage: uses.entry(digest).or_default().clone(),
                    short: token.chars().count() < MIN_TOKEN_CHARS,
                }
            })
            .collect();
        Self { entries }
    }

    /// Warns of each short token by its place, never showing it.
    fn warn_short(&self, credential: Credential) {
        for entry in self.entries.iter().filter(|e| e.short) {
            warn!(
                credential = credential.label(),
                token = ?entry.place.to_string(),
                min_chars = MIN_TOKEN_CHARS,
                "a token is too short to resist brute force; replace it with 32 random bytes \
                 (head -c 32 /dev/urandom | base64), listed beside it while callers move over"
            );
        }
    }

    /// The entry `token` matches. Compares against every accepted digest,
    /// without stopping at a match, so the time taken says nothing about
    /// which token (or how much of one) was right.
    fn matching(&self, token: &[u8]) -> Option<&Entry> {
        let given = digest(token);
        let mut any = subtle::Choice::from(0);
        let mut found = 0u64;
        for (index, entry) in (0u64..).zip(&self.entries) {
            let equal = entry.digest.ct_eq(&given);
            found.conditional_assign(&index, equal);
            any |= equal;
        }
        if !bool::from(any) {
            return None;
        }
        self.entries.get(usize::try_from(found).ok()?)
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
        let accepted = Self::read(&source, None)?;
        accepted.warn_short(source.credential);
        Ok(Arc::new(Self {
            source,
            accepted: ArcSwap::from_pointee(accepted),
            loaded,
        }))
    }

    fn read(source: &TokenSource, before: Option<&Accepted>) -> Result<Accepted, TokenError> {
        let env = source.credential.env_var();
        let mut places: Vec<(String, Place)> = (1u32..)
            .zip(&source.inline)
            .map(|(position, token)| {
                let source = Source::Env(env);
                (token.clone(), Place { source, position })
            })
            .collect();
        if let (Some(path), Some(from_file)) = (&source.file, source.file_tokens()?) {
            if from_file.is_empty() {
                return Err(TokenError::Empty {
                    path: path.clone(),
                    flag: source.credential.flag(),
                });
            }
            let file: Arc<Path> = Arc::from(path.as_path());
            places.extend((1u32..).zip(from_file).map(|(position, token)| {
                let source = Source::File(file.clone());
                (token, Place { source, position })
            }));
        }
        if source.refuse_short {
            let short = places
                .iter()
                .map(|(token, place)| (token.chars().count(), place))
                .find(|(chars, _)| *chars < MIN_TOKEN_CHARS);
            if let Some((chars, place)) = short {
                return Err(TokenError::TooShort {
                    place: place.clone(),
                    chars,
                });
            }
        }
        Ok(Accepted::of(places, before))
    }

    /// The credential these tokens are.
    pub fn credential(&self) -> Credential {
        self.source.credential
    }

    /// How many tokens are accepted now (for the startup log).
    pub fn count(&self) -> usize {
        self.accepted.load().entries.len()
    }

    /// Each accepted token's use, in the order they are configured.
    pub fn usage(&self) -> Vec<TokenUsage> {
        let credential = self.source.credential;
        self.accepted
            .load()
            .entries
            .iter()
            .map(|e| TokenUsage::of(credential, e.place.clone(), &e.usage, e.short))
            .collect()
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
                match tokens.reload() {
                    Ok(count) => {
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

    /// Reads the source again and takes its tokens, keeping those it had
    /// when it cannot (see [`Tokens::watch`]); how many it holds now.
    pub(super) fn reload(&self) -> Result<usize, TokenError> {
        let before = self.accepted.load_full();
        let accepted = Self::read(&self.source, Some(&before))?;
        let count = accepted.entries.len();
        accepted.warn_short(self.source.credential);
        self.accepted.store(Arc::new(accepted));
        Ok(count)
    }

    /// Whether `metadata` carries one of the accepted tokens; the status to
    /// answer otherwise. Counts the token's use, asking `from` for the
    /// caller's address only when it is noted (once a second at most).
    pub fn check(
        &self,
        metadata: &MetadataMap,
        from: impl FnOnce() -> Option<SocketAddr>,
    ) -> Result<(), Status> {
        self.admit(metadata, |entry| entry.usage.record(from))
    }

    /// [`Tokens::check`], also naming the token that let the caller in.
    pub fn check_naming(
        &self,
        metadata: &MetadataMap,
        from: impl FnOnce() -> Option<SocketAddr>,
    ) -> Result<Arc<Place>, Status> {
        self.admit(metadata, |entry| {
            entry.usage.record(from);
            entry.place.clone()
        })
    }

    /// Whether `metadata` carries one of the accepted tokens, without
    /// counting it: for a request that is refused all the same.
    pub fn accepts(&self, metadata: &MetadataMap) -> bool {
        self.admit(metadata, |_| ()).is_ok()
    }

    /// `then` with the entry of the token `metadata` carries; the status
    /// to answer when there is none.
    fn admit<T>(
        &self,
        metadata: &MetadataMap,
        then: impl FnOnce(&Entry) -> T,
    ) -> Result<T, Status> {
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
        if let Some(entry) = self.accepted.load().matching(token.trim_ascii()) {
            return Ok(then(entry));
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
