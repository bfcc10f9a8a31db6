//! Plain data passed between callers, the runtime and hosts.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

mod call;

pub use call::*;

/// One virtual actor: its registered type and the caller-chosen id.
///
/// Both parts are reference-counted so a turn, a reply and the directory can
/// share them without copying strings on the hot path.
#[derive(Clone, PartialOrd, Ord)]
pub struct ActorId {
    pub ty: Arc<str>,
    pub id: Arc<str>,
}

impl PartialEq for ActorId {
    fn eq(&self, other: &Self) -> bool {
        // Callers that keep their ids (in-process hosts) pass the very same
        // strings; comparing pointers first skips touching the bytes.
        (Arc::ptr_eq(&self.id, &other.id) || self.id == other.id)
            && (Arc::ptr_eq(&self.ty, &other.ty) || self.ty == other.ty)
    }
}

impl Eq for ActorId {}

impl std::hash::Hash for ActorId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.ty.hash(state);
        self.id.hash(state);
    }
}

impl ActorId {
    pub fn new(ty: impl Into<Arc<str>>, id: impl Into<Arc<str>>) -> Self {
        Self {
            ty: ty.into(),
            id: id.into(),
        }
    }

    /// The hash the directory uses; must agree for equal (type, id) pairs
    /// however they are held.
    pub(crate) fn hash_parts<S: BuildHasher>(build: &S, ty: &str, id: &str) -> u64 {
        let mut h = build.build_hasher();
        h.write(ty.as_bytes());
        h.write_u8(0xff);
        h.write(id.as_bytes());
        h.finish()
    }
}

impl fmt::Debug for ActorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.ty, self.id)
    }
}

impl fmt::Display for ActorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.ty, self.id)
    }
}

/// How a payload's bytes are to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContentType {
    #[default]
    Json,
    Bytes,
}

/// Bytes passed through the daemon untouched.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Payload {
    pub data: Bytes,
    pub content_type: ContentType,
}

impl Payload {
    pub fn json(data: impl Into<Bytes>) -> Self {
        Self {
            data: data.into(),
            content_type: ContentType::Json,
        }
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// One key changed by a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateChange {
    pub key: String,
    /// `None` deletes the key.
    pub value: Option<Bytes>,
    /// With a value, the key's expiry (see the expiry module): `None` keeps the
    /// one it has, `Some(0)` ends it, `Some(ms)` sets it to that long after
    /// the change applies.
    pub ttl_ms: Option<u64>,
}

impl StateChange {
    pub fn set(key: impl Into<String>, value: impl Into<Bytes>) -> Self {
        Self {
            key: key.into(),
            value: Some(value.into()),
            ttl_ms: None,
        }
    }

    /// `set`, with the key expiring `ttl` after the change applies.
    pub fn set_expiring(key: impl Into<String>, value: impl Into<Bytes>, ttl: Duration) -> Self {
        Self {
            ttl_ms: Some(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)),
            ..Self::set(key, value)
        }
    }

    pub fn delete(key: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            value: None,
            ttl_ms: None,
        }
    }
}

/// An exception raised by actor code, carried back to the caller.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ActorFailure {
    pub ty: String,
    pub message: String,
    pub details: String,
    pub kind: FailureKind,
}

/// Whether the failed method ran, as the app's SDK says: the type name
/// cannot tell (a bug in a method and arguments that do not fit it are both
/// a `TypeError` in Python and JavaScript).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailureKind {
    /// An SDK that does not say.
    #[default]
    Unspecified,
    /// The method (or hook) ran and raised.
    Raised,
    /// The caller named a method the actor's type lacks; nothing ran.
    NoSuchMethod,
    /// The caller's arguments do not fit the method; nothing ran.
    BadArguments,
}

impl FailureKind {
    /// Its name on the wire (the `troupe-failure-kind` trailer); `None`
    /// when not said.
    pub fn name(self) -> Option<&'static str> {
        match self {
            Self::Unspecified => None,
            Self::Raised => Some("raised"),
            Self::NoSuchMethod => Some("no-such-method"),
            Self::BadArguments => Some("bad-arguments"),
        }
    }

    /// The kind named `name` (unknown names read as not said).
    pub fn from_name(name: &str) -> Self {
        match name {
            "raised" => Self::Raised,
            "no-such-method" => Self::NoSuchMethod,
            "bad-arguments" => Self::BadArguments,
            _ => Self::Unspecified,
        }
    }
}

impl fmt::Display for ActorFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.ty, self.message)
    }
}

/// What kind of work a turn does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TurnKind {
    #[default]
    Call,
    Reminder,
    Timer,
    Alarm,
}

impl TurnKind {
    /// Lower-case name, as in metric labels and span attributes.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnKind::Call => "call",
            TurnKind::Reminder => "reminder",
            TurnKind::Timer => "timer",
            TurnKind::Alarm => "alarm",
        }
    }
}

/// How an actor type's state reaches storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StateMode {
    /// Reply at once; flush dirty state in batches.
    #[default]
    WriteBehind,
    /// Hold the reply until the batch holding the turn's writes is stored.
    Durable,
}

/// Why an activation ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeactivateReason {
    Idle,
    Shutdown,
    Admin,
    Migration,
    /// A turn ran past the type's turn timeout; its handler may still run
    /// in the app, on an instance the daemon no longer uses.
    TurnTimeout,
    /// The daemon held more activations than `--max-activations`: the
    /// ones idle longest go before their idle timeout.
    Capacity,
    /// The daemon's memory neared its limit (`--memory-shed-percent`): the
    /// ones idle longest went to give memory back.
    Memory,
}

impl DeactivateReason {
    /// Lower-case name, as in metric labels and the activation log.
    pub fn as_str(self) -> &'static str {
        match self {
            DeactivateReason::Idle => "idle",
            DeactivateReason::Shutdown => "shutdown",
            DeactivateReason::Admin => "admin",
            DeactivateReason::Migration => "migration",
            DeactivateReason::TurnTimeout => "turn_timeout",
            DeactivateReason::Capacity => "capacity",
            DeactivateReason::Memory => "memory",
        }
    }
}

/// Per-type options as an app asks for them; `None` means the daemon default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TypeSpec {
    pub name: String,
    pub idle_timeout: Option<Duration>,
    pub max_mailbox: Option<usize>,
    pub reentrant: bool,
    pub state_mode: Option<StateMode>,
    pub readonly_methods: Vec<String>,
    /// Longest one turn may run before its caller gets DEADLINE_EXCEEDED
    /// and the actor is deactivated.
    pub turn_timeout: Option<Duration>,
    /// Calls of this type queued or running before RESOURCE_EXHAUSTED.
    pub max_pending_calls: Option<usize>,
    /// Tells sent without a delivery mode are durable (docs/delivery.md).
    pub durable_tells: bool,
    /// Erase an actor nothing reached for this long (`retention`).
    pub retention: Option<Duration>,
}

/// Per-type options in force, defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeOptions {
    pub name: Arc<str>,
    pub idle_timeout: Duration,
    pub max_mailbox: usize,
    pub reentrant: bool,
    pub state_mode: StateMode,
    pub readonly_methods: Vec<String>,
    pub turn_timeout: Duration,
    pub max_pending_calls: usize,
    pub durable_tells: bool,
    /// `None`: actors are kept until purged.
    pub retention: Option<Duration>,
}

pub type StateMap = HashMap<String, Bytes>;

/// A boxed future, so traits the binary implements (`Forwarder`) stay
/// object-safe.
pub type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// A read-only, cheaply cloned view of an actor's state at one moment.
///
/// Copy-on-write: the runtime clones the map only when it changes state while
/// a host still holds an older snapshot.
#[derive(Debug, Clone, Default)]
pub struct StateSnapshot(pub(crate) Option<Arc<StateMap>>);

impl StateSnapshot {
    pub fn get(&self, key: &str) -> Option<&Bytes> {
        self.0.as_ref()?.get(key)
    }

    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |m| m.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Bytes)> {
        self.0.iter().flat_map(|m| m.iter())
    }

    pub(crate) fn apply(&mut self, changes: &[StateChange]) {
        if changes.is_empty() {
            return;
        }
        let map = Arc::make_mut(self.0.get_or_insert_with(Default::default));
        for change in changes {
            match &change.value {
                Some(v) => {
                    map.insert(change.key.clone(), v.clone());
                }
                None => {
                    map.remove(&change.key);
                }
            }
        }
    }
}

impl FromIterator<(String, Bytes)> for StateSnapshot {
    fn from_iter<T: IntoIterator<Item = (String, Bytes)>>(iter: T) -> Self {
        let map: StateMap = iter.into_iter().collect();
        if map.is_empty() {
            Self(None)
        } else {
            Self(Some(Arc::new(map)))
        }
    }
}
