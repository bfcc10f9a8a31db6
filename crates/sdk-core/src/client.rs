//! Client calls: `ActorClient.Invoke` and `Tell`, each with its deadline and
//! metadata (trace context and token, as the layer built them).
//!
//! One attempt per call: retries with the call's idempotency key are the
//! layer's (they need its clock, its logs and its error messages).

use std::future::Future;
use std::time::Duration;

use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};
use tonic::transport::Channel;
use tonic::Code;
use troupe_proto::v1::actor_client_client::ActorClientClient;
use troupe_proto::v1::{InvokeRequest, InvokeResponse, TellRequest, TellResponse};

use crate::connect::ConnectOptions;
use crate::CallError;

/// What goes with one call besides its request.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// The call's deadline from now: sent as `grpc-timeout` and enforced here,
    /// so a daemon that never answers still ends the call. `None`: no deadline.
    pub timeout: Option<Duration>,
    /// ASCII metadata entries, in order; a key may repeat.
    pub metadata: Vec<(String, String)>,
}

/// Invoke and tell on one channel; cheap to clone.
#[derive(Debug, Clone)]
pub struct ActorCalls {
    client: ActorClientClient<Channel>,
}

impl ActorCalls {
    pub fn new(channel: Channel, options: &ConnectOptions) -> Self {
        let client = ActorClientClient::new(channel)
            .max_decoding_message_size(options.decoding_limit())
            .max_encoding_message_size(usize::MAX);
        Self { client }
    }

    pub async fn invoke(
        &self,
        request: InvokeRequest,
        call: CallOptions,
    ) -> Result<InvokeResponse, CallError> {
        let mut client = self.client.clone();
        let timeout = call.timeout;
        let request = prepare(request, call)?;
        within(timeout, async move { client.invoke(request).await }).await
    }

    pub async fn tell(
        &self,
        request: TellRequest,
        call: CallOptions,
    ) -> Result<TellResponse, CallError> {
        let mut client = self.client.clone();
        let timeout = call.timeout;
        let request = prepare(request, call)?;
        within(timeout, async move { client.tell(request).await }).await
    }
}

fn prepare<T>(message: T, call: CallOptions) -> Result<tonic::Request<T>, CallError> {
    let mut request = with_metadata(tonic::Request::new(message), &call.metadata)?;
    if let Some(timeout) = call.timeout {
        request.set_timeout(timeout);
    }
    Ok(request)
}

async fn within<T, F>(timeout: Option<Duration>, call: F) -> Result<T, CallError>
where
    F: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let Some(timeout) = timeout else {
        return call
            .await
            .map(tonic::Response::into_inner)
            .map_err(CallError::from);
    };
    let deadline = tokio::time::Instant::now() + timeout;
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
