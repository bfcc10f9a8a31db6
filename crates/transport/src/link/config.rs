//! How links to peers are laid out and sized: the protocol, which channels,
//! how many connections each, HTTP/2 windows, chunking and queue bounds.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use tonic::metadata::AsciiMetadataValue;

use super::wire::Framing;

/// Which channels a daemon opens to each peer, and how many connections
/// each has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelPlan {
    /// Everything on one channel of this many connections, messages sent
    /// whole (no chunking): the layout of a plain gRPC client, kept to
    /// measure the others against.
    Single(usize),
    /// Small calls and replies on `call`, payloads from the bulk threshold
    /// on, chunked, on `bulk`.
    Split { call: usize, bulk: usize },
}

impl Default for ChannelPlan {
    fn default() -> Self {
        Self::Split { call: 2, bulk: 4 }
    }
}

/// Why a `--peer-channels` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid peer channel plan {given:?}: {reason}; expected e.g. 'call=2,bulk=4' (control=1 may \
     be given too) or 'single=N' (everything on N connections, no chunking), with 1 to 64 \
     connections each"
)]
pub struct ChannelPlanError {
    pub given: String,
    pub reason: String,
}

/// The most connections one channel may have to one peer.
const MAX_CONNECTIONS: usize = 64;

impl FromStr for ChannelPlan {
    type Err = ChannelPlanError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let refuse = |reason: String| ChannelPlanError {
            given: text.to_owned(),
            reason,
        };
        let (mut single, mut call, mut bulk) = (None, None, None);
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, count) = part
                .split_once('=')
                .ok_or_else(|| refuse(format!("'{part}' is not NAME=COUNT")))?;
            let count: usize = count
                .trim()
                .parse()
                .map_err(|_| refuse(format!("'{}' is not a number", count.trim())))?;
            if !(1..=MAX_CONNECTIONS).contains(&count) {
                return Err(refuse(format!("{count} connections for {name}")));
            }
            match name.trim() {
                "single" => single = Some(count),
                "call" => call = Some(count),
                "bulk" => bulk = Some(count),
                // Membership and hand-off have their own connection (the
                // placement channel): one, never shared with data.
                "control" if count == 1 => {}
                "control" => return Err(refuse("control has exactly one connection".into())),
                other => return Err(refuse(format!("unknown channel '{other}'"))),
            }
        }
        let default = Self::default();
        match (single, call, bulk) {
            (Some(n), None, None) => Ok(Self::Single(n)),
            (Some(_), _, _) => Err(refuse(
                "'single' cannot be combined with call or bulk".into(),
            )),
            (None, None, None) => Err(refuse("no channel given".into())),
            (None, call, bulk) => {
                let Self::Split {
                    call: default_call,
                    bulk: default_bulk,
                } = default
                else {
                    return Err(refuse("no default split".into()));
                };
                Ok(Self::Split {
                    call: call.unwrap_or(default_call),
                    bulk: bulk.unwrap_or(default_bulk),
                })
            }
        }
    }
}

impl std::fmt::Display for ChannelPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Single(n) => write!(f, "single={n}"),
            Self::Split { call, bulk } => write!(f, "control=1,call={call},bulk={bulk}"),
        }
    }
}

/// How a link's stream travels. A daemon answers both on its one port, so
/// this only picks what it dials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LinkProtocol {
    /// Frames written straight on the connection (`frames_io`).
    #[default]
    Framed,
    /// A `PeerLink.Open` call on an HTTP/2 connection: what a plain gRPC
    /// client would do, kept as the baseline. (Framed dials fall back to it
    /// by themselves for a peer that predates framed links.)
    Grpc,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid peer protocol {given:?}: expected 'framed' (the default: frames straight on each \
     connection) or 'grpc' (a PeerLink.Open call per connection, as a plain gRPC client would)"
)]
pub struct LinkProtocolError {
    pub given: String,
}

impl FromStr for LinkProtocol {
    type Err = LinkProtocolError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim() {
            "framed" => Ok(Self::Framed),
            "grpc" => Ok(Self::Grpc),
            _ => Err(LinkProtocolError {
                given: text.to_owned(),
            }),
        }
    }
}

impl std::fmt::Display for LinkProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Framed => "framed",
            Self::Grpc => "grpc",
        })
    }
}

/// HTTP/2 flow-control windows of the connections a daemon opens (under
/// the `grpc` protocol; framed links leave flow control to TCP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// The HTTP/2 library's defaults.
    Default,
    /// Grown to the measured bandwidth-delay product of each connection.
    Auto,
    /// This many bytes, per stream and per connection.
    Fixed(u32),
}

/// The default window: 16 MiB lets one connection carry 800 MB/s at 20 ms
/// RTT, so a few bulk connections fill a 1 Gbit/s link with room to spare.
/// Chosen over `Auto` by `bench/transport.sh` (8 MiB echoes at 20 ms, 1
/// Gbit/s): 87-88 % of the link against 85 % with 16 pairs, 86 % against
/// 69 % with 128 pairs (and a queue that holds them), where the adaptive
/// window, which starts at 64 KiB and grows with ping samples, lagged
/// behind deep queues. The window only
/// bounds what a peer may send before this daemon reads it, and a link
/// reader reads at once.
pub const DEFAULT_WINDOW: u32 = 16 * 1024 * 1024;

impl Default for Window {
    fn default() -> Self {
        Self::Fixed(DEFAULT_WINDOW)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid peer window {given:?}: expected 'auto' (sized to the link), 'default' (the HTTP/2 \
     library's) or a size in bytes from 65535 to 2147483647"
)]
pub struct WindowError {
    pub given: String,
}

impl FromStr for Window {
    type Err = WindowError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim() {
            "auto" => Ok(Self::Auto),
            "default" => Ok(Self::Default),
            bytes => bytes
                .parse::<u32>()
                .ok()
                .filter(|b| (65_535..=2_147_483_647).contains(b))
                .map(Self::Fixed)
                .ok_or_else(|| WindowError {
                    given: text.to_owned(),
                }),
        }
    }
}

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Default => f.write_str("default"),
            Self::Auto => f.write_str("auto"),
            Self::Fixed(bytes) => write!(f, "{bytes}"),
        }
    }
}

/// Settings of the links a daemon keeps to its peers.
#[derive(Debug, Clone)]
pub struct LinksConfig {
    /// This daemon's node name, told to peers when a stream opens.
    pub node: String,
    pub protocol: LinkProtocol,
    pub channels: ChannelPlan,
    pub window: Window,
    /// Payloads from this size on travel on the bulk channel.
    pub bulk_threshold: usize,
    /// Messages larger than this are cut into pieces of this size.
    pub chunk_bytes: usize,
    /// Bytes one channel may hold queued for one peer; a request beyond
    /// gets RESOURCE_EXHAUSTED.
    pub queue_bytes: usize,
    /// The largest message sent or accepted whole.
    pub max_message_bytes: usize,
    pub connect_timeout: Duration,
    pub keep_alive_interval: Duration,
    pub keep_alive_timeout: Duration,
    /// Bound on a request without a deadline of its own.
    pub default_timeout: Duration,
    /// Sent when a stream opens, for peers that require a token.
    pub authorization: Option<Authorization>,
    /// TLS to peers (mutual: this daemon's certificate presented, a
    /// cluster member's expected); `None`: plaintext.
    pub tls: Option<troupe_tls::Connector>,
}

/// The `authorization` metadata a daemon presents to its peers (`Bearer
/// <token>`), asked for each time a stream opens, so a rotated token is
/// presented from the next connection on. Its `Debug` never shows it.
#[derive(Clone)]
pub struct Authorization(Arc<dyn Fn() -> Option<AsciiMetadataValue> + Send + Sync>);

impl Authorization {
    /// The value `current` gives when a stream opens (`None`: send none).
    pub fn new(current: impl Fn() -> Option<AsciiMetadataValue> + Send + Sync + 'static) -> Self {
        Self(Arc::new(current))
    }

    /// Always `value`.
    pub fn fixed(value: AsciiMetadataValue) -> Self {
        Self::new(move || Some(value.clone()))
    }

    pub fn current(&self) -> Option<AsciiMetadataValue> {
        (self.0)()
    }
}

impl std::fmt::Debug for Authorization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authorization(<redacted>)")
    }
}

impl Default for LinksConfig {
    fn default() -> Self {
        Self {
            node: String::new(),
            protocol: LinkProtocol::default(),
            channels: ChannelPlan::default(),
            window: Window::default(),
            bulk_threshold: 64 * 1024,
            chunk_bytes: 128 * 1024,
            queue_bytes: 256 * 1024 * 1024,
            max_message_bytes: 8 * 1024 * 1024 + 64 * 1024,
            connect_timeout: Duration::from_secs(2),
            keep_alive_interval: Duration::from_secs(10),
            keep_alive_timeout: Duration::from_secs(5),
            default_timeout: Duration::from_secs(60),
            authorization: None,
            tls: None,
        }
    }
}

impl LinksConfig {
    /// How this daemon's link streams cut frames (both directions use the
    /// sender's own).
    pub(crate) fn framing(&self) -> Framing {
        Framing {
            chunk_bytes: match self.channels {
                ChannelPlan::Single(_) => None,
                ChannelPlan::Split { .. } => Some(self.chunk_bytes.max(1024)),
            },
            frame_bytes: self.chunk_bytes.max(1024).saturating_mul(2),
        }
    }

    /// The largest frame a framed connection accepts: a whole message (a
    /// single-channel plan sends them uncut) beside a frame's worth more.
    pub(crate) fn frame_limit(&self) -> usize {
        self.max_message_bytes
            .saturating_add(self.framing().frame_bytes)
            .saturating_add(64 * 1024)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_read_back() -> Result<(), ChannelPlanError> {
        for text in ["single=1", "single=16", "control=1,call=2,bulk=4"] {
            assert_eq!(text.parse::<ChannelPlan>()?.to_string(), text);
        }
        assert_eq!(
            "bulk=8".parse::<ChannelPlan>()?,
            ChannelPlan::Split { call: 2, bulk: 8 }
        );
        Ok(())
    }

    #[test]
    fn bad_plans_say_why() {
        for bad in [
            "",
            "single=0",
            "call=65",
            "single=1,call=2",
            "fast=2",
            "call",
            "control=2",
        ] {
            assert!(bad.parse::<ChannelPlan>().is_err(), "{bad}");
        }
    }

    #[test]
    fn protocols_read_back() {
        for protocol in [LinkProtocol::Framed, LinkProtocol::Grpc] {
            assert_eq!(protocol.to_string().parse(), Ok(protocol));
        }
        assert!("h2".parse::<LinkProtocol>().is_err());
    }

    #[test]
    fn windows_read_back() {
        assert_eq!("auto".parse(), Ok(Window::Auto));
        assert_eq!("default".parse(), Ok(Window::Default));
        assert_eq!("4194304".parse(), Ok(Window::Fixed(4_194_304)));
        assert!("12".parse::<Window>().is_err());
    }
}
