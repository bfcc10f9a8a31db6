//! The workers: each takes activations with work off its run queue, in
//! batches, and starts their next turn (or their activation). Only the
//! thread that moves an activation out of Idle starts its turn, which is
//! what makes turns one at a time per actor; read-only calls at the head of
//! a mailbox join a running read-only group.

use std::sync::Arc;

use tracing::error;

use crate::activation::{Activation, Envelope, Inner, Status};
use crate::dispatch::run_queue::{RunQueue, Runnable};
use crate::host_registry::Binding;
use crate::shared::Shared;
use crate::shutdown::Stage;
use crate::types::TurnKind;

/// What a panic said, when it said it with a string.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)")
}

/// The method's name when `env` calls a read-only method of its type.
/// A durable tell's delivery never is: it removes its inbox entry, and a
/// held retry must not join a read-only group past its backoff.
pub(crate) fn readonly_method(binding: &Binding, env: &Envelope) -> Option<Arc<str>> {
    let readonly = &binding.options.readonly_methods;
    (env.kind == TurnKind::Call && env.inbox.is_none() && readonly.iter().any(|m| **m == *env.name))
        .then(|| env.name.clone())
}

/// Pops the read-only calls at the head of the mailbox so they run beside
/// the read-only turn(s) already running; stops at the first writer, which
/// keeps its place and waits for the group to end.
fn admit_readers(inner: &mut Inner, binding: &Binding) -> Vec<(Envelope, Arc<str>)> {
    let mut joining = Vec::new();
    while inner.extra_turns < u8::MAX {
        let Some(method) = inner
            .mailbox
            .front()
            .and_then(|e| readonly_method(binding, e))
        else {
            break;
        };
        let Some(env) = inner.mailbox.pop_front() else {
            break;
        };
        if env.abandoned() {
            continue;
        }
        inner.extra_turns += 1;
        joining.push((env, method));
    }
    joining
}

impl Shared {
    /// A worker: runs activations off its queue in batches, until the
    /// runtime stops.
    pub(crate) async fn work(self: Arc<Self>, queue: Arc<RunQueue<Runnable>>) {
        const BATCH: usize = 64;
        let mut batch = Vec::with_capacity(BATCH);
        let stopping = self.shutdown.reached(Stage::Stopping);
        tokio::pin!(stopping);
        loop {
            tokio::select! {
                () = queue.pop_batch(&mut batch, BATCH) => {}
                () = &mut stopping => return,
            }
            // With many actors busy, the activations on a run queue have gone
            // cold in cache. Touching each one first, with loads that do not
            // depend on each other, lets the CPU fetch them all at once
            // instead of stalling on them one by one.
            let mut touched = 0usize;
            for r in &batch {
                touched += usize::from(r.act.inner.is_locked());
                if let Some(env) = &r.first {
                    touched += usize::from(env.payload.data.first().copied().unwrap_or(0));
                }
            }
            std::hint::black_box(touched);
            for runnable in batch.drain(..) {
                // One request's panic (in a host's code, or a bug here) fails
                // that request and is logged; the worker goes on with the
                // rest of its queue.
                let actor = runnable.act.clone();
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.run(runnable);
                }));
                if let Err(panic) = ran {
                    error!(
                        actor = %actor.id,
                        panic = panic_message(&*panic),
                        "a turn panicked; its caller got INTERNAL and the daemon goes on"
                    );
                }
            }
            // A queue that never empties must still let timers, activations
            // and I/O on this thread run.
            tokio::task::consume_budget().await;
        }
    }

    /// A worker picked an activation off its run queue.
    fn run(self: &Arc<Self>, runnable: Runnable) {
        let Runnable { act, first } = runnable;
        let mut inner = act.inner.lock();
        inner.scheduled = false;
        // A directly dispatched call runs now if the actor is still idle;
        // otherwise it goes back to the front of the mailbox, where it belongs.
        let mut first = first.filter(|env| !env.abandoned());
        if inner.status != Status::Idle || inner.binding.is_none() {
            if let Some(env) = first.take() {
                inner.mailbox.push_front(env);
            }
        }
        match inner.status {
            // A purge or state edit of the actor wakes it when it ends.
            Status::Unloaded if !inner.mailbox.is_empty() && !self.holds.contains(&act.id) => {
                inner.status = Status::Activating;
                drop(inner);
                tokio::spawn(self.clone().activate(act));
            }
            Status::Idle => {
                let Some(binding) = inner.binding.clone() else {
                    // Idle always has a host; be safe and re-activate.
                    inner.status = Status::Unloaded;
                    inner.scheduled = true;
                    drop(inner);
                    self.schedule(act);
                    return;
                };
                let Some(env) = first.or_else(|| inner.next_envelope()) else {
                    return;
                };
                inner.status = Status::Running;
                let readonly = readonly_method(&binding, &env);
                if readonly.is_none() {
                    let state = inner.state.clone();
                    drop(inner);
                    self.start_turn(act, &binding, env, state, None);
                    return;
                }
                inner.set_reading(true);
                let state = inner.state.clone();
                self.start_readers(&act, &binding, inner);
                self.start_turn(act, &binding, env, state, readonly);
            }
            Status::Running if inner.reading() => {
                // A read-only group is running: read-only calls at the head
                // of the mailbox join it (a writer waits for all of them).
                if let Some(binding) = inner.binding.clone() {
                    self.start_readers(&act, &binding, inner);
                }
            }
            Status::Gone => {
                // Dropped (fenced) after this call was put on the run queue,
                // so the drop could not fail it: it goes to whatever
                // activation of the actor there is now, like any new call.
                let queued = inner.mailbox.take_all();
                drop(inner);
                for env in queued {
                    tokio::spawn(self.clone().reroute(act.id.clone(), env));
                }
            }
            _ => {}
        }
    }

    /// Starts the read-only calls at the head of the mailbox beside the
    /// running read-only group; takes the activation's lock guard and
    /// releases it before handing turns to the host.
    fn start_readers(
        self: &Arc<Self>,
        act: &Arc<Activation>,
        binding: &Binding,
        mut inner: parking_lot::MutexGuard<'_, Inner>,
    ) {
        let joining = admit_readers(&mut inner, binding);
        let state = inner.state.clone();
        drop(inner);
        for (env, method) in joining {
            self.start_turn(act.clone(), binding, env, state.clone(), Some(method));
        }
    }
}
