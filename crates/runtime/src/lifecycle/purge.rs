//! Purging an actor: an operator's erasure of everything stored for it
//! (state, inbox, dead letters, call records, reminders and alarm), while
//! its activation is held off so that nothing it holds in memory is written
//! back after the store forgot it.
//!
//! The order is what makes it safe:
//! 1. the actor is held (`held_actor`): a worker leaves an activation of it
//!    unloaded (its calls wait in the mailbox), and durable tells are not
//!    sequenced (they wait too, unacknowledged);
//! 2. its activation ends as an admin's deactivation does (the running turn
//!    finishes, the app's hook runs, the state is flushed);
//! 3. with every store write held off (the flusher's write lock), whatever
//!    is still unwritten is written and the activation left behind forgets
//!    its loaded state; then, other actors' writes going on, the store
//!    removes the actor's records in one fenced, atomic purge;
//! 4. its reminders and alarm are deleted through the scheduler, which
//!    forgets the ones it loaded, and the firings that queued behind the
//!    hold (reminders, alarm, timers) are dropped;
//! 5. the hold ends and the calls that waited activate the actor afresh,
//!    on empty state.
//!
//! So a call is answered either before the purge (its effects are erased)
//! or after it (it sees none of what was there).

use std::sync::Arc;
use std::time::Duration;

use tracing::info;
use troupe_storage::PurgedActor;

use super::held_actor::HeldActor;
use crate::error::CallError;
use crate::input::millis;
use crate::runtime::Runtime;
use crate::schedule::{Due, Fired, ALARM_NAME};
use crate::shared::Shared;
use crate::types::{ActorId, TurnKind};

/// Reminders listed per page while they are deleted.
const REMINDER_PAGE: usize = 256;

/// What a purge removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    /// Whether the actor was active here (its app saw a deactivation).
    pub was_active: bool,
    /// State keys, inbox entries, dead letters and call records.
    pub stored: PurgedActor,
    /// Reminders, the alarm among them.
    pub reminders: u64,
}

impl Runtime {
    /// Removes everything stored for `actor` — state, inbox, dead letters,
    /// call records, reminders and alarm — after ending its activation;
    /// calls that arrive meanwhile wait and then find it empty. Only the
    /// daemon that owns the actor purges it.
    pub async fn purge_actor(&self, actor: &ActorId) -> Result<Purged, CallError> {
        let held = self.hold_owned_actor(actor, "purged").await?;
        self.purge_held(actor, held).await
    }

    /// Purges `firing`'s actor past its type's retention (`retention`),
    /// unless a call reached it after all: the hold found it active (its
    /// end sets the next mark), or a mark written since the firing popped
    /// (an activation that began and ended meanwhile, or an operator's
    /// pause) superseded the firing. `None` then.
    async fn expire_actor(&self, firing: &Due) -> Result<Option<Purged>, CallError> {
        let actor = &firing.actor;
        let held = self.hold_owned_actor(actor, "erased").await?;
        if held.was_active {
            return Ok(None);
        }
        // Held, it gains no marks; those on their way land first.
        let marked = self.shared.retention.settled(Some(actor));
        let _ = tokio::time::timeout(self.shared.config.call_timeout, marked).await;
        if firing.superseded() {
            return Ok(None);
        }
        self.purge_held(actor, held).await.map(Some)
    }

    async fn purge_held(&self, actor: &ActorId, held: HeldActor) -> Result<Purged, CallError> {
        let shared = &self.shared;
        let was_active = held.was_active;
        let left = shared.directory.get(actor);
        shared
            .flusher
            .settle_held(left.as_ref(), |inner| {
                for (seq, retrying) in inner.mailbox.drop_stored_tells() {
                    if retrying {
                        shared.retry_given_up(actor, seq);
                    }
                }
                inner.forget_state();
                shared.records.forget(actor);
            })
            .await?;
        let stored = shared.flusher.purge_stored(actor, held.epoch).await?;
        // A retention mark noted as its activation ended must not land
        // after its reminders are gone.
        let marked = shared.retention.settled(Some(actor));
        let _ = tokio::time::timeout(shared.config.call_timeout, marked).await;
        let reminders = self.delete_reminders_of(actor).await?;
        let dropped_firings = self.drop_waiting_firings(actor);
        info!(
            actor = %actor,
            was_active,
            state_keys = stored.state_keys,
            inbox_entries = stored.inbox_entries,
            dead_letters = stored.dead_letters,
            call_records = stored.call_records,
            reminders,
            dropped_firings,
            "purged actor"
        );
        Ok(Purged {
            was_active,
            stored,
            reminders,
        })
    }

    /// Fails the reminder, alarm and timer firings that queued behind the
    /// hold, before it ends: they carry payloads from before the purge and
    /// would otherwise run first on the emptied actor (their schedules are
    /// deleted, so the scheduler records nothing for them). How many.
    fn drop_waiting_firings(&self, actor: &ActorId) -> usize {
        self.shared.fail_waiting(
            actor,
            |env| {
                matches!(
                    env.kind,
                    TurnKind::Reminder | TurnKind::Alarm | TurnKind::Timer
                )
            },
            |env| {
                CallError::NotFound(format!(
                    "actor {actor} was purged while this {} firing waited; its schedule is gone",
                    env.kind.as_str()
                ))
            },
        )
    }

    /// Deletes the actor's reminders and alarm; how many there were.
    async fn delete_reminders_of(&self, actor: &ActorId) -> Result<u64, CallError> {
        let mut deleted = 0u64;
        let mut after: Option<String> = None;
        loop {
            let cursor = after.as_deref().map(|name| (actor, name));
            let page = self
                .list_reminders(Some(&actor.ty), Some(&actor.id), cursor, REMINDER_PAGE)
                .await?;
            for reminder in &page {
                let existed = if reminder.alarm || reminder.name == ALARM_NAME {
                    self.delete_alarm(actor).await?
                } else {
                    self.delete_reminder(actor, &reminder.name).await?
                };
                deleted = deleted.saturating_add(u64::from(existed));
            }
            match page.last() {
                Some(last) if page.len() == REMINDER_PAGE => after = Some(last.name.clone()),
                _ => return Ok(deleted),
            }
        }
    }
}

impl Shared {
    /// Erases `firing`'s actor, past its type's `retention` (`retention.rs`
    /// decided it was idle), and says how the firing went.
    pub(crate) async fn erase_expired(
        self: &Arc<Self>,
        firing: &Due,
        retention: Duration,
    ) -> Fired {
        let actor = &firing.actor;
        let runtime = Runtime {
            shared: self.clone(),
        };
        match runtime.expire_actor(firing).await {
            Ok(Some(purged)) => {
                info!(
                    actor = %actor,
                    retention_ms = millis(retention),
                    state_keys = purged.stored.state_keys,
                    reminders = purged.reminders,
                    "erased an actor past its type's retention"
                );
                Fired::Superseded
            }
            // Reached meanwhile: its newer mark decides.
            Ok(None) => Fired::Superseded,
            Err(e) => Fired::after_error(firing, e),
        }
    }
}
