//! Where a call's result goes, and waiting for it.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::error::{CallError, Unavailable};
use crate::types::{ActorId, Payload};
use crate::watch::StoredEvents;

/// Where a call's result goes.
#[derive(Debug, Default)]
pub(crate) enum Reply {
    /// One-way (tell): the result is dropped.
    #[default]
    None,
    To(oneshot::Sender<Result<Payload, CallError>>),
    /// A reminder's or the alarm's firing: skipped like a call whose caller
    /// left once a `set` or `delete` of its reminder cancels its token,
    /// checked as its turn would start, so none starts after that returned.
    /// Boxed: every call's envelope carries a `Reply`, and two pointers
    /// here made each 8 bytes larger and the ring benchmark slower.
    Firing(Box<FiringReply>),
    /// A durable turn's reply, held until its writes are stored, with the
    /// events it published: they go to its watchers if it succeeds, just
    /// before the caller hears (`watch::stored`).
    Publishing(Box<PublishingReply>),
}

#[derive(Debug)]
pub(crate) struct PublishingReply {
    pub(crate) events: StoredEvents,
    pub(crate) then: Reply,
}

#[derive(Debug)]
pub(crate) struct FiringReply {
    pub(crate) to: oneshot::Sender<Result<Payload, CallError>>,
    pub(crate) superseded: CancellationToken,
    /// When it was due, by the scheduling clock: its turn's start measures
    /// how late it is.
    pub(crate) due_unix_ms: u64,
}

impl Reply {
    /// Nobody hears the result: a one-way call's.
    pub(crate) fn unanswered(&self) -> bool {
        match self {
            Reply::None => true,
            Reply::Publishing(publishing) => publishing.then.unanswered(),
            Reply::To(_) | Reply::Firing(_) => false,
        }
    }

    pub(crate) fn abandoned(&self) -> bool {
        match self {
            Reply::None => false,
            Reply::To(tx) => tx.is_closed(),
            Reply::Firing(firing) => firing.to.is_closed() || firing.superseded.is_cancelled(),
            Reply::Publishing(publishing) => publishing.then.abandoned(),
        }
    }

    pub(crate) fn send(self, result: Result<Payload, CallError>) {
        let tx = match self {
            Reply::None => return,
            Reply::To(tx) => tx,
            Reply::Firing(firing) => firing.to,
            Reply::Publishing(publishing) => {
                let PublishingReply { events, then } = *publishing;
                events.settle(result.is_ok());
                return then.send(result);
            }
        };
        // The caller may have given up; nothing to do then.
        let _ = tx.send(result);
    }
}

/// Waits for a call's result, at most `timeout`.
pub(crate) async fn wait_reply(
    actor: &ActorId,
    timeout: Duration,
    rx: oneshot::Receiver<Result<Payload, CallError>>,
) -> Result<Payload, CallError> {
    match tokio::time::timeout(timeout, rx).await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err(Unavailable::Dropped {
            actor: actor.clone(),
        }
        .into()),
        Err(_) => Err(CallError::DeadlineExceeded(format!(
            "the call to {actor} did not finish within {timeout:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    /// Every call's envelope holds one: a firing's extra pointer is boxed.
    #[test]
    fn a_reply_stays_two_words() {
        assert_eq!(std::mem::size_of::<super::Reply>(), 16);
    }
}
