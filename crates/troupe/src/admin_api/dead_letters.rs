//! The dead-letter RPCs of `troupe.v1.Admin`: durable tells that failed every
//! attempt (docs/delivery.md), listed, shown, re-driven and dropped. The
//! letters live in the state store, so any daemon of a cluster answers for
//! all of them; a re-drive goes to the actor's owner like any durable tell.

use tonic::{Response, Status};
use troupe_proto::v1 as pb;
use troupe_runtime::{ActorId, DeadLetterInfo, Runtime};

use super::page;
use crate::convert;
use crate::convert::errors::status_of;
use crate::convert::paging;

fn letter_to_pb(l: DeadLetterInfo, with_payload: bool) -> pb::DeadLetter {
    pb::DeadLetter {
        actor: Some(convert::actor_ref(&l.actor)),
        seq: l.seq,
        method: l.method,
        payload: with_payload.then(|| convert::payload_to_pb(l.payload)),
        metadata: l.metadata.into_iter().collect(),
        error: l.error,
        attempts: l.attempts,
        failed_unix_ms: l.failed_unix_ms,
    }
}

fn not_found(actor: &ActorId, seq: u64) -> Status {
    Status::not_found(format!(
        "actor {actor} has no dead letter {seq}; list them with `troupe dead-letters list --type {}`",
        actor.ty
    ))
}

/// The letter a reference names.
fn letter_ref(r: pb::DeadLetterRef) -> Result<(ActorId, u64), Status> {
    Ok((convert::actor_id(r.actor)?, r.seq))
}

pub(super) async fn list(
    runtime: &Runtime,
    r: pb::ListDeadLettersRequest,
) -> Result<Response<pb::ListDeadLettersResponse>, Status> {
    let after = match paging::parse_page_token::<3>(&r.page_token)? {
        None => None,
        Some([ty, id, seq]) => {
            let seq = seq.parse::<u64>().map_err(|_| {
                Status::invalid_argument(
                    "page_token is not one this daemon returned; start without one",
                )
            })?;
            Some((ActorId::new(ty, id), seq))
        }
    };
    let size = paging::page_size(r.page_size);
    let ty = (!r.r#type.is_empty()).then_some(r.r#type.as_str());
    if let Some(ty) = ty {
        troupe_runtime::validate::name("actor type", ty).map_err(status_of)?;
    }
    let letters = runtime
        .list_dead_letters(ty, after.as_ref().map(|(a, s)| (a, *s)), size + 1)
        .await
        .map_err(status_of)?;
    let (letters, next_page_token) = page(letters, size, |l| {
        paging::page_token(&[&l.actor.ty, &l.actor.id, &l.seq.to_string()])
    });
    Ok(Response::new(pb::ListDeadLettersResponse {
        dead_letters: letters
            .into_iter()
            .map(|l| letter_to_pb(l, false))
            .collect(),
        next_page_token,
    }))
}

pub(super) async fn get(
    runtime: &Runtime,
    r: pb::DeadLetterRef,
) -> Result<Response<pb::DeadLetter>, Status> {
    let (actor, seq) = letter_ref(r)?;
    match runtime
        .get_dead_letter(&actor, seq)
        .await
        .map_err(status_of)?
    {
        Some(letter) => Ok(Response::new(letter_to_pb(letter, true))),
        None => Err(not_found(&actor, seq)),
    }
}

pub(super) async fn redrive(
    runtime: &Runtime,
    r: pb::DeadLetterRef,
) -> Result<Response<pb::RedriveDeadLetterResponse>, Status> {
    let (actor, seq) = letter_ref(r)?;
    if runtime
        .redrive_dead_letter(&actor, seq)
        .await
        .map_err(status_of)?
    {
        Ok(Response::new(pb::RedriveDeadLetterResponse {}))
    } else {
        Err(not_found(&actor, seq))
    }
}

pub(super) async fn drop_letter(
    runtime: &Runtime,
    r: pb::DeadLetterRef,
) -> Result<Response<pb::DropDeadLetterResponse>, Status> {
    let (actor, seq) = letter_ref(r)?;
    if runtime
        .drop_dead_letter(&actor, seq)
        .await
        .map_err(status_of)?
    {
        Ok(Response::new(pb::DropDeadLetterResponse {}))
    } else {
        Err(not_found(&actor, seq))
    }
}
