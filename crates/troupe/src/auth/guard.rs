//! The server side: which token a service wants, as a tonic interceptor.

use std::sync::Arc;

use tonic::{Request, Status};
use troupe_transport::link::Admit;

use super::refusals::{Reason, Refusals};
use super::{Credential, Place, Tokens};

/// The interceptor for one service: lets a request through when its
/// credential is not required or a token it accepts was sent.
#[derive(Debug, Clone)]
pub struct Guard {
    required: Option<Arc<Tokens>>,
    /// Also accepted: the app token on `ActorClient`, so that an app's
    /// actors can call others with the one token the app holds (calling
    /// is less than hosting; the reverse is not allowed).
    also: Option<Arc<Tokens>>,
    /// Also accepted, for the methods that only read: the read-only token.
    /// The service must be [`super::Stamped`], or every method is denied.
    readers: Option<Arc<Tokens>>,
    /// With TLS: the connection's certificate must name a cluster member.
    members: Option<troupe_tls::Tls>,
    /// Puts the credential that let a request in into its extensions
    /// ([`Caller`]), for the audit trail.
    identify: bool,
    /// Where refusals are counted, and the service they are counted under.
    refusals: Option<(Refusals, &'static str)>,
}

/// Which credential, and which of its tokens, let a request in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub credential: Credential,
    pub token: Arc<Place>,
}

impl Caller {
    /// How the audit trail names the credential.
    pub fn name(&self) -> &'static str {
        match self.credential {
            Credential::Api => "api token",
            Credential::App => "app token",
            Credential::Read => "read-only token",
        }
    }
}

impl Guard {
    pub fn new(required: Option<Arc<Tokens>>) -> Self {
        Self {
            required,
            also: None,
            readers: None,
            members: None,
            identify: false,
            refusals: None,
        }
    }

    /// Counts and logs the requests it refuses under `service`, showing
    /// each refusal it can make at 0 until the first; so it goes last,
    /// once the guard knows what it checks.
    pub fn counting(mut self, refusals: &Refusals, service: &'static str) -> Self {
        refusals.count_from_zero(service, &self.refusable());
        self.refusals = Some((refusals.clone(), service));
        self
    }

    /// The reasons it can refuse a request for, as built.
    fn refusable(&self) -> Vec<Reason> {
        let mut reasons = Vec::new();
        if self.members.is_some() {
            reasons.push(Reason::NotMember);
        }
        if self.required.is_some() {
            reasons.extend([Reason::NoToken, Reason::BadToken]);
            if self.readers.is_some() {
                reasons.push(Reason::ReadOnly);
            }
        }
        reasons
    }

    /// Also requires a cluster member's certificate, when TLS is on.
    pub fn members_only(mut self, tls: Option<troupe_tls::Tls>) -> Self {
        self.members = tls;
        self
    }

    pub fn or(mut self, also: Option<Arc<Tokens>>) -> Self {
        self.also = also;
        self
    }

    /// Names the credential of each request it lets in ([`Caller`]): on
    /// the admin API, whose changes are audited, and not on the hot paths,
    /// where the extension would cost every call.
    pub fn identifying(mut self) -> Self {
        self.identify = true;
        self
    }

    /// Also lets the read-only token through, to the methods that read.
    pub fn or_read_only(mut self, readers: Option<Arc<Tokens>>) -> Self {
        self.readers = readers;
        self
    }

    /// The same check for framed links, which carry their token in their
    /// hello: it goes through this interceptor as an RPC's metadata would,
    /// with the connection's information (its certificates under TLS) where
    /// tonic puts it, so both protocols are held to one rule and refused
    /// with the same words.
    pub fn admit<C: Clone + Send + Sync + 'static>(self) -> Admit<C> {
        Arc::new(move |authorization: &str, info: &C| {
            let mut request = Request::new(());
            if !authorization.is_empty() {
                let value = authorization.parse().map_err(|_| {
                    Status::unauthenticated(
                        "the link's authorization is not a valid header value; send \
                         `Bearer <token>` with a token this daemon accepts",
                    )
                })?;
                request.metadata_mut().insert("authorization", value);
            }
            request.extensions_mut().insert(info.clone());
            tonic::service::Interceptor::call(&mut self.clone(), request).map(|_| ())
        })
    }
}

impl Guard {
    fn decide(&self, request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(tls) = &self.members {
            let certs = request.peer_certs();
            if let Err(refused) = tls.check_member(certs.as_deref().map(Vec::as_slice)) {
                let status = Status::unauthenticated(format!(
                    "only cluster members may open links to this daemon: {refused}"
                ));
                return Err(self.refuse(Reason::NotMember, status, &request));
            }
        }
        let Some(required) = &self.required else {
            return Ok(request);
        };
        let named = match self.named(required, &request) {
            Ok(named) => named,
            Err(status) => {
                let also = self.also.as_deref();
                if let Some(named) = also.and_then(|also| self.named(also, &request).ok()) {
                    named
                } else if let Some(readers) = self
                    .readers
                    .as_deref()
                    .filter(|readers| readers.accepts(request.metadata()))
                {
                    // Counted only once let in: a token refused for the
                    // method it was sent to did not let anyone in.
                    if let Err(status) = super::read_only::allows(&request) {
                        return Err(self.refuse(Reason::ReadOnly, status, &request));
                    }
                    self.named(readers, &request)?
                } else {
                    let reason = Reason::of_missing_or_wrong(request.metadata());
                    return Err(self.refuse(reason, status, &request));
                }
            }
        };
        let mut request = request;
        if let Some(caller) = named {
            request.extensions_mut().insert(caller);
        }
        Ok(request)
    }

    /// Whether `tokens` let `request` in, counting the token's use; names
    /// the caller when this guard identifies them.
    fn named(&self, tokens: &Tokens, request: &Request<()>) -> Result<Option<Caller>, Status> {
        let metadata = request.metadata();
        let from = || request.remote_addr();
        if !self.identify {
            return tokens.check(metadata, from).map(|()| None);
        }
        let token = tokens.check_naming(metadata, from)?;
        Ok(Some(Caller {
            credential: tokens.credential(),
            token,
        }))
    }

    /// Counts `request`'s refusal, if this guard counts, and hands `status`
    /// back. The peer address is looked up here, off the path of the
    /// requests let in.
    fn refuse(&self, reason: Reason, status: Status, request: &Request<()>) -> Status {
        if let Some((refusals, service)) = &self.refusals {
            refusals.record(service, reason, request.remote_addr());
        }
        status
    }
}

impl tonic::service::Interceptor for Guard {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        self.decide(request)
    }
}
