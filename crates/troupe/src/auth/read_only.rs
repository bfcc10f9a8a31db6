//! The read-only token's reach: the methods that inspect and change
//! nothing (status, actors and their state and events, reminders, dead
//! letters, reflection), and the stamp that tells a guard which method a request
//! calls, since tonic hands interceptors the metadata but not the path.
//!
//! The list names what the token may call rather than what it may not, so
//! a method added to the API stays closed to it until someone decides.

use std::task::{Context, Poll};

use tonic::codegen::{http, Service};
use tonic::server::NamedService;
use tonic::{Request, Status};

/// Every method the read-only token may call, as gRPC paths.
pub const READ_ONLY_METHODS: &[&str] = &[
    "/troupe.v1.Admin/Status",
    "/troupe.v1.Admin/ListActors",
    "/troupe.v1.Admin/DescribeActor",
    "/troupe.v1.Admin/ListStoredActors",
    "/troupe.v1.Admin/ListDeadLetters",
    "/troupe.v1.Admin/GetDeadLetter",
    "/troupe.v1.ActorClient/GetState",
    "/troupe.v1.ActorClient/GetReminder",
    "/troupe.v1.ActorClient/ListReminders",
    "/troupe.v1.ActorClient/GetAlarm",
    // Events are what an actor shows the outside: a dashboard watches.
    "/troupe.v1.ActorClient/Watch",
    "/troupe.v1.ActorClient/WatchType",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
];

/// The path a request called, put in its extensions by [`Stamped`].
#[derive(Debug, Clone)]
pub struct CalledMethod(pub String);

/// Whether a request that carries the read-only token may go through:
/// when its method only reads; otherwise PERMISSION_DENIED naming the method.
pub(super) fn allows(request: &Request<()>) -> Result<(), Status> {
    let called = request.extensions().get::<CalledMethod>();
    match called {
        Some(CalledMethod(path)) if READ_ONLY_METHODS.contains(&path.as_str()) => Ok(()),
        _ => {
            let method = called.map_or("this method", |c| c.0.as_str());
            Err(Status::permission_denied(format!(
                "the read-only token may inspect (status, actors, state, reminders, dead \
                 letters) but not call {method}: send a client API token (TROUPE_API_TOKEN) \
                 for it"
            )))
        }
    }
}

/// A service whose requests carry the path they call
/// ([`CalledMethod`]), for the guard in front of it. Stamps only when a
/// read-only token is configured: otherwise no guard looks, and a call
/// should not pay for the path's copy.
#[derive(Debug, Clone)]
pub struct Stamped<S> {
    inner: S,
    stamp: bool,
}

impl<S> Stamped<S> {
    pub fn new(inner: S, stamp: bool) -> Self {
        Self { inner, stamp }
    }
}

impl<S, B> Service<http::Request<B>> for Stamped<S>
where
    S: Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        if self.stamp {
            let path = CalledMethod(request.uri().path().to_owned());
            request.extensions_mut().insert(path);
        }
        self.inner.call(request)
    }
}

impl<S: NamedService> NamedService for Stamped<S> {
    const NAME: &'static str = S::NAME;
}

#[cfg(test)]
mod tests {
    use prost::Message;
    use prost_types::FileDescriptorSet;

    use super::*;

    /// Every method of the services the token reaches, as gRPC paths.
    fn methods_of(services: &[&str]) -> Vec<String> {
        let set =
            FileDescriptorSet::decode(troupe_proto::v1::FILE_DESCRIPTOR_SET).unwrap_or_default();
        let mut out = Vec::new();
        for file in set.file {
            for service in &file.service {
                let name = format!("{}.{}", file.package(), service.name());
                if services.contains(&name.as_str()) {
                    for method in &service.method {
                        out.push(format!("/{name}/{}", method.name()));
                    }
                }
            }
        }
        out
    }

    /// A renamed method would leave its entry pointing at nothing, and the
    /// token quietly unable to call it.
    #[test]
    fn every_listed_method_exists() {
        let api = methods_of(&["troupe.v1.Admin", "troupe.v1.ActorClient"]);
        assert!(api.len() > 20, "the descriptor set lists the API: {api:?}");
        for path in READ_ONLY_METHODS {
            assert!(
                api.contains(&(*path).to_owned()) || path.starts_with("/grpc.reflection.v1."),
                "{path} is no method of the API"
            );
        }
    }

    /// What the token may not call: each changes something, runs actor
    /// code, or copies the whole store. A new method joins one list or the
    /// other by decision, which this test asks for.
    #[test]
    fn every_method_is_decided() {
        const CHANGES: &[&str] = &[
            "/troupe.v1.Admin/DeactivateActor",
            "/troupe.v1.Admin/PurgeActor",
            "/troupe.v1.Admin/EditActorState",
            "/troupe.v1.Admin/AdvanceClock",
            "/troupe.v1.Admin/RedriveDeadLetter",
            "/troupe.v1.Admin/DropDeadLetter",
            "/troupe.v1.Admin/Backup",
            "/troupe.v1.ActorClient/Invoke",
            "/troupe.v1.ActorClient/Tell",
            "/troupe.v1.ActorClient/SetReminder",
            "/troupe.v1.ActorClient/DeleteReminder",
            "/troupe.v1.ActorClient/PauseReminder",
            "/troupe.v1.ActorClient/ResumeReminder",
            "/troupe.v1.ActorClient/SetAlarm",
            "/troupe.v1.ActorClient/DeleteAlarm",
            "/troupe.v1.ActorClient/SetTimer",
            "/troupe.v1.ActorClient/DeleteTimer",
        ];
        for path in methods_of(&["troupe.v1.Admin", "troupe.v1.ActorClient"]) {
            let reads = READ_ONLY_METHODS.contains(&path.as_str());
            let changes = CHANGES.contains(&path.as_str());
            assert!(
                reads != changes,
                "{path}: put it in READ_ONLY_METHODS if it only reads, else in CHANGES here"
            );
        }
    }

    fn called(path: Option<&str>) -> Request<()> {
        let mut request = Request::new(());
        if let Some(path) = path {
            request
                .extensions_mut()
                .insert(CalledMethod(path.to_owned()));
        }
        request
    }

    #[test]
    fn reads_pass_and_the_rest_is_denied_by_name() {
        assert!(allows(&called(Some("/troupe.v1.Admin/ListActors"))).is_ok());
        let denied = allows(&called(Some("/troupe.v1.ActorClient/Invoke"))).err();
        assert!(
            denied
                .as_ref()
                .is_some_and(|s| s.code() == tonic::Code::PermissionDenied
                    && s.message().contains("/troupe.v1.ActorClient/Invoke")),
            "{denied:?}"
        );
        // Unstamped, the method is unknown: closed.
        let unknown = allows(&called(None)).err();
        assert_eq!(
            unknown.map(|s| s.code()),
            Some(tonic::Code::PermissionDenied)
        );
    }
}
