//! Idempotency keys: the answer of a keyed call is recorded with the actor,
//! in the same batch as the state changes of the turn that produced it, and
//! a later call with the same key gets that answer instead of a new turn.
//!
//! - A keyed call (not read-only, not an inbox delivery) records its answer
//!   at its turn's end, under the activation's lock, beside the turn's
//!   state changes: one flush writes both or neither, so after a crash a
//!   retry either finds the answer or finds the effects absent and runs
//!   again. For `durable` types the reply waits for that flush, as for any
//!   change.
//! - A call whose key is recorded is answered at its turn's start, before
//!   the host sees it; turns of an actor run one at a time, so an attempt
//!   queued behind the first finds its answer when its turn comes. A
//!   replay of a `durable` type waits for the flush under way, so no
//!   replay reports an answer the store may still lose.
//! - A keyed durable tell records its key with its inbox append: a retry
//!   of a stored tell is acknowledged, not stored again.
//! - Records live in memory only for live actors (`table`), loaded from the
//!   store at activation, answers only until they are stored (then a key's
//!   fingerprint, within a bound per actor and one across actors,
//!   `budget`); the store forgets them after the retention window
//!   (`sweep`).
//!
//! Read-only methods are neither recorded nor replayed: they change
//! nothing, so running them again is the cheaper answer.
//!
//! - `answer`: a recorded answer's encoding.
//! - `table`: the live actors' records; `actor_records`: one actor's.
//! - `budget`: the bound on their memory across actors.
//! - `sweep`: expiring old records.

mod actor_records;
mod answer;
mod budget;
mod sweep;
pub(crate) mod table;

use std::sync::Arc;

use troupe_storage::CallRecord;

use crate::types::KeyTerms;

pub(crate) use actor_records::{Lookup, LOAD_LIMIT};
#[cfg(test)]
pub(crate) use actor_records::{MAX_IN_MEMORY, MAX_LET_GO};
pub(crate) use answer::Answer;

use crate::activation::{Activation, Envelope, Inner};
use crate::error::{CallError, Unavailable};
use crate::host::{TurnEvents, TurnMeta, TurnOutcome};
use crate::shared::Shared;
use crate::types::{ActorId, Payload, StateSnapshot, TurnKind};

/// The key a turn for `env` answers under: a call's, unless it is
/// read-only or delivers a durable tell from the inbox (whose key was
/// recorded when it was stored).
pub(crate) fn turn_key(env: &Envelope, readonly: bool) -> Option<Box<str>> {
    if readonly || env.kind != TurnKind::Call || env.inbox.is_some() {
        return None;
    }
    env.extra.as_ref()?.idempotency_key.clone()
}

/// The meta of a turn that ends without the host: nothing to record.
fn hostless_meta(env: &Envelope, readonly: Option<Arc<str>>, replayed: bool) -> TurnMeta {
    TurnMeta {
        kind: env.kind,
        touch: env.touch,
        started: None,
        readonly,
        inbox: None,
        key: None,
        key_terms: KeyTerms::default(),
        replayed,
        cancelled: false,
    }
}

impl Shared {
    /// What memory knows of the answer for a call keyed `key` (`new_key`:
    /// its caller never sent the key before).
    pub(crate) fn recorded_answer(&self, act: &Activation, key: &str, new_key: bool) -> Lookup {
        let found = self
            .records
            .lookup(&act.id, key, crate::clock::unix_now_ms(), new_key);
        if let (Lookup::Recorded(_), Some(metrics)) = (&found, &self.metrics) {
            metrics.call_replayed(&act.id.ty);
        }
        found
    }

    /// The store's answer for `key`, for an actor whose records spilled
    /// out of memory: `Ok(None)` when none is recorded in the window.
    pub(crate) async fn stored_answer(
        &self,
        actor: &ActorId,
        key: &str,
    ) -> Result<Option<Answer>, CallError> {
        if let Some(metrics) = &self.metrics {
            metrics.record_read(&actor.ty);
        }
        let record = self
            .flusher
            .store()
            .load_record(&actor.ty, &actor.id, key)
            .await
            .map_err(|source| Unavailable::Store {
                what: format!("cannot read the call record {key:?} of actor {actor}"),
                source,
                remedy: "retry the call with the same key",
            })?;
        let cutoff = self.records.cutoff(crate::clock::unix_now_ms());
        let answer = record
            .filter(|r| r.recorded_unix_ms >= cutoff)
            .and_then(|r| answer::decode(&r.data));
        if let (Some(_), Some(metrics)) = (&answer, &self.metrics) {
            metrics.call_replayed(&actor.ty);
        }
        Ok(answer)
    }

    /// Ends a turn with its recorded answer: the method does not run.
    pub(crate) fn replay(
        self: &Arc<Self>,
        act: Arc<Activation>,
        env: Envelope,
        readonly: Option<Arc<str>>,
        answer: Answer,
    ) {
        let meta = hostless_meta(&env, readonly, true);
        let outcome = Ok(TurnOutcome {
            result: answer,
            changes: Vec::new(),
        });
        self.turn_finished(act, env.reply, &meta, None, outcome, TurnEvents::default());
    }

    /// A keyed turn whose answer only the store can give (its key is
    /// stored, or the actor's records spilled): the store says whether it was
    /// answered before, while the actor stays busy (no other turn can
    /// record the key meanwhile); then it is replayed or runs.
    pub(crate) fn ask_store_then_turn(
        self: &Arc<Self>,
        act: Arc<Activation>,
        env: Envelope,
        state: StateSnapshot,
        readonly: Option<Arc<str>>,
        key: Option<Box<str>>,
    ) {
        let shared = self.clone();
        tokio::spawn(async move {
            let asked = match key.as_deref() {
                Some(k) => shared.stored_answer(&act.id, k).await,
                None => Ok(None),
            };
            match asked {
                Ok(Some(answer)) => shared.replay(act, env, readonly, answer),
                Ok(None) => {
                    let binding = act.inner.lock().binding.clone();
                    match binding {
                        Some(binding) => {
                            shared.hand_to_host(act, &binding, env, state, readonly, key);
                        }
                        None => {
                            let error = Unavailable::Dropped {
                                actor: act.id.clone(),
                            };
                            shared.fail_turn(act, env, readonly, error.into());
                        }
                    }
                }
                Err(e) => shared.fail_turn(act, env, readonly, e),
            }
        });
    }

    /// Ends a turn that did not reach the host with `error`.
    fn fail_turn(
        self: &Arc<Self>,
        act: Arc<Activation>,
        env: Envelope,
        readonly: Option<Arc<str>>,
        error: CallError,
    ) {
        let meta = hostless_meta(&env, readonly, false);
        self.turn_finished(
            act,
            env.reply,
            &meta,
            None,
            Err(error),
            TurnEvents::default(),
        );
    }

    /// Records a keyed turn's answer beside its state changes (the
    /// activation locked). Only answers the method gave count: an error of
    /// the daemon's (timeout, lost app, fencing) left no effects, and a
    /// retry must run the method. Returns whether it recorded.
    pub(crate) fn record_answer(
        &self,
        act: &Arc<Activation>,
        inner: &mut Inner,
        key: &str,
        terms: KeyTerms,
        result: &Result<Payload, CallError>,
    ) -> bool {
        let answer = match result {
            Ok(payload) => Ok(payload.clone()),
            Err(CallError::Actor(failure)) => Err(failure.clone()),
            Err(_) => return false,
        };
        let record = self
            .records
            .record(&act.id, key, crate::clock::unix_now_ms(), terms, answer);
        self.store_record(act, inner, record);
        true
    }

    /// Puts `record` among the actor's unwritten changes.
    pub(crate) fn store_record(
        &self,
        act: &Arc<Activation>,
        inner: &mut Inner,
        record: CallRecord,
    ) {
        let bytes = record.key.len() + record.data.len();
        inner
            .dirty
            .get_or_insert_with(Default::default)
            .records
            .push(record);
        self.flusher.mark_dirty(act, inner, bytes);
    }
}
