//! A recorded answer as its call record stores it: the runtime's own
//! encoding, which stores keep without reading.
//!
//! `0 | payload` (JSON), `1 | payload` (bytes), or `2 | len | type | len |
//! message | len | details` for the actor's error (lengths u32
//! little-endian); `3 | kind | ...` as `2` with the error's
//! [`FailureKind`] when its SDK said it (so a retry learns whether the
//! method ran, as the first attempt did). A runtime that knows no `3`
//! takes such a record for none and runs the call again.

use bytes::Bytes;

use crate::types::{ActorFailure, ContentType, FailureKind, Payload};

/// What a keyed call answered: its result, or the error its method raised.
pub(crate) type Answer = Result<Payload, ActorFailure>;

const JSON: u8 = 0;
const BYTES: u8 = 1;
const FAILED: u8 = 2;
const FAILED_KIND: u8 = 3;

fn kind_byte(kind: FailureKind) -> u8 {
    match kind {
        FailureKind::Unspecified => 0,
        FailureKind::Raised => 1,
        FailureKind::NoSuchMethod => 2,
        FailureKind::BadArguments => 3,
    }
}

fn kind_of_byte(byte: u8) -> Option<FailureKind> {
    Some(match byte {
        0 => FailureKind::Unspecified,
        1 => FailureKind::Raised,
        2 => FailureKind::NoSuchMethod,
        3 => FailureKind::BadArguments,
        _ => return None,
    })
}

fn push_str(out: &mut Vec<u8>, s: &str) {
    let len = u32::try_from(s.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

pub(crate) fn encode(answer: &Answer) -> Bytes {
    match answer {
        Ok(payload) => {
            let mut out = Vec::with_capacity(1 + payload.data.len());
            out.push(match payload.content_type {
                ContentType::Json => JSON,
                ContentType::Bytes => BYTES,
            });
            out.extend_from_slice(&payload.data);
            Bytes::from(out)
        }
        Err(failure) => {
            let mut out = Vec::with_capacity(
                14 + failure.ty.len() + failure.message.len() + failure.details.len(),
            );
            match failure.kind {
                FailureKind::Unspecified => out.push(FAILED),
                kind => out.extend_from_slice(&[FAILED_KIND, kind_byte(kind)]),
            }
            push_str(&mut out, &failure.ty);
            push_str(&mut out, &failure.message);
            push_str(&mut out, &failure.details);
            Bytes::from(out)
        }
    }
}

fn read_str(data: &[u8], at: &mut usize) -> Option<String> {
    let start = at.checked_add(4)?;
    let len = u32::from_le_bytes(data.get(*at..start)?.try_into().ok()?) as usize;
    let end = start.checked_add(len)?;
    let s = std::str::from_utf8(data.get(start..end)?).ok()?.to_owned();
    *at = end;
    Some(s)
}

/// `None` when `data` is not an answer this runtime wrote.
pub(crate) fn decode(data: &Bytes) -> Option<Answer> {
    match *data.first()? {
        JSON => Some(Ok(Payload::json(data.slice(1..)))),
        BYTES => Some(Ok(Payload {
            data: data.slice(1..),
            content_type: ContentType::Bytes,
        })),
        tag @ (FAILED | FAILED_KIND) => {
            let (kind, mut at) = match tag {
                FAILED => (FailureKind::Unspecified, 1),
                _ => (kind_of_byte(*data.get(1)?)?, 2),
            };
            let ty = read_str(data, &mut at)?;
            let message = read_str(data, &mut at)?;
            let details = read_str(data, &mut at)?;
            (at == data.len()).then_some(Err(ActorFailure {
                ty,
                message,
                details,
                kind,
            }))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_round_trip_and_garbage_is_refused() {
        let answers: [Answer; 4] = [
            Ok(Payload::json(Bytes::from_static(b"{\"n\":1}"))),
            Ok(Payload {
                data: Bytes::from_static(b"\x00\xff"),
                content_type: ContentType::Bytes,
            }),
            Err(ActorFailure {
                ty: "ValueError".into(),
                message: "négatif".into(),
                details: "trace".into(),
                kind: FailureKind::Unspecified,
            }),
            Err(ActorFailure {
                ty: "TypeError".into(),
                message: "add() takes 2 arguments".into(),
                details: String::new(),
                kind: FailureKind::BadArguments,
            }),
        ];
        for answer in answers {
            assert_eq!(decode(&encode(&answer)), Some(answer));
        }
        assert_eq!(decode(&Bytes::new()), None);
        assert_eq!(decode(&Bytes::from_static(b"\x07")), None);
        assert_eq!(decode(&Bytes::from_static(b"\x02\xff\xff\xff\xff")), None);
        // A kind this runtime does not know is no answer it wrote.
        let mut unknown_kind = encode(&Err(ActorFailure {
            kind: FailureKind::Raised,
            ..ActorFailure::default()
        }))
        .to_vec();
        unknown_kind[1] = 9;
        assert_eq!(decode(&Bytes::from(unknown_kind)), None);
        let mut trailing = encode(&Err(ActorFailure::default())).to_vec();
        trailing.push(0);
        assert_eq!(decode(&Bytes::from(trailing)), None);
    }
}
