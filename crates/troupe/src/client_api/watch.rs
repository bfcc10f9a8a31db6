//! `ActorClient.Watch`: one caller's stream of an actor's events, made of
//! long polls at the actor's owner. A poll takes the path of every
//! per-actor request (answered here, or forwarded over a link), so a watch
//! follows its actor when it moves; the runtime's `watch` module holds the
//! events and says when some may have been missed.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::debug;
use troupe_proto::v1 as pb;
use troupe_runtime::{
    ActorId, ActorRequest, ActorResponse, CallError, Cursor, Polled, RequestContext, Runtime,
    POLL_SLACK,
};

use super::{mismatch, ClientApi};
use crate::convert::errors::status_of;
use crate::convert::requests::{PbRequest, PbResponse};
use crate::convert::{self, events};

pub type WatchStream = ReceiverStream<Result<pb::ActorEvent, Status>>;

/// How long one poll waits at the owner before the next is sent.
pub(super) const POLL_WAIT: Duration = Duration::from_secs(10);
/// Events on their way to one watcher. A watcher slower than its actor
/// holds its polls back; the owner keeps what it holds, and the watcher is
/// told of what it missed.
pub(super) const WATCH_BUFFER: usize = 64;
/// Watches open at once on one daemon.
pub const MAX_WATCHES: usize = 65_536;
/// Pauses before polling again after a failure that passes (the actor
/// moving, its owner leaving or overloaded).
pub(super) const RETRY_FIRST: Duration = Duration::from_millis(100);
pub(super) const RETRY_MOST: Duration = Duration::from_secs(2);

/// A daemon's open watches: a permit per watch, at most [`MAX_WATCHES`].
pub fn watch_permits() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(MAX_WATCHES))
}

impl ClientApi {
    /// A watcher's poll forwarded by another daemon: answered as one from
    /// a watcher here would be.
    pub async fn poll_events(
        &self,
        request: Request<pb::PollEvents>,
    ) -> Result<pb::PolledEvents, Status> {
        let (headers, extensions, r) = request.into_parts();
        match self
            .answer(&headers, &extensions, PbRequest::PollEvents(r))
            .await?
        {
            PbResponse::Events(polled) => Ok(polled),
            other => Err(mismatch(other)),
        }
    }

    /// A watch's place among the daemon's open watches.
    pub(super) fn watch_permit(&self) -> Result<OwnedSemaphorePermit, Status> {
        self.watches.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "this daemon has {MAX_WATCHES} watches open, as many as it serves; end watches \
                 you no longer read, or watch through another daemon"
            ))
        })
    }

    pub(super) async fn open_watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<WatchStream>, Status> {
        let held = self.watch_permit()?;
        let r = request.into_inner();
        let actor = convert::actor_id(r.actor)?;
        let after = events::cursor(&r.after)?;
        // Waits for nothing: once it is answered the owner holds the
        // actor's events, so the headers that go out with the response
        // tell the caller that every event from now on reaches it.
        let first = poll(&self.runtime, &actor, after, Duration::ZERO)
            .await
            .map_err(status_of)?;
        let (tx, rx) = mpsc::channel(WATCH_BUFFER);
        tokio::spawn(follow(self.runtime.clone(), actor, first, tx, held));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

async fn poll(
    runtime: &Runtime,
    actor: &ActorId,
    after: Option<Cursor>,
    wait: Duration,
) -> Result<Polled, CallError> {
    let request = ActorRequest::PollEvents {
        actor: actor.clone(),
        after,
        wait,
    };
    let context = RequestContext {
        timeout: Some(wait.saturating_add(POLL_SLACK)),
        ..RequestContext::default()
    };
    match runtime.request(request, context).await? {
        ActorResponse::Events(polled) => Ok(*polled),
        other => Err(CallError::Internal(format!(
            "a watch's poll was answered with {other:?}"
        ))),
    }
}

/// Whether a poll that failed so may work if sent again.
pub(super) fn passes(error: &CallError) -> bool {
    matches!(
        error,
        CallError::Unavailable(_)
            | CallError::Overloaded(_)
            | CallError::RemoteOverloaded { .. }
            | CallError::MemoryPressure(_)
            | CallError::DeadlineExceeded(_)
    )
}

/// Sends the events of each poll on, until the caller leaves or the daemon
/// shuts down.
async fn follow(
    runtime: Runtime,
    actor: ActorId,
    mut polled: Polled,
    tx: mpsc::Sender<Result<pb::ActorEvent, Status>>,
    _held: OwnedSemaphorePermit,
) {
    let draining = runtime.draining();
    tokio::pin!(draining);
    let mut missed = false;
    let mut pause = RETRY_FIRST;
    loop {
        missed |= polled.missed;
        for event in std::mem::take(&mut polled.events) {
            let event = events::event_to_pb(event, std::mem::take(&mut missed));
            if tx.send(Ok(event)).await.is_err() {
                return;
            }
        }
        let cursor = polled.cursor;
        polled = loop {
            let next = tokio::select! {
                () = tx.closed() => return,
                () = &mut draining => {
                    let _ = tx.send(Err(Status::unavailable(format!(
                        "the daemon is shutting down; watch {actor} again through another \
                         daemon or once it restarts, after the last event's cursor to resume"
                    )))).await;
                    return;
                }
                next = poll(&runtime, &actor, Some(cursor), POLL_WAIT) => next,
            };
            match next {
                Ok(polled) => {
                    pause = RETRY_FIRST;
                    break polled;
                }
                Err(e) if passes(&e) => {
                    debug!(actor = %actor, error = %e, "a watch's poll failed; polling again");
                    tokio::select! {
                        () = tx.closed() => return,
                        () = tokio::time::sleep(pause) => {}
                    }
                    pause = pause.saturating_mul(2).min(RETRY_MOST);
                }
                Err(e) => {
                    let _ = tx.send(Err(status_of(e))).await;
                    return;
                }
            }
        };
    }
}
