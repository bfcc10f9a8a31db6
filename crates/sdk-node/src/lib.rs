//! The TypeScript SDK's native core: `troupe-sdk-core` as a Node-API addon
//! (`troupe.<platform>.node`), loaded by `sdks/typescript/src/core.ts`.
//!
//! The SDK's TypeScript layer keeps its ts-proto messages, actor classes and
//! promises; this addon moves the bytes. Messages cross as serialized
//! protobuf: one `Buffer` per message or per batch each way, decoded by
//! ts-proto's JIT-compiled code on the JS side and prost here, which is
//! cheaper than building JS objects field by field through Node-API calls.
//! Everything arrives on Node's event loop through a [`wake::Inbox`]: one
//! threadsafe-function call per burst, and the JS side takes the whole burst
//! at once. Calls into this module never block the event loop.
//!
//! - [`client::NativeClient`]: invoke and tell, answered in batches.
//! - [`session::NativeSession`]: one app stream (`AppHost.Attach`).

// napi-rs's macros expand to the unsafe FFI glue that is the point of the
// crate; the code written here has no unsafe block of its own.
#![allow(unsafe_code)]

mod client;
mod error;
mod session;
mod wake;

use std::sync::OnceLock;

use napi_derive::napi;
use troupe_sdk_core::connect::{ConnectOptions, TlsOptions};
use troupe_sdk_core::CallError;

pub use error::NodeError;

/// The one runtime of the process: a single worker is plenty for the
/// connections one JS thread can feed, and leaves the other cores to Node and
/// the daemon. `NativeSession::send` relies on there being one worker.
fn runtime() -> Result<&'static tokio::runtime::Runtime, NodeError> {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("troupe-sdk")
        .enable_all()
        .build()
        .map_err(NodeError::Runtime)?;
    // A racing first call built one too; the loser's is dropped unused.
    Ok(RUNTIME.get_or_init(|| rt))
}

/// How to reach the daemon, as the TypeScript layer passes it (TLS files
/// already read, so their errors name the SDK's options).
#[napi(object)]
// napi's Buffer has no Debug (and a TLS key must never reach a log line).
#[allow(missing_debug_implementations)]
pub struct NativeConnect {
    pub address: String,
    pub ca: Option<napi::bindgen_prelude::Buffer>,
    pub cert: Option<napi::bindgen_prelude::Buffer>,
    pub key: Option<napi::bindgen_prelude::Buffer>,
    pub max_receive_bytes: Option<u32>,
}

fn connect_options(given: NativeConnect) -> Result<ConnectOptions, NodeError> {
    let identity = match (given.cert, given.key) {
        (Some(cert), Some(key)) => Some((cert.to_vec(), key.to_vec())),
        (None, None) => None,
        _ => {
            return Err(NodeError::Options(
                "a client certificate needs its key, and back",
            ))
        }
    };
    let tls = match (given.ca, identity) {
        (Some(ca), identity) => Some(TlsOptions {
            ca: ca.to_vec(),
            identity,
        }),
        (None, None) => None,
        (None, Some(_)) => return Err(NodeError::Options("a client certificate needs a CA")),
    };
    Ok(ConnectOptions {
        address: given.address,
        tls,
        max_receive_bytes: given.max_receive_bytes.map(|n| n as usize),
    })
}

/// A status as the TypeScript layer turns it into a gRPC error: `code` is
/// gRPC's number, `trailers` flat (`[key, value, key, value, ...]`).
#[napi(object)]
#[derive(Debug)]
pub struct NativeStatus {
    pub code: i32,
    pub message: String,
    pub trailers: Vec<String>,
}

impl From<CallError> for NativeStatus {
    fn from(e: CallError) -> Self {
        Self {
            code: e.code as i32,
            message: e.message,
            trailers: e.trailers.into_iter().flat_map(|(k, v)| [k, v]).collect(),
        }
    }
}

/// Metadata as JS passes it, flat, into pairs; an odd count is a bug in the
/// layer, refused before anything is sent.
fn metadata_pairs(flat: Vec<String>) -> Result<Vec<(String, String)>, NodeError> {
    if flat.len() % 2 != 0 {
        return Err(NodeError::Options("metadata must be key, value pairs"));
    }
    let mut pairs = Vec::with_capacity(flat.len() / 2);
    let mut entries = flat.into_iter();
    while let (Some(k), Some(v)) = (entries.next(), entries.next()) {
        pairs.push((k, v));
    }
    Ok(pairs)
}
