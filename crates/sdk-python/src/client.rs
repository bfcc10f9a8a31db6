//! `troupe._native.Client`: the client API's calls for `troupe.Client` and
//! for the calls actors make (invoke and tell with their keys and retries,
//! and the rarer RPCs as bytes), answered in batches through the client's
//! inbox.
//!
//! Python names each call with an id and keeps its future; the answer comes
//! back as `(id, response_bytes)` or `(id, failure)` ([`PyFailure`]), and each
//! retry as a note Python logs in its own words.
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
use troupe_sdk_core::key::{self, KeyNames};
use troupe_sdk_core::proto::{InvokeRequest, TellRequest};
use troupe_sdk_core::retry::{
    BudgetOptions, GaveUp, Retried, RetryNote, DEFAULT_MAX_TOKENS, DEFAULT_TOKEN_RATIO,
};

use crate::inbox::Inbox;
use crate::{channel, py_call_error, runtime};

pyo3::create_exception!(
    _native,
    InvalidKey,
    PyValueError,
    "An idempotency key the daemon would refuse; nothing was sent."
);

/// The key option as the Python SDK spells it, for the core's messages.
const KEY_NAMES: KeyNames = KeyNames {
    option: "idempotency_key",
    absent: "None",
};

#[derive(Debug)]
enum Answer {
    Done(u64, Result<Vec<u8>, Retried>),
    Retrying(u64, RetryNote),
}
type Call = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A failed call as Python reads it: gRPC's code number, the message, the
/// ASCII trailers, then the retries made, their seconds, why they stopped
/// for lack of time or budget (`"deadline"`, `"window"`, `"budget"`, or
/// None) and the last
/// refusal retried, as `CODE: message` (None when there was none).
type PyFailure = (
    i32,
    String,
    Vec<(String, String)>,
    u32,
    f64,
    Option<&'static str>,
    Option<String>,
);

fn py_failure(e: Retried) -> PyFailure {
    let gave_up = e.gave_up.map(|g| match g {
        GaveUp::Deadline => "deadline",
        GaveUp::Window => "window",
        GaveUp::Budget => "budget",
    });
    let (code, message, trailers) = py_call_error(e.status);
    (
        code,
        message,
        trailers,
        e.retries,
        e.elapsed.as_secs_f64(),
        gave_up,
        e.last_refusal,
    )
}

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
    /// A client on `channel` with a fresh retry budget of `budget`'s size,
    /// or none: a client's own, or an app session's for the calls its turns
    /// make.
    pub(crate) fn on_channel(
        channel: tonic::transport::Channel,
        options: &ConnectOptions,
        budget: Option<BudgetOptions>,
    ) -> PyResult<Self> {
        let calls = ActorCalls::new(channel, options)
            .with_retry_budget(budget)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(Self {
            calls,
            answers: Arc::new(Inbox::new().map_err(|e| PyOSError::new_err(e.to_string()))?),
            running: Arc::default(),
            queued: Mutex::default(),
        })
    }

    fn queue<F>(&self, id: u64, call: F)
    where
        F: Future<Output = Result<Vec<u8>, Retried>> + Send + 'static,
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
                answers.push(Answer::Done(id, answer));
            }
        }));
    }
}

/// The call's deadline from now; a deadline already past (zero or less)
/// fails the call at once with DEADLINE_EXCEEDED, as gRPC does.
fn call_options(timeout: Option<f64>, metadata: Vec<(String, String)>, retry: bool) -> CallOptions {
    let timeout = timeout.map(|t| Duration::try_from_secs_f64(t).unwrap_or(Duration::ZERO));
    CallOptions {
        timeout,
        metadata,
        retry,
    }
}

/// The key a call sends (the caller's, checked, or a fresh one) and
/// whether it is new ([`key::marked_call_key`]); a bad one
/// raises `InvalidKey` with the message Python users know.
fn call_key(given: Option<String>) -> PyResult<(String, bool)> {
    key::marked_call_key(given).map_err(|e| InvalidKey::new_err(e.message(&KEY_NAMES)))
}

/// Hands each retry note to Python through the inbox.
fn notes(id: u64, answers: &Arc<Inbox<Answer>>) -> impl FnMut(&RetryNote) + Send + 'static {
    let answers = answers.clone();
    move |note| answers.push(Answer::Retrying(id, note.clone()))
}

/// The `retry_budget` Python passes, `(max_tokens, token_ratio)` or None for
/// no budget, as the core takes it.
pub(crate) fn budget_options(retry_budget: Option<(u32, f64)>) -> Option<BudgetOptions> {
    retry_budget.map(|(max_tokens, token_ratio)| BudgetOptions {
        max_tokens,
        token_ratio,
    })
}

fn decode<M: Message + Default>(bytes: &[u8], what: &str) -> PyResult<M> {
    M::decode(bytes).map_err(|e| PyValueError::new_err(format!("not a {what}: {e}")))
}

#[pymethods]
impl Client {
    /// `retry_budget`: `(max_tokens, token_ratio)` of the client's retry
    /// budget (gRFC A6 retry throttling; 100 tokens and 0.1 by default), or
    /// None for none.
    #[new]
    #[pyo3(signature = (
        address,
        ca=None,
        cert=None,
        key=None,
        max_receive_bytes=None,
        retry_budget=Some((DEFAULT_MAX_TOKENS, DEFAULT_TOKEN_RATIO)),
    ))]
    fn new(
        address: String,
        ca: Option<Vec<u8>>,
        cert: Option<Vec<u8>>,
        key: Option<Vec<u8>>,
        max_receive_bytes: Option<usize>,
        retry_budget: Option<(u32, f64)>,
    ) -> PyResult<Self> {
        let (channel, options) = channel(address, ca, cert, key, max_receive_bytes)?;
        Self::on_channel(channel, &options, budget_options(retry_budget))
    }

    /// The socket to watch for answers (`loop.add_reader`).
    fn fileno(&self) -> i32 {
        self.answers.fileno()
    }

    /// Starts `ActorClient.Invoke` with the serialized `InvokeRequest` and
    /// `key` (None: a fresh one), with `retry` resent on UNAVAILABLE or a
    /// pushed-back RESOURCE_EXHAUSTED.
    #[pyo3(signature = (id, request, key, timeout, metadata, retry))]
    fn invoke(
        &self,
        id: u64,
        request: &[u8],
        key: Option<String>,
        timeout: Option<f64>,
        metadata: Vec<(String, String)>,
        retry: bool,
    ) -> PyResult<()> {
        let mut request: InvokeRequest = decode(request, "troupe.v1.InvokeRequest")?;
        (request.idempotency_key, request.new_key) = call_key(key)?;
        let calls = self.calls.clone();
        let options = call_options(timeout, metadata, retry);
        let notes = notes(id, &self.answers);
        self.queue(id, async move {
            calls
                .invoke(request, options, notes)
                .await
                .map(|r| r.encode_to_vec())
        });
        Ok(())
    }

    /// Starts `ActorClient.Tell` with the serialized `TellRequest`, keyed
    /// and retried as `invoke`.
    #[pyo3(signature = (id, request, key, timeout, metadata, retry))]
    fn tell(
        &self,
        id: u64,
        request: &[u8],
        key: Option<String>,
        timeout: Option<f64>,
        metadata: Vec<(String, String)>,
        retry: bool,
    ) -> PyResult<()> {
        let mut request: TellRequest = decode(request, "troupe.v1.TellRequest")?;
        (request.idempotency_key, request.new_key) = call_key(key)?;
        let calls = self.calls.clone();
        let options = call_options(timeout, metadata, retry);
        let notes = notes(id, &self.answers);
        self.queue(id, async move {
            calls
                .tell(request, options, notes)
                .await
                .map(|r| r.encode_to_vec())
        });
        Ok(())
    }

    /// Starts one of the rarer `ActorClient` RPCs (`method` its path, e.g.
    /// `/troupe.v1.ActorClient/GetState`) with its serialized request; sent
    /// once, answered with the serialized response.
    fn unary(
        &self,
        id: u64,
        method: String,
        request: Vec<u8>,
        timeout: Option<f64>,
        metadata: Vec<(String, String)>,
    ) {
        let calls = self.calls.clone();
        let options = call_options(timeout, metadata, false);
        self.queue(id, async move {
            calls
                .unary(&method, request.into(), options)
                .await
                .map(|r| r.to_vec())
                .map_err(Retried::once)
        });
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

    /// The answers that arrived since the last take, and the retries begun
    /// meanwhile as `(id, retry, pause_seconds, details)`.
    #[allow(clippy::type_complexity)]
    fn take<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Vec<(u64, Bound<'py, PyAny>)>, Vec<(u64, u32, f64, String)>)> {
        let mut answers = Vec::new();
        let mut retries = Vec::new();
        for answer in self.answers.take() {
            match answer {
                Answer::Done(id, Ok(bytes)) => {
                    answers.push((id, PyBytes::new(py, &bytes).into_any()));
                }
                Answer::Done(id, Err(e)) => {
                    answers.push((id, py_failure(e).into_pyobject(py)?.into_any()));
                }
                Answer::Retrying(id, note) => {
                    retries.push((id, note.retry, note.pause.as_secs_f64(), note.details));
                }
            }
        }
        Ok((answers, retries))
    }

    /// Ends every call under way.
    fn close(&self) {
        self.queued.lock().clear();
        for (_, task) in self.running.lock().drain() {
            task.abort();
        }
    }
}
