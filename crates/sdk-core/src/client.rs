//! Client calls: `ActorClient.Invoke` and `Tell`, each with its idempotency
//! key, its retries on UNAVAILABLE and pushed-back RESOURCE_EXHAUSTED
//! ([`crate::retry`], within the client's retry budget), its deadline and
//! metadata (trace context and token, as the layer built them); and the
//! rarer client RPCs as bytes ([`ActorCalls::unary`], [`crate::unary`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};
use tonic::transport::Channel;
use tonic::Code;
use troupe_proto::v1::actor_client_client::ActorClientClient;
use troupe_proto::v1::{ActorRef, InvokeRequest, InvokeResponse, TellRequest, TellResponse};

use crate::connect::ConnectOptions;
use crate::retry::{with_retries, BudgetOptions, Retried, RetryBudget, RetryNote};
use crate::unary::{known, BytesCodec};
use crate::{key, CallError};

/// What goes with one call besides its request.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// The call's deadline from now: sent as `grpc-timeout` and enforced here,
    /// so a daemon that never answers still ends the call. `None`: no deadline.
    pub timeout: Option<Duration>,
    /// ASCII metadata entries, in order; a key may repeat.
    pub metadata: Vec<(String, String)>,
    /// Invoke and tell only: resend on UNAVAILABLE, and on a RESOURCE_EXHAUSTED
    /// that ran nothing, while the deadline leaves time and the client's
    /// retry budget allows (the SDKs' `retry` option; [`crate::retry`]).
    /// The other RPCs are sent once.
    pub retry: bool,
}

/// The client API's calls on one channel; cheap to clone, and the clones
/// share one retry budget.
#[derive(Debug, Clone)]
pub struct ActorCalls {
    client: ActorClientClient<Channel>,
    /// The same channel for the rarer RPCs, as bytes.
    raw: tonic::client::Grpc<Channel>,
    /// What bounds the retries of all the invokes and tells on this channel
    /// together (gRFC A6 retry throttling); `None`: no bound but each
    /// call's deadline.
    budget: Option<Arc<RetryBudget>>,
}

impl ActorCalls {
    /// Calls on `channel` with the default retry budget
    /// ([`BudgetOptions::default`]); [`ActorCalls::with_retry_budget`]
    /// chooses another.
    pub fn new(channel: Channel, options: &ConnectOptions) -> Self {
        let client = ActorClientClient::new(channel.clone())
            .max_decoding_message_size(options.decoding_limit())
            .max_encoding_message_size(usize::MAX);
        let raw = tonic::client::Grpc::new(channel)
            .max_decoding_message_size(options.decoding_limit())
            .max_encoding_message_size(usize::MAX);
        // The default's options are in range: the budget always builds.
        let budget = RetryBudget::new(BudgetOptions::default())
            .ok()
            .map(Arc::new);
        Self {
            client,
            raw,
            budget,
        }
    }

    /// These calls with a fresh retry budget of `budget`'s size, or none
    /// (`None`: each call retries for as long as its deadline allows).
    pub fn with_retry_budget(
        mut self,
        budget: Option<BudgetOptions>,
    ) -> Result<Self, crate::retry::BudgetError> {
        self.budget = budget.map(RetryBudget::new).transpose()?.map(Arc::new);
        Ok(self)
    }

    /// The retry budget these calls share, if any.
    pub fn retry_budget(&self) -> Option<&RetryBudget> {
        self.budget.as_deref()
    }

    /// `ActorClient.Invoke`, retried per `call.retry` with the request's
    /// idempotency key, or a fresh one when it has none; a key a user gave
    /// is the layer's to check first ([`key::call_key`], which words the
    /// refusal in the user's language), and a layer that made the key
    /// itself sets `new_key`. Only the first attempt says the key is new.
    /// `on_retry` hears of each retry.
    pub async fn invoke(
        &self,
        request: InvokeRequest,
        call: CallOptions,
        on_retry: impl FnMut(&RetryNote),
    ) -> Result<InvokeResponse, Retried> {
        self.keyed(request, call, on_retry, |mut client, request| async move {
            client.invoke(request).await
        })
        .await
    }

    /// `ActorClient.Tell`, keyed and retried as [`ActorCalls::invoke`].
    pub async fn tell(
        &self,
        request: TellRequest,
        call: CallOptions,
        on_retry: impl FnMut(&RetryNote),
    ) -> Result<TellResponse, Retried> {
        self.keyed(request, call, on_retry, |mut client, request| async move {
            client.tell(request).await
        })
        .await
    }

    /// A keyed call: `rpc` sends one attempt of `request` on a clone of the
    /// client, as often as [`with_retries`] asks.
    async fn keyed<Req, Resp, Fut>(
        &self,
        mut request: Req,
        call: CallOptions,
        on_retry: impl FnMut(&RetryNote),
        rpc: impl Fn(ActorClientClient<Channel>, tonic::Request<Req>) -> Fut,
    ) -> Result<Resp, Retried>
    where
        Req: Keyed,
        Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        if request.key().is_empty() {
            *request.key() = key::fresh();
            *request.new_key() = true;
        }
        // Only the SDK made a new key (the layer's or the one above): no one
        // sends it again once the retries end.
        if *request.new_key() {
            *request.key_retention_ms() = key::made_key_retention_ms(call.timeout);
        }
        let (actor, method) = request.target();
        let what = CallName(Req::KIND, actor, method);
        let (retry, timeout) = (call.retry, call.timeout);
        let mut first = true;
        let budget = self.budget.as_deref();
        with_retries(retry, budget, timeout, &what, on_retry, |left| {
            let mut this = request.clone();
            // A retry resends a key the daemon may have recorded by now.
            if !std::mem::replace(&mut first, false) {
                *this.new_key() = false;
            }
            let attempt = prepare(this, &call, left).map(|r| rpc(self.client.clone(), r));
            async move { within(left, attempt?).await }
        })
        .await
    }

    /// One of the rarer `ActorClient` RPCs ([`crate::unary::METHODS`], by
    /// path: `/troupe.v1.ActorClient/GetState`), its request and answer
    /// serialized; sent once, with the deadline and metadata of `call`.
    pub async fn unary(
        &self,
        method: &str,
        request: Bytes,
        call: CallOptions,
    ) -> Result<Bytes, CallError> {
        let Some(path) = known(method) else {
            return Err(CallError::new(
                Code::Unimplemented,
                format!("{method:?} is not an ActorClient method the SDK core sends"),
            ));
        };
        let request = prepare(request, &call, call.timeout)?;
        let mut raw = self.raw.clone();
        within(call.timeout, async move {
            raw.ready()
                .await
                .map_err(|e| tonic::Status::from_error(e.into()))?;
            raw.unary(request, PathAndQuery::from_static(path), BytesCodec)
                .await
        })
        .await
    }
}

/// What invoke and tell requests share: an idempotency key, whether it is
/// new, and a target.
trait Keyed: Clone {
    /// The call's kind, for logs.
    const KIND: &'static str;
    fn key(&mut self) -> &mut String;
    fn new_key(&mut self) -> &mut bool;
    fn key_retention_ms(&mut self) -> &mut u64;
    fn target(&self) -> (&Option<ActorRef>, &str);
}

impl Keyed for InvokeRequest {
    const KIND: &'static str = "invoke";
    fn key(&mut self) -> &mut String {
        &mut self.idempotency_key
    }
    fn new_key(&mut self) -> &mut bool {
        &mut self.new_key
    }
    fn key_retention_ms(&mut self) -> &mut u64 {
        &mut self.key_retention_ms
    }
    fn target(&self) -> (&Option<ActorRef>, &str) {
        (&self.actor, &self.method)
    }
}

impl Keyed for TellRequest {
    const KIND: &'static str = "tell";
    fn key(&mut self) -> &mut String {
        &mut self.idempotency_key
    }
    fn new_key(&mut self) -> &mut bool {
        &mut self.new_key
    }
    fn key_retention_ms(&mut self) -> &mut u64 {
        &mut self.key_retention_ms
    }
    fn target(&self) -> (&Option<ActorRef>, &str) {
        (&self.actor, &self.method)
    }
}

/// "invoke counter/c1.incr", for logs; formatted only when one is written.
struct CallName<'a>(&'static str, &'a Option<ActorRef>, &'a str);

impl std::fmt::Display for CallName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let CallName(kind, actor, method) = self;
        match actor {
            Some(a) => write!(f, "{kind} {}/{}.{method}", a.r#type, a.id),
            None => write!(f, "{kind} {method}"),
        }
    }
}

/// The request of one attempt, with `timeout` (what is left of the call's).
fn prepare<T>(
    message: T,
    call: &CallOptions,
    timeout: Option<Duration>,
) -> Result<tonic::Request<T>, CallError> {
    let mut request = with_metadata(tonic::Request::new(message), &call.metadata)?;
    if let Some(timeout) = timeout {
        request.set_timeout(timeout);
    }
    Ok(request)
}

async fn within<T, F>(timeout: Option<Duration>, call: F) -> Result<T, CallError>
where
    F: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    // A timeout too far out for the clock is no deadline here (the daemon
    // still gets it as `grpc-timeout`).
    let deadline = timeout.and_then(|t| tokio::time::Instant::now().checked_add(t));
    let Some(deadline) = deadline else {
        return call
            .await
            .map(tonic::Response::into_inner)
            .map_err(CallError::from);
    };
    match tokio::time::timeout_at(deadline, call).await {
        Ok(Ok(answer)) => Ok(answer.into_inner()),
        // The daemon enforces `grpc-timeout` too, and tonic answers a call it
        // timed out with CANCELLED "Timeout expired", which can beat the timer
        // here by a hair: the caller's deadline passed either way.
        Ok(Err(status)) if timed_out(&status) || tokio::time::Instant::now() >= deadline => {
            Err(CallError::deadline_exceeded())
        }
        Ok(Err(status)) => Err(status.into()),
        Err(_) => Err(CallError::deadline_exceeded()),
    }
}

fn timed_out(status: &tonic::Status) -> bool {
    status.code() == Code::Cancelled && status.message() == "Timeout expired"
}

/// `request` with `metadata` appended; an entry that is not valid ASCII
/// metadata fails the call before anything is sent.
pub(crate) fn with_metadata<T>(
    mut request: tonic::Request<T>,
    metadata: &[(String, String)],
) -> Result<tonic::Request<T>, CallError> {
    for (key, value) in metadata {
        let bad = |what: &str| {
            CallError::new(
                Code::InvalidArgument,
                format!("call metadata {key:?}: invalid {what}"),
            )
        };
        let name = AsciiMetadataKey::from_bytes(key.as_bytes()).map_err(|_| bad("key"))?;
        let value = AsciiMetadataValue::try_from(value.as_str()).map_err(|_| bad("value"))?;
        request.metadata_mut().append(name, value);
    }
    Ok(request)
}
