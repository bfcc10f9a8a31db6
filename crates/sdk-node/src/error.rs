//! What the addon's methods throw in JS: a bug or bad option in the layer
//! calling it, never a failed call (those come back as statuses).

use troupe_sdk_core::retry::BudgetError;
use troupe_sdk_core::ConnectError;

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// An option or argument the layer should not have passed.
    #[error("{0}")]
    Options(&'static str),
    /// Bytes that are not the protobuf message they were said to be.
    #[error("not a {what}: {source}")]
    Decode {
        what: &'static str,
        source: prost::DecodeError,
    },
    /// An idempotency key the daemon would refuse; nothing was sent.
    #[error("{0}")]
    Key(String),
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// A retry budget out of gRFC A6's range (the layer checks it first).
    #[error(transparent)]
    Budget(BudgetError),
    /// The SDK's tokio runtime could not start (out of threads or memory).
    #[error("cannot start the SDK's runtime: {0}")]
    Runtime(std::io::Error),
    #[error("this session has attached already")]
    Attached,
    #[error("this session is closed")]
    Closed,
}

impl From<NodeError> for napi::Error {
    fn from(e: NodeError) -> Self {
        let status = match e {
            NodeError::Runtime(_) => napi::Status::GenericFailure,
            _ => napi::Status::InvalidArg,
        };
        napi::Error::new(status, e.to_string())
    }
}

pub(crate) fn decode<M: prost::Message + Default>(
    bytes: &[u8],
    what: &'static str,
) -> Result<M, NodeError> {
    M::decode(bytes).map_err(|source| NodeError::Decode { what, source })
}
