//! The client side: the token the CLI sends with every request.

use tonic::{Request, Status};

use super::{parse_tokens, Credential, AUTHORIZATION};

/// Adds `authorization: Bearer <token>` to every request a client sends.
#[derive(Clone)]
pub struct BearerToken {
    header: Option<tonic::metadata::AsciiMetadataValue>,
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

impl BearerToken {
    /// None: send nothing.
    pub fn new(token: Option<&str>, what: &str) -> Result<Self, UnsendableToken> {
        let header = token
            .map(|token| {
                format!("Bearer {}", token.trim())
                    .parse()
                    .map_err(|_| UnsendableToken {
                        what: what.to_owned(),
                    })
            })
            .transpose()?;
        Ok(Self { header })
    }

    /// The first token of `TROUPE_API_TOKEN`, if set.
    pub fn api_from_env() -> Result<Self, UnsendableToken> {
        let tokens = std::env::var(Credential::Api.env_var())
            .ok()
            .map(|text| parse_tokens(&text))
            .unwrap_or_default();
        Self::new(
            tokens.first().map(String::as_str),
            Credential::Api.env_var(),
        )
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
