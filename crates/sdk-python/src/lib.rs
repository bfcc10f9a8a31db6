//! `troupe._native`: the Python SDK on `troupe-sdk-core`.
//!
//! The SDK's Python layer (`sdks/python/src/troupe/`: `_core.py` picks this
//! module, `_native_session.py` and `_native_calls.py` drive it) keeps its
//! protobuf messages, actor classes and asyncio tasks; this module moves the
//! bytes. Messages cross as serialized protobuf (prost on this side, upb
//! on Python's: one C call each way, cheaper than building Python objects
//! field by field). Everything arrives on Python's event loop through an
//! [`inbox::Inbox`]: one wake-up per burst, no GIL taken off the loop's
//! thread. Calls into this module never block.
//!
//! - [`client::Client`]: the client API's calls, answered through its inbox.
//! - [`session::Session`]: one app stream (`AppHost.Attach`).

// PyO3's macros expand to the unsafe FFI glue that is the point of the crate;
// the code written here has no unsafe block of its own.
#![allow(unsafe_code)]

mod client;
mod inbox;
mod session;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use tonic::transport::Channel;
use troupe_sdk_core::connect::{self, ConnectOptions, TlsOptions};
use troupe_sdk_core::{CallError, ConnectError};

/// The process's SDK runtime (`troupe_sdk_core::runtime`).
fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    troupe_sdk_core::runtime()
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start the SDK's runtime: {e}")))
}

/// A channel from the options the Python layer passes: how its client and
/// its app session each connect.
fn channel(
    address: String,
    ca: Option<Vec<u8>>,
    cert: Option<Vec<u8>>,
    key: Option<Vec<u8>>,
    max_receive_bytes: Option<usize>,
) -> PyResult<(Channel, ConnectOptions)> {
    let invalid = |e: ConnectError| PyValueError::new_err(e.to_string());
    let options = ConnectOptions {
        address,
        tls: TlsOptions::from_pems(ca, cert, key).map_err(invalid)?,
        max_receive_bytes,
    };
    let _entered = runtime()?.enter();
    let channel = connect::channel(&options).map_err(invalid)?;
    Ok((channel, options))
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
    m.add("InvalidKey", m.py().get_type::<client::InvalidKey>())?;
    m.add_class::<session::Session>()?;
    Ok(())
}
