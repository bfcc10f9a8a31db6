//! The store's side of an operator's change to a held actor
//! (`lifecycle::purge`, `lifecycle::edit_state`): its last changes written
//! and forgotten under the write lock, so that no batch holding them is in
//! flight while the store changes its records, or lands after; the change
//! itself outside it.

use std::sync::Arc;

use bytes::Bytes;
use troupe_storage::{ActorWrite, Epoch, PurgedActor, StoreError};

use super::Flusher;
use crate::activation::{Activation, Inner};
use crate::error::{abridged_list, CallError, Unavailable};
use crate::expiry;
use crate::types::{ActorId, StateChange, StateSnapshot};

impl Flusher {
    /// Writes what `act` (the held actor's activation, if one is left) has
    /// not written yet, then lets `forget` drop what it holds of the store
    /// under its lock.
    ///
    /// Taking the lock waits out every batch in flight that could hold this
    /// actor's changes, and none taken after can (its activation forgot
    /// them, and the hold keeps it unloaded): the operator's change that
    /// follows runs outside the lock, so the other actors' flushes (and the
    /// durable replies waiting for them) go on meanwhile.
    pub(crate) async fn settle_held(
        &self,
        act: Option<&Arc<Activation>>,
        forget: impl FnOnce(&mut Inner),
    ) -> Result<(), CallError> {
        let _guard = self.write_lock.lock().await;
        if let Some(act) = act {
            // Changes made before the hold was taken are written first:
            // their callers may hold replies that wait for them, which
            // then say they were stored, as they were, before the change.
            self.write_actor_locked(act).await?;
            forget(&mut act.inner.lock());
        }
        Ok(())
    }

    /// Has the store remove a settled actor's records.
    pub(crate) async fn purge_stored(
        &self,
        actor: &ActorId,
        epoch: Option<Epoch>,
    ) -> Result<PurgedActor, CallError> {
        self.store
            .purge_actor(&actor.ty, &actor.id, epoch)
            .await
            .map_err(|e| store_failure(actor, "cannot purge the stored records of", e))
    }

    /// Applies `changes` (with the expiry times they set or end, as of
    /// `now_ms`) to a settled actor's stored state in one atomic, fenced
    /// write if every one of `expect` holds; answers each changed key as it
    /// was, in `changes`' order (`None`: the actor did not have it), and the
    /// first expiry time if the edit moved it earlier. Exact, since only
    /// this daemon writes the actor and its hold keeps it unloaded.
    pub(crate) async fn edit_stored(
        &self,
        actor: &ActorId,
        epoch: Option<Epoch>,
        changes: &[StateChange],
        expect: &[StateChange],
        now_ms: u64,
    ) -> Result<(Vec<StateChange>, Option<u64>), CallError> {
        let stored: StateSnapshot = self
            .store
            .load(&actor.ty, &actor.id)
            .await
            .map_err(|e| store_failure(actor, "cannot read the stored state of", e))?
            .into_iter()
            .collect();
        self.write_edit(actor, epoch, stored, changes, expect, now_ms)
            .await
    }

    /// [`Flusher::edit_stored`] on `stored`, the settled actor's stored
    /// state as just read.
    pub(crate) async fn write_edit(
        &self,
        actor: &ActorId,
        epoch: Option<Epoch>,
        mut stored: StateSnapshot,
        changes: &[StateChange],
        expect: &[StateChange],
        now_ms: u64,
    ) -> Result<(Vec<StateChange>, Option<u64>), CallError> {
        check_expected(actor, |key| stored.get(key), expect)?;
        let before = changes
            .iter()
            .map(|change| StateChange {
                key: change.key.clone(),
                value: stored.get(&change.key).cloned(),
                ttl_ms: None,
            })
            .collect();
        let first_before = expiry::earliest(&stored);
        let timed = expiry::with_times(&stored, changes, || now_ms);
        stored.apply(&timed);
        let first = expiry::first_if_earlier(first_before, &stored);
        let write = ActorWrite {
            actor_type: actor.ty.to_string(),
            actor_id: actor.id.to_string(),
            epoch,
            changes: timed
                .iter()
                .map(|change| (change.key.clone(), change.value.clone()))
                .collect(),
            inbox: Vec::new(),
            records: Vec::new(),
        };
        let fenced = self
            .store
            .write_batch(std::slice::from_ref(&write))
            .await
            .map_err(|e| store_failure(actor, "cannot write the edited state of", e))?;
        if !fenced.is_empty() {
            return Err(Unavailable::Fenced {
                actor: actor.clone(),
            }
            .into());
        }
        Ok((before, first))
    }
}

/// Whether each expected key holds its value (or is absent, as expected)
/// in `held` (the store's state, or an activation's). The refusal names
/// the keys and what they hold by size only: state may hold secrets, and
/// refusals reach the audit log.
pub(crate) fn check_expected<'s>(
    actor: &ActorId,
    held: impl Fn(&str) -> Option<&'s Bytes>,
    expect: &[StateChange],
) -> Result<(), CallError> {
    let differ: Vec<String> = expect
        .iter()
        .filter_map(|e| match (held(&e.key), &e.value) {
            (held, wanted) if held == wanted.as_ref() => None,
            (None, _) => Some(format!("{:?} is absent", e.key)),
            (Some(held), None) => Some(format!("{:?} holds a value ({})", e.key, size(held))),
            (Some(held), Some(_)) => {
                Some(format!("{:?} holds another value ({})", e.key, size(held)))
            }
        })
        .collect();
    if differ.is_empty() {
        return Ok(());
    }
    Err(CallError::Conflict(format!(
        "the state of {actor} is not what the edit expects: {}; nothing changed. Read it again \
         (troupe state get) and decide anew",
        abridged_list(&differ, 8)
    )))
}

fn size(value: &Bytes) -> String {
    match value.len() {
        1 => "1 byte".to_owned(),
        n => format!("{n} bytes"),
    }
}

/// A store's refusal as the caller's error: fenced means another daemon
/// owns the actor now.
fn store_failure(actor: &ActorId, what: &str, e: StoreError) -> CallError {
    match e {
        StoreError::Fenced { .. } => Unavailable::Fenced {
            actor: actor.clone(),
        }
        .into(),
        e => Unavailable::store(format!("{what} {actor}"), e).into(),
    }
}
