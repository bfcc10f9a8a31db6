//! `troupe._native.Client`: invoke and tell for `troupe.Client` and for the
//! calls actors make, answered in batches through the client's inbox.
//!
//! Python names each call with an id and keeps its future; the answer comes
//! back as `(id, response_bytes)` or `(id, (code, message, trailers))`.
//! Calls queue here until Python's `flush`, once per pass of its event loop:
//! the runtime is woken once for all the calls made in that pass, where a
//! wake per call would cost a thread switch per call.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{AbortHandle, Abortable};

use parking_lot::Mutex;
use prost::Message;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use troupe_sdk_core::client::{ActorCalls, CallOptions};
use troupe_sdk_core::connect::ConnectOptions;
use troupe_sdk_core::proto::{InvokeRequest, TellRequest};
use troupe_sdk_core::CallError;

use crate::inbox::Inbox;
use crate::{channel, py_call_error, runtime};

type Answer = (u64, Result<Vec<u8>, CallError>);
type Call = Pin<Box<dyn Future<Output = ()> + Send>>;

#[pyclass(module = "troupe._native", frozen)]
pub(crate) struct Client {
    calls: ActorCalls,
    answers: Arc<Inbox<Answer>>,
    /// The calls under way, so that a cancelled Python call ends its RPC too.
    running: Arc<Mutex<HashMap<u64, AbortHandle>>>,
    /// Calls made since the last flush, not started yet.
    queued: Mutex<Vec<Call>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("running", &self.running.lock().len())
            .field("queued", &self.queued.lock().len())
            .finish_non_exhaustive()
    }
}

impl Client {
    pub(crate) fn on_channel(
        channel: tonic::transport::Channel,
        options: &ConnectOptions,
    ) -> PyResult<Self> {
        Ok(Self {
            calls: ActorCalls::new(channel, options),
            answers: Arc::new(Inbox::new().map_err(|e| PyOSError::new_err(e.to_string()))?),
            running: Arc::default(),
            queued: Mutex::default(),
        })
    }

    fn queue<F>(&self, id: u64, call: F)
    where
        F: Future<Output = Result<Vec<u8>, CallError>> + Send + 'static,
    {
        let answers = self.answers.clone();
        let running = self.running.clone();
        // Registered before the call can start, so a cancel always finds it.
        let (abort, registration) = AbortHandle::new_pair();
        self.running.lock().insert(id, abort);
        let call = Abortable::new(call, registration);
        self.queued.lock().push(Box::pin(async move {
            // Aborted: the Python caller is gone and wants no answer.
            if let Ok(answer) = call.await {
                running.lock().remove(&id);
                answers.push((id, answer));
            }
        }));
    }
}

/// The call's deadline from now; a deadline already past (zero or less)
/// fails the call at once with DEADLINE_EXCEEDED, as gRPC does.
fn call_options(timeout: Option<f64>, metadata: Vec<(String, String)>) -> CallOptions {
    let timeout = timeout.map(|t| Duration::try_from_secs_f64(t).unwrap_or(Duration::ZERO));
    CallOptions { timeout, metadata }
}

fn decode<M: Message + Default>(bytes: &[u8], what: &str) -> PyResult<M> {
    M::decode(bytes).map_err(|e| PyValueError::new_err(format!("not a {what}: {e}")))
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (address, ca=None, cert=None, key=None, max_receive_bytes=None))]
    fn new(
        address: String,
        ca: Option<Vec<u8>>,
        cert: Option<Vec<u8>>,
        key: Option<Vec<u8>>,
        max_receive_bytes: Option<usize>,
    ) -> PyResult<Self> {
        let (channel, options) = channel(address, ca, cert, key, max_receive_bytes)?;
        Self::on_channel(channel, &options)
    }

    /// The socket to watch for answers (`loop.add_reader`).
    fn fileno(&self) -> i32 {
        self.answers.fileno()
    }

    /// Starts `ActorClient.Invoke` with the serialized `InvokeRequest`.
    fn invoke(
        &self,
        id: u64,
        request: &[u8],
        timeout: Option<f64>,
        metadata: Vec<(String, String)>,
    ) -> PyResult<()> {
        let request: InvokeRequest = decode(request, "troupe.v1.InvokeRequest")?;
        let calls = self.calls.clone();
        let options = call_options(timeout, metadata);
        self.queue(id, async move {
            calls
                .invoke(request, options)
                .await
                .map(|r| r.encode_to_vec())
        });
        Ok(())
    }

    /// Starts `ActorClient.Tell` with the serialized `TellRequest`.
    fn tell(
        &self,
        id: u64,
        request: &[u8],
        timeout: Option<f64>,
        metadata: Vec<(String, String)>,
    ) -> PyResult<()> {
        let request: TellRequest = decode(request, "troupe.v1.TellRequest")?;
        let calls = self.calls.clone();
        let options = call_options(timeout, metadata);
        self.queue(id, async move {
            calls
                .tell(request, options)
                .await
                .map(|r| r.encode_to_vec())
        });
        Ok(())
    }

    /// Starts the calls queued since the last flush.
    fn flush(&self) -> PyResult<()> {
        let calls = std::mem::take(&mut *self.queued.lock());
        if calls.is_empty() {
            return Ok(());
        }
        runtime()?.spawn(async move {
            for call in calls {
                tokio::spawn(call);
            }
        });
        Ok(())
    }

    /// Ends call `id` (its Python caller was cancelled); no answer follows.
    fn cancel(&self, id: u64) {
        if let Some(task) = self.running.lock().remove(&id) {
            task.abort();
        }
    }

    /// The answers that arrived since the last take.
    fn take<'py>(&self, py: Python<'py>) -> PyResult<Vec<(u64, Bound<'py, PyAny>)>> {
        self.answers
            .take()
            .into_iter()
            .map(|(id, answer)| {
                let value = match answer {
                    Ok(bytes) => PyBytes::new(py, &bytes).into_any(),
                    Err(e) => py_call_error(e).into_pyobject(py)?.into_any(),
                };
                Ok((id, value))
            })
            .collect()
    }

    /// Ends every call under way.
    fn close(&self) {
        self.queued.lock().clear();
        for (_, task) in self.running.lock().drain() {
            task.abort();
        }
    }
}
