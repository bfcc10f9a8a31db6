//! One long poll at the actor's owner: answered at once when events wait,
//! else when one is published, the placement table changes (the actor may
//! be another daemon's now: the watcher's next poll finds out) or the
//! poll's time is up.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use troupe_placement::Owner;

use super::{Cursor, Polled, Take, TypeFrom, WatchedType, MAX_EVENTS_PER_TURN};
use crate::error::CallError;
use crate::forwarding::Peer;
use crate::runtime::Runtime;
use crate::shared::Shared;
use crate::shutdown::Stage;
use crate::types::{ActorId, Payload};

/// The longest one poll waits: a watcher re-polls, so this only bounds how
/// long a link carries a quiet poll.
pub const MAX_POLL_WAIT: Duration = Duration::from_secs(15);
/// A poll's deadline beyond its wait: time to reach the daemon that
/// answers it and back, and to wait out a move.
pub const POLL_SLACK: Duration = Duration::from_secs(5);

impl Runtime {
    /// Resolves once the daemon begins shutting down: long-lived streams
    /// (watches) end then, so the server can close.
    pub fn draining(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.shared.shutdown.reached(Stage::Draining)
    }

    /// The daemons whose actors of `ty` publish events now: each to be
    /// polled by a watch of the whole type.
    pub fn type_hosts(&self, ty: &str) -> Vec<Owner> {
        self.shared.placement.hosts_of(ty)
    }

    /// A type watch served here lost what a daemon that went away held for
    /// it: counted with the gaps polls answer (`troupe_watch_gaps_total`).
    pub fn count_lost_host(&self, ty: &Arc<str>) {
        if let Some(metrics) = &self.shared.metrics {
            metrics.watch_gap(ty);
        }
    }

    /// Whether a new watch of a type no daemon hosts waits for one (the
    /// daemon started less than `--host-wait` ago, while apps connect)
    /// rather than being refused as a typo.
    pub fn awaiting_apps(&self) -> bool {
        self.shared.awaiting_apps()
    }

    /// Ticks when the placement table changes (and so, maybe, a type's
    /// hosts); `None` on a single daemon, whose table never does.
    pub fn table_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.shared.placement.changes()
    }

    /// One long poll of the events the actors of a type publish on `host`
    /// (one of [`Runtime::type_hosts`]), those `watched` wants, from
    /// `from` on, or the first published within `wait`.
    pub async fn poll_type_events(
        &self,
        host: &Owner,
        watched: &WatchedType,
        from: &TypeFrom,
        wait: Duration,
    ) -> Result<Polled, CallError> {
        watched.validate()?;
        match host {
            Owner::Remote { node, address } => {
                let peer = Peer {
                    node: node.clone(),
                    address: address.clone(),
                };
                match self.shared.forwarder.get() {
                    Some(forwarder) => forwarder.poll_type_events(&peer, watched, from, wait).await,
                    None => Err(peer.unreachable()),
                }
            }
            _ => {
                let deadline = Instant::now() + self.shared.config.call_timeout;
                self.shared
                    .poll_type_events_here(watched, from, wait, deadline)
                    .await
            }
        }
    }
}

impl Shared {
    pub(crate) async fn poll_events_here(
        self: &Arc<Self>,
        actor: &ActorId,
        after: Option<Cursor>,
        wait: Duration,
        deadline: Instant,
    ) -> Result<Polled, CallError> {
        self.check_new_watch(&actor.ty, after.is_none())?;
        let until = deadline.min(Instant::now() + wait.min(MAX_POLL_WAIT));
        let polled = self
            .wait_for_events(
                until,
                |resume| self.events.take(actor, resume.or(after), Instant::now()),
                || self.events.done_waiting(actor, Instant::now()),
            )
            .await?;
        self.count_gap(&actor.ty, &polled);
        Ok(polled)
    }

    /// One long poll of the events the actors of a type publish on this
    /// daemon, those `watched` wants, from `from` on.
    pub(crate) async fn poll_type_events_here(
        self: &Arc<Self>,
        watched: &WatchedType,
        from: &TypeFrom,
        wait: Duration,
        deadline: Instant,
    ) -> Result<Polled, CallError> {
        self.check_new_watch(&watched.ty, from.begins())?;
        let published_before = || self.hosts.published_events(&watched.ty);
        let until = deadline.min(Instant::now() + wait.min(MAX_POLL_WAIT));
        let polled = self
            .wait_for_events(
                until,
                |resume| match resume {
                    Some(cursor) => self.events.take_type(
                        watched,
                        &TypeFrom::After(vec![cursor]),
                        Instant::now(),
                        published_before,
                    ),
                    None => self
                        .events
                        .take_type(watched, from, Instant::now(), published_before),
                },
                || self.events.done_waiting_type(&watched.ty, Instant::now()),
            )
            .await?;
        self.count_gap(&watched.ty, &polled);
        Ok(polled)
    }

    /// A watcher told that events may be missing is what an operator looks
    /// for when a dashboard shows gaps (`troupe_watch_gaps_total`).
    fn count_gap(&self, ty: &Arc<str>, polled: &Polled) {
        if let (true, Some(metrics)) = (polled.missed, &self.metrics) {
            metrics.watch_gap(ty);
        }
    }

    /// A new watch (`new`: from no cursor) of a type nobody hosts is most
    /// likely a typo: told so, as a call would be (after the start-up
    /// grace, while apps reconnect). A watch under way goes on while its
    /// app is away.
    fn check_new_watch(&self, ty: &str, new: bool) -> Result<(), CallError> {
        if new && self.hosts.options(ty).is_none() && !self.awaiting_apps() {
            return Err(self.unknown_type(ty));
        }
        Ok(())
    }

    /// What `take` finds at once (called with `None`), else what it finds
    /// after its cursor once an event is published, with nothing when the
    /// table changes (an actor watched alone may have moved: the watcher's
    /// next poll finds out), the daemon drains or `until` passes. `done`
    /// ends a wait `take` began. Woken by events this poll does not want
    /// (another actor's, past a type watch's id prefix), it waits on, past
    /// them, rather than answer with nothing.
    async fn wait_for_events(
        &self,
        until: Instant,
        take: impl Fn(Option<Cursor>) -> Result<Take, CallError>,
        done: impl Fn(),
    ) -> Result<Polled, CallError> {
        let (mut cursor, mut published) = match take(None)? {
            Take::Ready(polled) => return Ok(polled),
            Take::Wait(cursor, published) => (cursor, published),
        };
        let changes = self.placement.changes();
        let table_changed = async move {
            match changes {
                // A table that can no longer change never wakes the poll.
                Some(mut changes) => {
                    if changes.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending().await,
            }
        };
        tokio::pin!(table_changed);
        loop {
            let woke = tokio::select! {
                r = published.changed() => r.is_ok(),
                () = &mut table_changed => false,
                () = self.shutdown.reached(Stage::Draining) => false,
                () = tokio::time::sleep_until(until) => false,
            };
            done();
            if !woke {
                break;
            }
            match take(Some(cursor))? {
                Take::Ready(polled) => return Ok(polled),
                Take::Wait(at, next) => (cursor, published) = (at, next),
            }
        }
        Ok(Polled {
            events: Vec::new(),
            cursor,
            missed: false,
        })
    }

    /// Checks a turn's events before it commits: a turn whose events are
    /// refused fails like one whose state changes are.
    pub(crate) fn check_events(&self, events: &[Payload]) -> Result<(), CallError> {
        if events.len() > MAX_EVENTS_PER_TURN {
            return Err(CallError::InvalidArgument(format!(
                "the turn published {} events, more than the {MAX_EVENTS_PER_TURN} one turn may; \
                 its changes were discarded. Publish fewer, larger events",
                events.len()
            )));
        }
        let limit = self.config.max_payload_bytes;
        if let Some(big) = events.iter().find(|e| e.len() > limit) {
            return Err(CallError::InvalidArgument(format!(
                "the turn published an event of {} bytes, more than the daemon's \
                 --max-payload-bytes ({limit}); its changes were discarded. Publish a smaller \
                 event (a reference to the data, say)",
                big.len()
            )));
        }
        Ok(())
    }
}
