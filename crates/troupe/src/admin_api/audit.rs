//! The audit trail: one `troupe::audit` event for each admin call that
//! changes something (deactivate, purge, state edit, re-drive, drop,
//! backup, moving a test clock), saying what was done to what, by which credential from
//! which address, and how it ended. Reads are not audited: they change
//! nothing, and a dashboard polling them would bury the changes.
//!
//! The caller is named by its credential's kind and the token's place
//! (`token 2 of /etc/troupe/api-token`), never by the token: a token's
//! digest in a log would let whoever reads the log test guesses of a weak
//! token offline.

use tonic::{Request, Status};
use tracing::info;
use troupe_proto::v1 as pb;

use super::owner::FORWARDED_HEADER;
use crate::auth::Caller;
use crate::convert::errors::code_name;

/// One audited call, from its request until its outcome.
pub(super) struct Audit {
    action: &'static str,
    subject: String,
    credential: &'static str,
    /// The token's place; empty on an open API.
    token: String,
    from: String,
    /// Sent on by the daemon the caller reached, which audited it too.
    forwarded: bool,
}

impl Audit {
    pub(super) fn of<T>(action: &'static str, request: &Request<T>, subject: String) -> Self {
        let (credential, token) = match request.extensions().get::<Caller>() {
            Some(caller) => (caller.name(), caller.token.to_string()),
            // The admin guard names every caller it lets through when
            // tokens are required, so this is an open API.
            None => ("none required", String::new()),
        };
        let from = request
            .remote_addr()
            .map_or_else(|| "a local socket".to_owned(), |addr| addr.to_string());
        Self {
            action,
            subject,
            credential,
            token,
            from,
            forwarded: request.metadata().contains_key(FORWARDED_HEADER),
        }
    }

    /// Records the outcome and hands the result back.
    pub(super) fn after<R>(self, result: Result<R, Status>) -> Result<R, Status> {
        let outcome = match &result {
            Ok(_) => "ok",
            Err(status) => code_name(status.code()),
        };
        let error = result.as_ref().err().map(|s| s.message().to_owned());
        info!(
            target: "troupe::audit",
            action = self.action,
            subject = %self.subject,
            credential = self.credential,
            token = self.token.as_str(),
            from = %self.from,
            forwarded = self.forwarded,
            outcome,
            error = error.as_deref().unwrap_or(""),
            "admin call"
        );
        result
    }
}

/// `type/id`, as the CLI names actors.
pub(super) fn actor(actor: Option<&pb::ActorRef>) -> String {
    actor.map_or_else(
        || "(no actor)".to_owned(),
        |a| format!("{}/{}", a.r#type, a.id),
    )
}

/// A state edit: its actor and the keys it sets and deletes, never their
/// values (state may hold what a log must not).
pub(super) fn edited_keys(edit: &pb::EditActorStateRequest) -> String {
    let keys = |set: bool| {
        edit.changes
            .iter()
            .filter(|c| matches!(c.op, Some(pb::state_change::Op::Set(_))) == set)
            .map(|c| troupe_runtime::validate::abridged(&c.key, 64))
            .collect::<Vec<_>>()
    };
    let mut subject = actor(edit.actor.as_ref());
    for (verb, keys) in [("set", keys(true)), ("delete", keys(false))] {
        if !keys.is_empty() {
            subject.push_str(&format!(
                " {verb} {}",
                troupe_runtime::validate::abridged_list(&keys, 8)
            ));
        }
    }
    subject
}

/// A dead letter: its actor and sequence number.
pub(super) fn letter(letter: &pb::DeadLetterRef) -> String {
    format!("{} #{}", actor(letter.actor.as_ref()), letter.seq)
}
