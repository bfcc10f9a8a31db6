//! `NativeClient`: the client API's calls for the TypeScript `Client` and for
//! the calls actors make (invoke and tell with their keys and retries, and
//! the rarer RPCs as bytes), answered in batches through the client's inbox.
//!
//! JS names each call with an id and keeps its promise's resolvers; the
//! answers come back from [`NativeClient::take`] as [`NativeAnswer`]s, all
//! that arrived since the last wake-up at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use napi::bindgen_prelude::Buffer;
use napi_derive::napi;
use parking_lot::Mutex;
use prost::Message;
use tokio::task::AbortHandle;
use troupe_sdk_core::client::{ActorCalls, CallOptions};
use troupe_sdk_core::connect::ConnectOptions;
use troupe_sdk_core::key::{self, KeyNames};
use troupe_sdk_core::proto::{InvokeRequest, TellRequest};
use troupe_sdk_core::retry::{BudgetOptions, GaveUp, Retried, RetryNote};
use troupe_sdk_core::CallError;

use crate::error::decode;
use crate::wake::{Inbox, WakeFn};
use crate::{channel, metadata_pairs, runtime, NativeConnect, NativeStatus, NodeError};

enum Answer {
    /// A call ended: its response, or what failed it.
    Done(u32, Result<Vec<u8>, Retried>),
    /// A call's retry begins (for the SDK's debug line).
    Retrying(u32, RetryNote),
}

/// The key option as the TypeScript SDK spells it, for the core's messages.
const KEY_NAMES: KeyNames = KeyNames {
    option: "idempotencyKey",
    absent: "leave it out",
};

/// One call's answer: the serialized response (`InvokeResponse`,
/// `TellResponse`, or the rarer RPC's), or the status that failed it and
/// what its retries did; or, with `retrying`, not an answer but a retry
/// beginning (the call goes on).
#[napi(object)]
// napi's Buffer has no Debug (and a TLS key must never reach a log line).
#[allow(missing_debug_implementations)]
pub struct NativeAnswer {
    pub id: u32,
    pub response: Option<Buffer>,
    pub error: Option<NativeStatus>,
    pub retried: Option<NativeRetried>,
    pub retrying: Option<NativeRetry>,
}

/// A retry of an invoke or tell about to be sent.
#[napi(object)]
#[derive(Debug)]
pub struct NativeRetry {
    /// 1 for the first retry.
    pub retry: u32,
    pub pause_ms: f64,
    /// The refusal, as `CODE: message`.
    pub details: String,
}

/// What the retries of a failed invoke or tell did, for its error message.
#[napi(object)]
#[derive(Debug)]
pub struct NativeRetried {
    /// Attempts after the first.
    pub retries: u32,
    pub elapsed_ms: f64,
    /// `"deadline"` or `"window"` when the retries ran out of time,
    /// `"budget"` when the client's retry budget refused another.
    pub gave_up: Option<String>,
    /// The last refusal retried before the status that ended them, as
    /// `CODE: message`.
    pub last_refusal: Option<String>,
}

fn retried(e: &Retried) -> NativeRetried {
    NativeRetried {
        retries: e.retries,
        elapsed_ms: e.elapsed.as_secs_f64() * 1000.0,
        gave_up: e.gave_up.map(|g| {
            match g {
                GaveUp::Deadline => "deadline",
                GaveUp::Window => "window",
                GaveUp::Budget => "budget",
            }
            .to_owned()
        }),
        last_refusal: e.last_refusal.clone(),
    }
}

/// The size of a client's retry budget (gRFC A6 `retryThrottling`).
#[napi(object)]
#[derive(Debug, Clone, Copy)]
pub struct NativeRetryBudget {
    pub max_tokens: u32,
    pub token_ratio: f64,
}

impl From<NativeRetryBudget> for BudgetOptions {
    fn from(b: NativeRetryBudget) -> Self {
        Self {
            max_tokens: b.max_tokens,
            token_ratio: b.token_ratio,
        }
    }
}

#[napi]
#[derive(Debug)]
pub struct NativeClient {
    /// Dropped by `close`: the connection ends once no handle on its channel
    /// is left, rather than when JS's garbage collector gets to this object
    /// (a server waiting for its clients to leave would wait until then).
    calls: Mutex<Option<ActorCalls>>,
    answers: Arc<Inbox<Vec<Answer>>>,
    /// The calls under way, so that `close` ends their RPCs.
    running: Arc<Mutex<HashMap<u32, AbortHandle>>>,
}

impl NativeClient {
    /// A client on `channel` with a fresh retry budget of `budget`'s size,
    /// or none: a client's own, or an app session's for the calls its turns
    /// make.
    pub(crate) fn on_channel(
        channel: tonic::transport::Channel,
        options: &ConnectOptions,
        budget: Option<BudgetOptions>,
        wake: WakeFn,
    ) -> Result<Self, NodeError> {
        let calls = ActorCalls::new(channel, options)
            .with_retry_budget(budget)
            .map_err(NodeError::Budget)?;
        Ok(Self {
            calls: Mutex::new(Some(calls)),
            answers: Arc::new(Inbox::new(wake)),
            running: Arc::default(),
        })
    }

    /// Hands each retry note of call `id` to JS through the inbox.
    fn on_retry(&self, id: u32) -> impl FnMut(&RetryNote) + Send + 'static {
        let answers = self.answers.clone();
        move |note| answers.push(|queue| queue.push(Answer::Retrying(id, note.clone())))
    }

    fn start<F, C>(&self, id: u32, call: C) -> Result<(), NodeError>
    where
        C: FnOnce(ActorCalls) -> F,
        F: std::future::Future<Output = Result<Vec<u8>, Retried>> + Send + 'static,
    {
        let Some(calls) = self.calls.lock().clone() else {
            let closed = CallError::new(tonic::Code::Cancelled, "the client was closed");
            self.answers
                .push(|queue| queue.push(Answer::Done(id, Err(Retried::once(closed)))));
            return Ok(());
        };
        let call = call(calls);
        let answers = self.answers.clone();
        let running = self.running.clone();
        // Held while spawning: the task's own removal waits for the insert.
        let mut calls = self.running.lock();
        let task = runtime()?.spawn(async move {
            let answer = call.await;
            running.lock().remove(&id);
            answers.push(|queue| queue.push(Answer::Done(id, answer)));
        });
        calls.insert(id, task.abort_handle());
        Ok(())
    }
}

/// The call's deadline from now; one already past (zero or less) fails the
/// call at once with DEADLINE_EXCEEDED, as gRPC does.
fn call_options(
    timeout_ms: Option<f64>,
    metadata: Vec<String>,
    retry: bool,
) -> Result<CallOptions, NodeError> {
    let timeout =
        timeout_ms.map(|ms| Duration::try_from_secs_f64(ms / 1000.0).unwrap_or(Duration::ZERO));
    Ok(CallOptions {
        timeout,
        metadata: metadata_pairs(metadata)?,
        retry,
    })
}

/// The key a call sends (the caller's, checked, or a fresh one) and
/// whether it is new ([`key::marked_call_key`]); a bad one
/// throws (code `InvalidArg`) with the message TypeScript users know.
fn call_key(given: Option<String>) -> Result<(String, bool), NodeError> {
    key::marked_call_key(given).map_err(|e| NodeError::Key(e.message(&KEY_NAMES)))
}

/// A copy of the JS buffer's bytes: the call outlives the buffer's borrow.
fn bytes_of(buffer: &Buffer) -> bytes::Bytes {
    bytes::Bytes::copy_from_slice(buffer)
}

#[napi]
impl NativeClient {
    /// A client with its own channel; `wake` is called when answers wait.
    /// `retry_budget` bounds the retries of all its calls together (gRFC A6
    /// retry throttling); the layer always passes it, null (or nothing) for
    /// no budget.
    #[napi(constructor)]
    pub fn new(
        options: NativeConnect,
        wake: WakeFn,
        retry_budget: Option<NativeRetryBudget>,
    ) -> napi::Result<Self> {
        let (channel, options) = channel(options)?;
        let budget = retry_budget.map(BudgetOptions::from);
        Ok(Self::on_channel(channel, &options, budget, wake)?)
    }

    /// Starts `ActorClient.Invoke` with the serialized `InvokeRequest` and
    /// `key` (none: a fresh one), with `retry` resent on UNAVAILABLE or a
    /// pushed-back RESOURCE_EXHAUSTED;
    /// `metadata` is flat (`[key, value, ...]`).
    #[napi]
    pub fn invoke(
        &self,
        id: u32,
        request: Buffer,
        key: Option<String>,
        timeout_ms: Option<f64>,
        metadata: Vec<String>,
        retry: bool,
    ) -> napi::Result<()> {
        let mut request: InvokeRequest = decode(&request, "troupe.v1.InvokeRequest")?;
        (request.idempotency_key, request.new_key) = call_key(key)?;
        let options = call_options(timeout_ms, metadata, retry)?;
        let on_retry = self.on_retry(id);
        self.start(id, |calls| async move {
            calls
                .invoke(request, options, on_retry)
                .await
                .map(|r| r.encode_to_vec())
        })?;
        Ok(())
    }

    /// Starts `ActorClient.Tell` with the serialized `TellRequest`, keyed
    /// and retried as `invoke`.
    #[napi]
    pub fn tell(
        &self,
        id: u32,
        request: Buffer,
        key: Option<String>,
        timeout_ms: Option<f64>,
        metadata: Vec<String>,
        retry: bool,
    ) -> napi::Result<()> {
        let mut request: TellRequest = decode(&request, "troupe.v1.TellRequest")?;
        (request.idempotency_key, request.new_key) = call_key(key)?;
        let options = call_options(timeout_ms, metadata, retry)?;
        let on_retry = self.on_retry(id);
        self.start(id, |calls| async move {
            calls
                .tell(request, options, on_retry)
                .await
                .map(|r| r.encode_to_vec())
        })?;
        Ok(())
    }

    /// Starts one of the rarer `ActorClient` RPCs (`method` its path, e.g.
    /// `/troupe.v1.ActorClient/GetState`) with its serialized request; sent
    /// once, answered with the serialized response.
    #[napi]
    pub fn unary(
        &self,
        id: u32,
        method: String,
        request: Buffer,
        timeout_ms: Option<f64>,
        metadata: Vec<String>,
    ) -> napi::Result<()> {
        let request = bytes_of(&request);
        let options = call_options(timeout_ms, metadata, false)?;
        self.start(id, |calls| async move {
            calls
                .unary(&method, request, options)
                .await
                .map(|r| r.to_vec())
                .map_err(Retried::once)
        })?;
        Ok(())
    }

    /// The answers that arrived since the last take.
    #[napi]
    pub fn take(&self) -> Vec<NativeAnswer> {
        self.answers
            .take()
            .into_iter()
            .map(|answer| match answer {
                Answer::Done(id, Ok(bytes)) => NativeAnswer {
                    id,
                    response: Some(bytes.into()),
                    error: None,
                    retried: None,
                    retrying: None,
                },
                Answer::Done(id, Err(e)) => NativeAnswer {
                    id,
                    response: None,
                    retried: Some(retried(&e)),
                    error: Some(e.status.into()),
                    retrying: None,
                },
                Answer::Retrying(id, note) => NativeAnswer {
                    id,
                    response: None,
                    error: None,
                    retried: None,
                    retrying: Some(NativeRetry {
                        retry: note.retry,
                        pause_ms: note.pause.as_secs_f64() * 1000.0,
                        details: note.details,
                    }),
                },
            })
            .collect()
    }

    /// Ends call `id` (its caller's signal aborted, or its turn was
    /// cancelled); no answer follows. Dropping the call resets its HTTP/2
    /// stream, so the daemon sees its caller leave and cancels the turn.
    #[napi]
    pub fn cancel(&self, id: u32) {
        if let Some(task) = self.running.lock().remove(&id) {
            task.abort();
        }
    }

    /// Ends every call under way (none of them is answered) and lets go of
    /// the channel; later calls answer CANCELLED.
    #[napi]
    pub fn close(&self) {
        self.calls.lock().take();
        for (_, task) in self.running.lock().drain() {
            task.abort();
        }
    }
}
