//! `troupe._native`: the Python SDK on `troupe-sdk-core`.
//!
//! The SDK's Python layer (`sdks/python/src/troupe/_native_core.py`) keeps
//! its protobuf messages, actor classes and asyncio tasks; this module moves
//! the bytes. Messages cross as serialized protobuf (prost on this side, upb
//! on Python's: one C call each way, cheaper than building Python objects
//! field by field). Everything arrives on Python's event loop through an
//! [`inbox::Inbox`]: one wake-up per burst, no GIL taken off the loop's
//! thread. Calls into this module never block.
//!
//! - [`client::Client`]: invoke and tell, answered through its inbox.
//! - [`session::Session`]: one app stream (`AppHost.Attach`).

// PyO3's macros expand to the unsafe FFI glue that is the point of the crate;
// the code written here has no unsafe block of its own.
#![allow(unsafe_code)]

mod client;
mod inbox;
mod session;

use std::sync::OnceLock;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use troupe_sdk_core::connect::{ConnectOptions, TlsOptions};
use troupe_sdk_core::CallError;

/// The one runtime of the process: a single worker is plenty for the
/// connections one Python thread can feed, and leaves the cores to Python
/// and the daemon.
fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("troupe-sdk")
        .enable_all()
        .build()
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start the SDK's runtime: {e}")))?;
    // A racing first call built one too; the loser's is dropped unused.
    Ok(RUNTIME.get_or_init(|| rt))
}

/// The options every channel is built from, as the Python layer passes them.
fn connect_options(
    address: String,
    ca: Option<Vec<u8>>,
    cert: Option<Vec<u8>>,
    key: Option<Vec<u8>>,
    max_receive_bytes: Option<usize>,
) -> PyResult<ConnectOptions> {
    let identity = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => {
            return Err(PyValueError::new_err(
                "a client certificate needs its key, and back",
            ))
        }
    };
    let tls = match (ca, identity) {
        (Some(ca), identity) => Some(TlsOptions { ca, identity }),
        (None, None) => None,
        (None, Some(_)) => return Err(PyValueError::new_err("a client certificate needs a CA")),
    };
    Ok(ConnectOptions {
        address,
        tls,
        max_receive_bytes,
    })
}

/// A failed call as Python reads it: `(code, message, trailers)`, the code
/// being gRPC's number (`grpc.StatusCode` values).
type PyCallError = (i32, String, Vec<(String, String)>);

fn py_call_error(e: CallError) -> PyCallError {
    (e.code as i32, e.message, e.trailers)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<client::Client>()?;
    m.add_class::<session::Session>()?;
    Ok(())
}
