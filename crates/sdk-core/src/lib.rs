//! The wire half of a Troupe SDK, shared by every language binding.
//!
//! A language layer (`crates/sdk-python` for Python, `crates/sdk-node` for
//! TypeScript) keeps what is particular to its language: actor classes, state
//! objects, payload encoding, tracing spans, errors as its users know them.
//! Everything between that layer and the daemon lives here, as plain data (the `troupe.v1` messages of
//! `troupe-proto`) and callbacks:
//!
//! - [`connect`]: one HTTP/2 channel per client or app, with TLS and the
//!   receive limit the SDK was given (`ConnectOptions`), dialled through
//!   `troupe-coalesce` so that a call's frames leave in one TCP write.
//! - [`app`]: the `AppHost.Attach` stream. [`app::attach`] sends `Register`,
//!   waits for `Registered` (or the status refusing it), then hands every
//!   message the daemon pushes, batches flattened, to a callback, and writes
//!   the answers the layer sends through [`app::AppSender`], batched as the
//!   daemon allows ([`batch`]).
//! - [`reconnect`]: keeping the app attached: [`reconnect::AppSession`]
//!   re-opens the stream after a jittered backoff whenever it ends, asks the
//!   layer for each attempt's credentials (token, TLS files read again), and
//!   ends only when stopped or refused for good; each registration is a new
//!   generation, and answers of a lost one are dropped.
//! - [`client`]: `ActorClient.Invoke` and `Tell` with a deadline and call
//!   metadata (trace context, token), each with its idempotency key
//!   ([`key`]: the caller's, checked, else a fresh UUID) and resent with it
//!   on UNAVAILABLE, and on a refusal the daemon marks with a pushback, while
//!   the deadline leaves time ([`retry`]: the policy,
//!   and [`retry::Retried`], what a layer needs to tell its users how often
//!   a failed call was retried); and the rarer client RPCs (state reads,
//!   reminders, alarms, timers) as serialized messages ([`unary`]), so a
//!   layer on this core needs no gRPC library for its calls.
//!
//! What stays in the language layer: reading the credentials' files (the
//! session asks for them before each attempt), and the words of the errors
//! and log lines its users read, from what the core reports (which outage is
//! the first, how often a call was retried).

pub mod app;
pub mod batch;
pub mod client;
pub mod connect;
mod error;
pub mod key;
pub mod reconnect;
pub mod retry;
pub mod runtime;
pub mod unary;

pub use error::{AttachError, CallError, ConnectError};
pub use runtime::runtime;
pub use troupe_proto::v1 as proto;

/// The factor every pause between attempts is jittered by (re-opening the
/// app stream, resending a refused call), as the SDKs' fallback cores draw
/// it, so that many clients of a restarted daemon do not come back in
/// lockstep.
pub(crate) const JITTER: std::ops::RangeInclusive<f64> = 0.8..=1.2;
