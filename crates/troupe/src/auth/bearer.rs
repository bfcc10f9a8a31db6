//! The client side: the token the CLI sends with every request.

use tonic::{Request, Status};

use tonic::metadata::AsciiMetadataValue;

use super::{Credential, AUTHORIZATION};

/// Adds `authorization: Bearer <token>` to every request a client sends.
#[derive(Clone)]
pub struct BearerToken {
    header: Option<AsciiMetadataValue>,
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BearerToken")
            .field("set", &self.header.is_some())
            .finish()
    }
}

/// Why a token cannot be sent.
#[derive(Debug, thiserror::Error)]
#[error("{what} holds characters that cannot travel in gRPC metadata; use printable ASCII")]
pub struct UnsendableToken {
    pub what: String,
}

/// `Bearer <token>` as metadata; `what` names where the token came from
/// in the error (never the token).
pub fn bearer_value(token: &str, what: &str) -> Result<AsciiMetadataValue, UnsendableToken> {
    format!("Bearer {}", token.trim())
        .parse()
        .map_err(|_| UnsendableToken {
            what: what.to_owned(),
        })
}

impl BearerToken {
    /// The first token of `TROUPE_API_TOKEN`, if set; else send nothing.
    pub fn api_from_env() -> Result<Self, UnsendableToken> {
        let what = Credential::Api.env_var();
        let header = Credential::Api
            .env_tokens()
            .first()
            .map(|token| bearer_value(token, what))
            .transpose()?;
        Ok(Self { header })
    }
}

impl tonic::service::Interceptor for BearerToken {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(header) = &self.header {
            request.metadata_mut().insert(AUTHORIZATION, header.clone());
        }
        Ok(request)
    }
}
