//! The harnesses behind the fuzz targets in `fuzz_targets/`: each takes the
//! bytes libFuzzer made and hands them to the daemon's own code, the way
//! they would arrive from a socket or a user. A target must not panic on
//! any input; an error answer is fine. `docs/fuzzing.md` says which target
//! covers what and how to run them (`bench/fuzz.sh`).

// The included daemon modules were written for the binary, which uses all
// of them; here only the entry points the harnesses need are reached.
#![allow(dead_code, unused_imports, missing_debug_implementations)]

// The daemon's modules, compiled here from their own files. `troupe` is a
// binary crate, so no other crate can link them; including the files keeps
// the fuzzed code exactly the shipped code, with no copy to drift and no
// library target added to the binary only for fuzzing.
#[path = "../../crates/troupe/src/admin_api/mod.rs"]
mod admin_api;
#[path = "../../crates/troupe/src/app_api/mod.rs"]
mod app_api;
#[path = "../../crates/troupe/src/auth/mod.rs"]
mod auth;
#[path = "../../crates/troupe/src/call_deadline.rs"]
mod call_deadline;
#[path = "../../crates/troupe/src/client_api/mod.rs"]
mod client_api;
#[path = "../../crates/troupe/src/config/mod.rs"]
mod config;
#[path = "../../crates/troupe/src/convert/mod.rs"]
mod convert;
#[path = "../../crates/troupe/src/duration.rs"]
mod duration;
#[path = "../../crates/troupe/src/failpoint.rs"]
mod failpoint;
#[path = "../../crates/troupe/src/link_api.rs"]
mod link_api;
#[path = "../../crates/troupe/src/process_stats.rs"]
mod process_stats;
#[path = "../../crates/troupe/src/store_metrics.rs"]
mod store_metrics;
#[path = "../../crates/troupe/src/telemetry.rs"]
mod telemetry;
// The transport's framing is private to its crate; the file is pure (no
// sockets), so it is compiled here as well.
#[path = "../../crates/transport/src/link/wire.rs"]
mod wire;

pub mod app;
pub mod daemon;
pub mod input;
pub mod link;
pub mod link_framed;
pub mod rpc;
pub mod seeds;
pub mod values;
