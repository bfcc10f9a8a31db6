//! `ActorClient.WatchType`: one caller's stream of the events of every actor
//! of a type. Each daemon that hosts the type holds its own actors' events
//! (the runtime's `watch`), so the watch long-polls every one of them — this
//! daemon directly, the others over the links — and merges what comes back.
//! When the table changes, daemons that begin to host the type are polled
//! too, and those that stop are polled until they have nothing more.
//! Whether events may be missing is said only when they may: a daemon
//! polled as a new host says whether it published any before its first
//! poll, and a departed one that went away before it had nothing more
//! leaves a gap.
//!
//! A type watch's cursor is every polled daemon's cursor, joined by `.`:
//! resuming, each daemon picks its own.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::join_all;
use tokio::sync::{mpsc, watch as signal, OwnedSemaphorePermit};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::debug;
use troupe_placement::Owner;
use troupe_proto::v1 as pb;
use troupe_runtime::{Cursor, Polled, Runtime, TypeFrom, WatchedType};

use super::watch::{passes, POLL_WAIT, RETRY_FIRST, RETRY_MOST, WATCH_BUFFER};
use super::ClientApi;
use crate::convert::errors::status_of;
use crate::convert::events;

pub type WatchTypeStream = ReceiverStream<Result<pb::ActorEvent, Status>>;

/// A daemon that hosts the type, as the watch knows it: "" for this one.
type HostKey = String;

fn key_of(host: &Owner) -> HostKey {
    match host {
        Owner::Remote { node, .. } => node.clone(),
        _ => String::new(),
    }
}

/// What one daemon's poller hands the merge.
enum FromHost {
    Polled(HostKey, Polled),
    /// A daemon that no longer hosts the type became unreachable before it
    /// answered with nothing more: what it held is lost to the watch.
    Lost,
    Failed(Status),
}

impl ClientApi {
    /// A type watcher's poll forwarded by another daemon: this daemon's
    /// own actors' events, never forwarded further.
    pub async fn poll_type_events(
        &self,
        request: Request<pb::PollTypeEvents>,
    ) -> Result<pb::PolledEvents, Status> {
        let (watched, from, wait) = events::type_poll_from_pb(request.into_inner())?;
        let polled = self
            .runtime
            .poll_type_events(&Owner::Local, &watched, &from, wait)
            .await
            .map_err(status_of)?;
        Ok(pb::PolledEvents {
            new_host_checked: from == TypeFrom::NewHost,
            ..events::polled_to_pb(polled)
        })
    }

    pub(super) async fn open_type_watch(
        &self,
        request: Request<pb::WatchTypeRequest>,
    ) -> Result<Response<WatchTypeStream>, Status> {
        let held = self.watch_permit()?;
        let r = request.into_inner();
        let watched = events::watched_type(&r.r#type, &r.id_prefix)?;
        let ty = watched.ty.clone();
        let from = TypeFrom::after(events::type_cursors(&r.after)?);
        let hosts = self.runtime.type_hosts(&ty);
        // Right after start, apps are still connecting across the cluster:
        // the watch waits for a host, following the table, as a call would.
        if hosts.is_empty() && from == TypeFrom::Now && !self.runtime.awaiting_apps() {
            return Err(Status::not_found(format!(
                "no daemon of the cluster hosts actor type '{ty}'; check the name, or start the \
                 app that registers it"
            )));
        }
        // Each daemon answers at once; then it holds the type's events, and
        // the headers that go out with the response tell the caller that
        // every event from now on reaches it.
        let first = join_all(hosts.iter().map(|host| {
            self.runtime
                .poll_type_events(host, &watched, &from, Duration::ZERO)
        }))
        .await;
        let mut started = Vec::new();
        for (host, polled) in hosts.into_iter().zip(first) {
            match polled {
                Ok(polled) => started.push((host, Some(polled))),
                // A daemon away for now is polled again by its poller; what
                // it held may be missed.
                Err(e) if passes(&e) => started.push((host, None)),
                Err(e) => return Err(status_of(e)),
            }
        }
        let (tx, rx) = mpsc::channel(WATCH_BUFFER);
        let merge = Merge {
            runtime: self.runtime.clone(),
            watched,
            from,
            tx,
            _held: held,
        };
        tokio::spawn(merge.run(started));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// One type watch: its pollers, and the events they bring merged into the
/// caller's stream.
struct Merge {
    runtime: Runtime,
    watched: WatchedType,
    /// Where the caller's watch began, for the daemons polled first.
    from: TypeFrom,
    tx: mpsc::Sender<Result<pb::ActorEvent, Status>>,
    _held: OwnedSemaphorePermit,
}

/// A daemon's poller, and the flag that tells it the daemon no longer
/// hosts the type (it then stops once it has nothing more).
struct Poller {
    task: JoinHandle<()>,
    retired: signal::Sender<bool>,
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Merge {
    async fn run(self, started: Vec<(Owner, Option<Polled>)>) {
        // Room for every first answer, handed over before the merge begins.
        let room = WATCH_BUFFER.max(started.len().saturating_add(1));
        let (from_hosts, mut polled) = mpsc::channel::<FromHost>(room);
        let mut pollers: BTreeMap<HostKey, Poller> = BTreeMap::new();
        let mut cursors: BTreeMap<HostKey, Cursor> = BTreeMap::new();
        let mut missed = false;
        let mut resumes = Vec::new();
        for (host, first) in started {
            let key = key_of(&host);
            let resume = match first {
                // Queued before any poller runs, so the merge below sees
                // every first answer before what follows it.
                Some(p) => {
                    let resume = TypeFrom::After(vec![p.cursor]);
                    missed |= from_hosts
                        .try_send(FromHost::Polled(key.clone(), p))
                        .is_err();
                    resume
                }
                // Not answered yet: from the caller's cursors, or, for a
                // watch from now on, as a new host, whose answer says
                // whether it published meanwhile.
                None => match &self.from {
                    TypeFrom::Now => TypeFrom::NewHost,
                    from => from.clone(),
                },
            };
            resumes.push((key, host, resume));
        }
        for (key, host, resume) in resumes {
            pollers.insert(key, self.poller(host, resume, from_hosts.clone()));
        }
        let mut table = self.runtime.table_changes();
        let draining = self.runtime.draining();
        tokio::pin!(draining);
        loop {
            let next = tokio::select! {
                () = self.tx.closed() => return,
                () = &mut draining => {
                    let _ = self.tx.send(Err(Status::unavailable(format!(
                        "the daemon is shutting down; watch type {} again through another \
                         daemon or once it restarts, after the last event's cursor to resume",
                        self.watched.ty
                    )))).await;
                    return;
                }
                () = changed(&mut table) => {
                    self.follow_hosts(&mut pollers, &mut cursors, &from_hosts);
                    continue;
                }
                next = polled.recv() => next,
            };
            let Some(next) = next else { return };
            let (key, batch) = match next {
                FromHost::Polled(key, batch) => (key, batch),
                FromHost::Lost => {
                    self.runtime.count_lost_host(&self.watched.ty);
                    missed = true;
                    continue;
                }
                FromHost::Failed(status) => {
                    let _ = self.tx.send(Err(status)).await;
                    return;
                }
            };
            missed |= batch.missed;
            for event in batch.events {
                cursors.insert(key.clone(), event.cursor);
                let mut event = events::event_to_pb(event, std::mem::take(&mut missed));
                event.cursor = events::type_cursor_text(cursors.values());
                if self.tx.send(Ok(event)).await.is_err() {
                    return;
                }
            }
            cursors.insert(key, batch.cursor);
        }
    }

    /// Starts polling daemons that began to host the type, as new hosts
    /// (whose first answer says whether they published before it), and
    /// retires those that stopped.
    fn follow_hosts(
        &self,
        pollers: &mut BTreeMap<HostKey, Poller>,
        cursors: &mut BTreeMap<HostKey, Cursor>,
        from_hosts: &mpsc::Sender<FromHost>,
    ) {
        let hosts = self.runtime.type_hosts(&self.watched.ty);
        // Retired and done: its cursor leaves the watch's.
        pollers.retain(|_, p| !p.task.is_finished());
        cursors.retain(|key, _| pollers.contains_key(key));
        for (key, poller) in pollers.iter() {
            let hosted = hosts.iter().any(|h| key_of(h) == *key);
            poller.retired.send_replace(!hosted);
        }
        for host in hosts {
            let key = key_of(&host);
            if let std::collections::btree_map::Entry::Vacant(slot) = pollers.entry(key) {
                debug!(actor_type = %self.watched.ty, host = %slot.key(), "a type watch polls a new host");
                slot.insert(self.poller(host, TypeFrom::NewHost, from_hosts.clone()));
            }
        }
    }

    fn poller(&self, host: Owner, from: TypeFrom, to: mpsc::Sender<FromHost>) -> Poller {
        let (retired, retired_rx) = signal::channel(false);
        let task = tokio::spawn(poll_host(
            self.runtime.clone(),
            self.watched.clone(),
            host,
            from,
            to,
            retired_rx,
        ));
        Poller { task, retired }
    }
}

/// Long-polls one daemon's stream of the type until the watch ends, or the
/// daemon no longer hosts the type and has nothing more.
async fn poll_host(
    runtime: Runtime,
    watched: WatchedType,
    host: Owner,
    mut from: TypeFrom,
    to: mpsc::Sender<FromHost>,
    retired: signal::Receiver<bool>,
) {
    let key = key_of(&host);
    let mut pause = RETRY_FIRST;
    loop {
        // A new daemon's first poll waits for nothing: it begins holding.
        let wait = match from {
            TypeFrom::After(_) => POLL_WAIT,
            TypeFrom::Now | TypeFrom::NewHost => Duration::ZERO,
        };
        match runtime.poll_type_events(&host, &watched, &from, wait).await {
            Ok(polled) => {
                pause = RETRY_FIRST;
                let idle = polled.events.is_empty() && !polled.missed;
                from = TypeFrom::After(vec![polled.cursor]);
                if *retired.borrow() && idle {
                    return;
                }
                if to
                    .send(FromHost::Polled(key.clone(), polled))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Err(_) if *retired.borrow() => {
                let _ = to.send(FromHost::Lost).await;
                return;
            }
            Err(e) if passes(&e) => {
                debug!(actor_type = %watched.ty, host = %key, error = %e, "a type watch's poll failed; polling again");
                // Retired meanwhile: one more try says at once whether it
                // is gone, rather than after the pause.
                let mut retired_now = retired.clone();
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    _ = retired_now.wait_for(|r| *r) => {}
                }
                pause = pause.saturating_mul(2).min(RETRY_MOST);
            }
            Err(e) => {
                let _ = to.send(FromHost::Failed(status_of(e))).await;
                return;
            }
        }
    }
}

/// Resolves when the table changes; never on a single daemon.
async fn changed(table: &mut Option<signal::Receiver<u64>>) {
    match table {
        Some(rx) => {
            if rx.changed().await.is_err() {
                *table = None;
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}
