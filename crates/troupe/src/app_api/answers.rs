//! The app's answers, matched to the work waiting for them: one at a time,
//! several in an `AppBatch`, or a large one in pieces (`MessagePart`). An
//! answer that breaks the protocol ends the
//! stream with a status saying why; a reply too large for the daemon fails
//! only its turn.

use std::time::{Duration, Instant};

use prost::Message;
use tonic::{Status, Streaming};
use troupe_proto::parts::Reassembly;
use troupe_proto::v1 as pb;
use troupe_runtime::{CallError, TurnOutcome, Unavailable};

use super::{AppConnection, Pending};
use crate::convert;

/// Matches the app's answers to pending work until the stream ends. An
/// answer that breaks the protocol ends the stream with a status saying why,
/// as does one whose pieces add up to more than `limit` bytes.
pub(super) async fn read_answers(
    connection: &AppConnection,
    inbound: &mut Streaming<pb::AppMessage>,
    sweep: Duration,
    limit: usize,
) -> Result<(), Status> {
    use pb::app_message::Kind;
    let mut pieces = Reassembly::new(limit);
    // Also where turns whose callers left are found.
    let mut overdue = tokio::time::interval(sweep);
    overdue.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let next = tokio::select! {
            next = inbound.message() => next,
            _ = overdue.tick() => {
                connection.sweep_turns(Instant::now());
                continue;
            }
            () = connection.closed.notified() => return Ok(()),
        };
        let message = match next {
            Ok(Some(m)) => m,
            Ok(None) => return Ok(()),
            Err(status) => return Err(broken_stream(&status)),
        };
        let kind = match message.kind {
            Some(Kind::Part(part)) => match pieces.push(part) {
                Ok(None) => continue,
                Ok(Some(whole)) => {
                    pb::AppMessage::decode(whole)
                        .map_err(|e| {
                            Status::invalid_argument(format!(
                            "the pieces of an answer (MessagePart) are not an AppMessage: {e}; \
                             send each piece of one encoded AppMessage in order"
                        ))
                        })?
                        .kind
                }
                Err(e) => return Err(Status::resource_exhausted(e.to_string())),
            },
            kind => kind,
        };
        match kind {
            Some(Kind::Batch(batch)) => {
                for message in batch.messages {
                    answer(connection, message.kind, true)?;
                }
            }
            kind => answer(connection, kind, false)?,
        }
    }
}

/// Hands one answer to the work waiting for it.
fn answer(
    connection: &AppConnection,
    kind: Option<pb::app_message::Kind>,
    in_batch: bool,
) -> Result<(), Status> {
    use pb::app_message::Kind;
    match kind {
        Some(Kind::Activated(a)) => match connection.take(a.call_id) {
            // The app saw the lease over before it created the instance.
            Some(Pending::Activate(done)) if a.lease_expired => {
                done.fail(Unavailable::LeaseLapsed.into());
            }
            Some(Pending::Activate(done)) => {
                let changes = convert::state_changes(a.changes)?;
                done.finish(match a.error {
                    Some(f) => Err(convert::failure(f)),
                    None => Ok(changes),
                });
            }
            other => return Err(unexpected(a.call_id, "ActivateResult", other)),
        },
        Some(Kind::TurnResult(t)) => match connection.take(t.call_id) {
            // The app did not run it: the lease was over when it came.
            Some(Pending::Turn(done, ..)) if t.lease_expired => {
                done.fail(Unavailable::LeaseLapsed.into());
            }
            Some(Pending::Turn(mut done, ..)) => {
                if let Some(pb::turn_result::Outcome::Reply(reply)) = &t.outcome {
                    let size = reply.data.len();
                    if size > connection.max_payload_bytes {
                        // This turn fails; the stream and every other turn
                        // on it go on.
                        let actor = done.actor().clone();
                        done.fail(CallError::TooLarge(format!(
                            "actor {}'s reply is {size} bytes, more than the daemon's \
                             --max-payload-bytes ({}); return less (store it in state or \
                             elsewhere and return a reference), or raise the limit",
                            actor, connection.max_payload_bytes
                        )));
                        return Ok(());
                    }
                }
                let changes = convert::state_changes(t.changes)?;
                if !t.events.is_empty() {
                    done.publish(
                        t.events
                            .into_iter()
                            .map(|e| convert::payload(Some(e)))
                            .collect(),
                    );
                }
                let result = match t.outcome {
                    Some(pb::turn_result::Outcome::Reply(p)) => Ok(convert::payload(Some(p))),
                    Some(pb::turn_result::Outcome::Error(f)) => Err(convert::failure(f)),
                    None => Err(troupe_runtime::ActorFailure {
                        ty: "ProtocolError".into(),
                        message: "the app answered the turn with neither a reply nor an error"
                            .into(),
                        details: String::new(),
                        kind: troupe_runtime::FailureKind::Unspecified,
                    }),
                };
                done.finish(TurnOutcome { result, changes });
            }
            // Too late: its caller got DEADLINE_EXCEEDED and the actor
            // was deactivated; the answer and its changes are dropped.
            None if connection.was_timed_out(t.call_id) => {}
            other => return Err(unexpected(t.call_id, "TurnResult", other)),
        },
        Some(Kind::Deactivated(d)) => match connection.take(d.call_id) {
            Some(Pending::Deactivate(done)) => {
                let changes = convert::state_changes(d.changes)?;
                done.finish(changes);
            }
            other => return Err(unexpected(d.call_id, "DeactivateResult", other)),
        },
        Some(Kind::Register(_)) if in_batch => {
            return Err(Status::invalid_argument(
                "Register inside an AppBatch; register once, as the stream's first message",
            ))
        }
        Some(Kind::Register(_)) => {
            return Err(Status::failed_precondition(
                "Register was sent twice on one stream; open a new stream to register again",
            ))
        }
        Some(Kind::Batch(_)) => {
            return Err(Status::invalid_argument(
                "an AppBatch inside an AppBatch; put the answers in one batch",
            ))
        }
        Some(Kind::Part(_)) => {
            return Err(Status::invalid_argument(
                "a MessagePart inside an AppBatch or inside another MessagePart's message; \
                 send pieces only as the stream's own messages",
            ))
        }
        None => {
            return Err(Status::invalid_argument(
                "empty AppMessage: set one of activated, turn_result, deactivated, batch, part",
            ))
        }
    }
    Ok(())
}

fn unexpected(call_id: u64, got: &str, pending: Option<Pending>) -> Status {
    let waiting = match pending {
        None => "nothing".to_owned(),
        Some(Pending::Activate(_)) => "an ActivateResult".to_owned(),
        Some(Pending::Turn(..)) => "a TurnResult".to_owned(),
        Some(Pending::Deactivate(_)) => "a DeactivateResult".to_owned(),
    };
    Status::invalid_argument(format!(
        "{got} for call_id {call_id}, but that call id waits for {waiting}; answer each \
         daemon message once, with its own call_id and kind"
    ))
}

/// What the app hears when its stream cannot be read: it went away (the
/// status says how) or sent bytes that are not an AppMessage (the decoder
/// says so). The decoder's own status would say INTERNAL, which blames the
/// daemon for the app's bytes.
pub(super) fn broken_stream(status: &Status) -> Status {
    Status::invalid_argument(format!("app stream broke: {}", status.message()))
}
