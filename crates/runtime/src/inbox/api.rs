//! What callers and operators reach: `Runtime::tell_durable`, the dead
//! letters (list, show, re-drive, drop), an actor's inbox counts.

use std::sync::Arc;

use tokio::sync::oneshot;
use troupe_storage::{DeadLetterKey, StoreError};

use super::record::{self, Header};
use super::{InboxDelivery, InboxTag};
use crate::error::{CallError, Unavailable};
use crate::forwarding::{ActorRequest, ActorResponse, RequestContext};
use crate::idempotency::Lookup;
use crate::reply::{wait_reply, Reply};
use crate::routing::Route;
use crate::runtime::Runtime;
use crate::shared::Shared;
use crate::types::{ActorId, Call, CallExtra, ContentType, Payload};

/// A dead letter, decoded for people and tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterInfo {
    pub actor: ActorId,
    pub seq: u64,
    pub method: String,
    pub payload: Payload,
    pub metadata: Vec<(String, String)>,
    pub error: String,
    pub attempts: u32,
    pub failed_unix_ms: u64,
}

fn store_failed(source: StoreError) -> CallError {
    Unavailable::Store {
        what: "the state store failed".into(),
        source,
        remedy: "retry once the store is back",
    }
    .into()
}

impl Runtime {
    /// A tell stored in the actor's inbox before this returns: delivered at
    /// least once, in order per caller, across crashes and restarts; its
    /// state effects happen once (docs/delivery.md).
    pub async fn tell_durable(&self, call: Call) -> Result<(), CallError> {
        self.admit(&call)?;
        if self.shared.route(&call.actor)? == Route::Local {
            return self.shared.tell_durable_here(call).await;
        }
        // Another daemon's actor, or a moving one: acknowledged only once
        // the owner has stored it (it answers after its append is written).
        self.owner_accepts(ActorRequest::TellDurable(call)).await
    }

    /// A tell sent without a delivery mode to a daemon that does not host
    /// its type, which cannot know the type's default: the owner applies
    /// it, and this returns once the owner has answered (for a type with
    /// durable tells by default, once it stored the tell), so the caller's
    /// acknowledgement means what the type promises.
    pub async fn tell_with_owner_default(&self, call: Call) -> Result<(), CallError> {
        self.admit(&call)?;
        if self.shared.route(&call.actor)? == Route::Local {
            return self.tell(call);
        }
        self.owner_accepts(ActorRequest::Tell(call)).await
    }

    /// Sends a tell to its owner (or waits out a move) and returns once the
    /// owner accepted it.
    async fn owner_accepts(&self, request: ActorRequest) -> Result<(), CallError> {
        let context = request
            .call()
            .map(RequestContext::of_call)
            .unwrap_or_default();
        match self.shared.request(request, context).await? {
            ActorResponse::Accepted => Ok(()),
            other => Err(other.unexpected("an acceptance")),
        }
    }

    /// Whether tells to actors of `ty` sent without a delivery mode are
    /// durable (`TypeSpec::durable_tells`); `None` when no app of this
    /// daemon hosts the type, which then cannot know its default.
    pub fn durable_tells_by_default(&self, ty: &str) -> Option<bool> {
        self.shared.hosts.options(ty).map(|o| o.durable_tells)
    }

    /// Dead letters (of one type when set), after `after`, at most `limit`.
    pub async fn list_dead_letters(
        &self,
        actor_type: Option<&str>,
        after: Option<(&ActorId, u64)>,
        limit: usize,
    ) -> Result<Vec<DeadLetterInfo>, CallError> {
        let after = after.map(|(actor, seq)| key_of(actor, seq));
        let letters = self
            .shared
            .flusher
            .store()
            .list_dead_letters(actor_type, after.as_ref(), limit)
            .await
            .map_err(store_failed)?;
        Ok(letters.into_iter().map(info_of).collect())
    }

    pub async fn get_dead_letter(
        &self,
        actor: &ActorId,
        seq: u64,
    ) -> Result<Option<DeadLetterInfo>, CallError> {
        let letter = self
            .shared
            .flusher
            .store()
            .get_dead_letter(&key_of(actor, seq))
            .await
            .map_err(store_failed)?;
        Ok(letter.map(info_of))
    }

    /// Forgets a dead letter; whether it existed.
    pub async fn drop_dead_letter(&self, actor: &ActorId, seq: u64) -> Result<bool, CallError> {
        let existed = self.forget_dead_letter(actor, seq).await?;
        if existed {
            self.shared.inbox_stats.for_type(&actor.ty).dropped();
        }
        Ok(existed)
    }

    async fn forget_dead_letter(&self, actor: &ActorId, seq: u64) -> Result<bool, CallError> {
        self.shared
            .flusher
            .store()
            .remove_dead_letter(&key_of(actor, seq))
            .await
            .map_err(store_failed)
    }

    /// Sends a dead letter again as a new durable tell (stored first), then
    /// forgets it. A crash in between leaves both: delivery stays at least
    /// once. `false` when there was no such letter.
    pub async fn redrive_dead_letter(&self, actor: &ActorId, seq: u64) -> Result<bool, CallError> {
        let Some(info) = self.get_dead_letter(actor, seq).await? else {
            return Ok(false);
        };
        let mut call = Call::new(info.actor.clone(), info.method.as_str(), info.payload);
        if !info.metadata.is_empty() {
            call.extra = Some(Box::new(crate::types::CallExtra {
                metadata: info.metadata,
                ..Default::default()
            }));
        }
        self.tell_durable(call).await?;
        // Counted once stored again, whoever else forgets it meanwhile.
        self.shared.inbox_stats.for_type(&actor.ty).redriven();
        self.forget_dead_letter(actor, seq).await?;
        Ok(true)
    }
}

fn key_of(actor: &ActorId, seq: u64) -> DeadLetterKey {
    DeadLetterKey {
        actor_type: actor.ty.to_string(),
        actor_id: actor.id.to_string(),
        seq,
    }
}

fn info_of(letter: troupe_storage::DeadLetter) -> DeadLetterInfo {
    let (header, payload) = record::decode(&letter.data).unwrap_or_else(|| {
        (
            Header {
                method: "$corrupt".into(),
                bytes: true,
                metadata: Vec::new(),
            },
            Payload {
                data: letter.data.clone(),
                content_type: ContentType::Bytes,
            },
        )
    });
    DeadLetterInfo {
        actor: ActorId::new(letter.key.actor_type.as_str(), letter.key.actor_id.as_str()),
        seq: letter.key.seq,
        method: header.method,
        payload,
        metadata: header.metadata,
        error: letter.error,
        attempts: letter.attempts,
        failed_unix_ms: letter.failed_unix_ms,
    }
}

/// The most dead letters of one actor an actor's description counts.
const DESCRIBE_DEAD_LETTERS: usize = 1_000;

impl Shared {
    /// Stored inbox entries and dead letters of `actor`, for its description.
    pub(crate) async fn inbox_counts(&self, actor: &ActorId) -> Result<(usize, usize), CallError> {
        let store = self.flusher.store();
        let depth = store
            .load_inbox(&actor.ty, &actor.id)
            .await
            .map_err(store_failed)?
            .len();
        // Dead letters are ordered by (type, id, seq): the actor's come
        // right after (type, id, 0).
        let letters = store
            .list_dead_letters(
                Some(&actor.ty),
                Some(&key_of(actor, 0)),
                DESCRIBE_DEAD_LETTERS,
            )
            .await
            .map_err(store_failed)?
            .iter()
            .take_while(|l| *l.key.actor_id == *actor.id)
            .count();
        Ok((depth, letters))
    }

    /// Queues a durable tell for an actor this daemon owns and waits until
    /// its append is stored.
    pub(crate) async fn tell_durable_here(self: &Arc<Self>, call: Call) -> Result<(), CallError> {
        self.store_tell(call, Reply::None).await
    }

    /// [`tell_durable_here`](Self::tell_durable_here), telling `turn` how
    /// the tell's first attempt went (for a test clock's advance, which
    /// returns once what came due has run).
    pub(crate) async fn store_tell(
        self: &Arc<Self>,
        call: Call,
        turn: Reply,
    ) -> Result<(), CallError> {
        self.check_target(&call.actor)?;
        // A retry of a tell stored before: memory knows its key as stored,
        // or (for an actor whose records spilled) only the store knows it.
        if let Some((key, new_key)) = call.extra.as_deref().and_then(CallExtra::key) {
            let now = crate::clock::unix_now_ms();
            let lookup = self.records.lookup(&call.actor, key, now, new_key);
            if matches!(lookup, Lookup::Stored | Lookup::AskStore)
                && self.stored_answer(&call.actor, key).await?.is_some()
            {
                return Ok(());
            }
        }
        let header = Header {
            method: call.method.to_string(),
            bytes: call.payload.content_type == ContentType::Bytes,
            metadata: call
                .extra
                .as_ref()
                .map(|e| e.metadata.clone())
                .unwrap_or_default(),
        };
        let data = record::encode(&header, &call.payload);
        let (tx, rx) = oneshot::channel();
        let mut extra = call.extra;
        // One-way: its chain is no wait-for edge (as for plain tells).
        if let Some(e) = extra.as_mut() {
            e.chain = None;
        }
        let mut envelope = self.envelope(call.kind, call.method, call.payload, extra, turn)?;
        envelope.inbox = Some(Box::new(InboxTag {
            delivery: InboxDelivery {
                seq: 0,
                attempts: 0,
                data,
                backoff_until: None,
                held: None,
            },
            ack: Some(Reply::To(tx)),
        }));
        self.deliver(&call.actor, None, envelope)?;
        wait_reply(&call.actor, self.config.call_timeout, rx)
            .await
            .map(drop)
    }
}
