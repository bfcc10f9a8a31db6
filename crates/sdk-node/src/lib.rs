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
//! - [`client::NativeClient`]: the client API's calls, answered in batches.
//! - [`session::NativeSession`]: one app stream (`AppHost.Attach`).

// napi-rs's macros expand to the unsafe FFI glue that is the point of the
// crate; the code written here has no unsafe block of its own.
#![allow(unsafe_code)]

mod client;
mod error;
mod session;
mod wake;

use napi_derive::napi;
use tonic::transport::Channel;
use troupe_sdk_core::connect::{self, ConnectOptions, TlsOptions};
use troupe_sdk_core::CallError;

pub use error::NodeError;

/// The process's SDK runtime (`troupe_sdk_core::runtime`).
fn runtime() -> Result<&'static tokio::runtime::Runtime, NodeError> {
    troupe_sdk_core::runtime().map_err(NodeError::Runtime)
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

/// A channel from the options the TypeScript layer passes: how its client
/// and its app session each connect.
fn channel(given: NativeConnect) -> Result<(Channel, ConnectOptions), NodeError> {
    let pem = |b: Option<napi::bindgen_prelude::Buffer>| b.map(|b| b.to_vec());
    let options = ConnectOptions {
        address: given.address,
        tls: TlsOptions::from_pems(pem(given.ca), pem(given.cert), pem(given.key))?,
        max_receive_bytes: given.max_receive_bytes.map(|n| n as usize),
    };
    let _entered = runtime()?.enter();
    let channel = connect::channel(&options)?;
    Ok((channel, options))
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
