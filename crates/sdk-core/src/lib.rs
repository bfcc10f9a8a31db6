//! The wire half of a Troupe SDK, shared by every language binding.
//!
//! A language layer (`crates/sdk-python` for Python, `crates/sdk-node` for
//! TypeScript) keeps what is particular to its language: actor classes, state
//! objects, payload encoding, tracing spans, errors as its users know them. Everything between that layer and
//! the daemon lives here, as plain data (the `troupe.v1` messages of
//! `troupe-proto`) and callbacks:
//!
//! - [`connect`]: one HTTP/2 channel per client or app, with TLS and the
//!   receive limit the SDK was given (`ConnectOptions`).
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
//!   metadata (trace context, token).
//!
//! What stays in the language layer for now: the log lines of an outage (the
//! session says which one is the first), reading the credentials' files,
//! retries of invoke and tell with their idempotency keys, and the rarer
//! client RPCs (state reads, reminders, alarms, timers).

pub mod app;
mod backoff;
pub mod batch;
pub mod client;
pub mod connect;
mod error;
pub mod reconnect;
pub mod runtime;

pub use error::{AttachError, CallError, ConnectError};
pub use runtime::runtime;
pub use troupe_proto::v1 as proto;
