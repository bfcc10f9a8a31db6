//! Errors at the crate's boundary: a channel that cannot be configured, and a
//! call (or an app stream) that ended with a gRPC status.

use tonic::Code;

/// A channel that could not be set up; nothing was sent.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The address is not `host:port` (or a URI tonic takes).
    #[error("invalid daemon address {address:?}: {reason}")]
    Address { address: String, reason: String },
    /// The CA, certificate or key was refused by the TLS stack.
    #[error("TLS setup failed: {0}")]
    Tls(String),
    /// TLS options given in part: a client certificate without its key (or
    /// the other way round), or without a CA.
    #[error("{0}")]
    Incomplete(&'static str),
}

/// A call or stream that ended with a status other than OK, as the language
/// layer shows it to its users: the code, the message, and the trailers
/// (the daemon names an actor's error type and its API version there).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct CallError {
    pub code: Code,
    pub message: String,
    /// ASCII trailers only; binary ones (`-bin`) carry nothing the SDKs read.
    pub trailers: Vec<(String, String)>,
}

impl CallError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            trailers: Vec::new(),
        }
    }

    /// The call's local deadline passed before an answer came: what gRPC
    /// libraries report, so callers see one wording whichever core they use.
    pub fn deadline_exceeded() -> Self {
        Self::new(Code::DeadlineExceeded, "Deadline Exceeded")
    }
}

impl From<tonic::Status> for CallError {
    fn from(status: tonic::Status) -> Self {
        let trailers = status
            .metadata()
            .iter()
            .filter_map(|entry| match entry {
                tonic::metadata::KeyAndValueRef::Ascii(key, value) => {
                    Some((key.as_str().to_owned(), value.to_str().ok()?.to_owned()))
                }
                tonic::metadata::KeyAndValueRef::Binary(..) => None,
            })
            .collect();
        Self {
            code: transport_failure(&status).unwrap_or(status.code()),
            message: status.message().to_owned(),
            trailers,
        }
    }
}

/// UNAVAILABLE for a status tonic made of a failed connection (it carries the
/// transport's error as its source; one the daemon sent has none), which
/// tonic reports as UNKNOWN "transport error", INTERNAL "h2 protocol error" or
/// CANCELLED "operation was canceled" (a call queued on a connection that broke):
/// grpc-js and grpcio say UNAVAILABLE, which the SDKs retry with the call's
/// idempotency key and their users look for.
fn transport_failure(status: &tonic::Status) -> Option<Code> {
    let failed = std::error::Error::source(status).is_some()
        && matches!(
            status.code(),
            Code::Unknown | Code::Internal | Code::Cancelled
        );
    failed.then_some(Code::Unavailable)
}

/// Why an app stream did not get as far as `Registered`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AttachError {
    /// The daemon (or the connection to it) ended the stream with this
    /// status; the layer decides from its code whether to re-connect.
    #[error("daemon refused the registration: {0}")]
    Refused(CallError),
    /// The stream ended cleanly before `Registered` came.
    #[error("daemon ended the stream before registering (OK)")]
    EndedEarly,
    /// The first message was not `Registered`; names what it was.
    #[error("expected Registered first, got {0}")]
    Unexpected(&'static str),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_failure_is_unavailable_and_a_daemon_status_stays_as_sent() {
        let broken = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let failed = CallError::from(tonic::Status::from_error(Box::new(broken)));
        assert_eq!(failed.code, Code::Unavailable);
        let sent = CallError::from(tonic::Status::internal("the actor panicked"));
        assert_eq!(sent.code, Code::Internal);
        let sent = CallError::from(tonic::Status::cancelled("Timeout expired"));
        assert_eq!(sent.code, Code::Cancelled);
        let sent = CallError::from(tonic::Status::unknown("an actor error"));
        assert_eq!(sent.code, Code::Unknown);
    }
}
