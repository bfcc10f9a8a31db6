//! The server side: which token a service wants, as a tonic interceptor.

use std::sync::Arc;

use tonic::{Request, Status};

use super::Tokens;

/// The interceptor for one service: lets a request through when its
/// credential is not required or a token it accepts was sent.
#[derive(Debug, Clone)]
pub struct Guard {
    required: Option<Arc<Tokens>>,
    /// Also accepted: the app token on `ActorClient`, so that an app's
    /// actors can call others with the one token the app holds (calling
    /// is less than hosting; the reverse is not allowed).
    also: Option<Arc<Tokens>>,
}

impl Guard {
    pub fn new(required: Option<Arc<Tokens>>) -> Self {
        Self {
            required,
            also: None,
        }
    }

    pub fn or(mut self, also: Option<Arc<Tokens>>) -> Self {
        self.also = also;
        self
    }
}

impl tonic::service::Interceptor for Guard {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(required) = &self.required else {
            return Ok(request);
        };
        match required.check(request.metadata()) {
            Ok(()) => Ok(request),
            Err(_)
                if self
                    .also
                    .as_ref()
                    .is_some_and(|also| also.check(request.metadata()).is_ok()) =>
            {
                Ok(request)
            }
            Err(status) => Err(status),
        }
    }
}
