//! The in-memory store's actor inboxes and dead letters.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::ActorKey;
use crate::{DeadLetter, DeadLetterKey, InboxEntry, InboxOp};

/// Every actor's inbox and the dead letters, in key order.
#[derive(Debug, Default)]
pub(super) struct Inboxes {
    entries: BTreeMap<ActorKey, BTreeMap<u64, Bytes>>,
    pub(super) dead: BTreeMap<DeadLetterKey, DeadLetter>,
}

impl Inboxes {
    /// Applies one actor's ops of a batch.
    pub(super) fn apply(&mut self, actor: &ActorKey, ops: &[InboxOp]) {
        if ops.is_empty() {
            return;
        }
        let inbox = self.entries.entry(actor.clone()).or_default();
        for op in ops {
            match op {
                InboxOp::Append(entry) => {
                    inbox.insert(entry.seq, entry.data.clone());
                }
                InboxOp::Remove { seq } => {
                    inbox.remove(seq);
                }
                InboxOp::DeadLetter(letter) => {
                    inbox.remove(&letter.key.seq);
                    self.dead.insert(letter.key.clone(), letter.clone());
                }
            }
        }
        if inbox.is_empty() {
            self.entries.remove(actor);
        }
    }

    /// Forgets the actor's inbox entries and dead letters; returns how
    /// many of each went.
    pub(super) fn purge(&mut self, actor: &ActorKey) -> (u64, u64) {
        let entries = self.entries.remove(actor).map_or(0, |inbox| inbox.len());
        let key = |seq| DeadLetterKey {
            actor_type: actor.0.clone(),
            actor_id: actor.1.clone(),
            seq,
        };
        // Letters are ordered by actor, then seq: the actor's are one range.
        let dead: Vec<DeadLetterKey> = self
            .dead
            .range(key(0)..=key(u64::MAX))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &dead {
            self.dead.remove(k);
        }
        (entries as u64, dead.len() as u64)
    }

    pub(super) fn load(&self, actor_type: &str, actor_id: &str) -> Vec<InboxEntry> {
        let key = (actor_type.to_owned(), actor_id.to_owned());
        self.entries
            .get(&key)
            .map(|m| {
                m.iter()
                    .map(|(seq, data)| InboxEntry {
                        seq: *seq,
                        data: data.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Actors with entries, after `after`, in key order.
    /// The actors with inbox entries.
    pub(super) fn actor_keys(&self) -> impl Iterator<Item = &ActorKey> {
        self.entries.keys()
    }

    pub(super) fn actors(&self, after: Option<(&str, &str)>, limit: usize) -> Vec<ActorKey> {
        self.entries
            .keys()
            .filter(|(ty, id)| {
                after.is_none_or(|(aty, aid)| (ty.as_str(), id.as_str()) > (aty, aid))
            })
            .take(limit)
            .cloned()
            .collect()
    }

    pub(super) fn dead_letters(
        &self,
        actor_type: Option<&str>,
        after: Option<&DeadLetterKey>,
        limit: usize,
    ) -> Vec<DeadLetter> {
        self.dead
            .values()
            .filter(|d| actor_type.is_none_or(|t| d.key.actor_type == t))
            .filter(|d| after.is_none_or(|a| &d.key > a))
            .take(limit)
            .cloned()
            .collect()
    }
}
