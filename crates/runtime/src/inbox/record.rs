//! A durable tell as its inbox entry stores it: the runtime's own encoding
//! (a JSON header with the method, content type and metadata, then the
//! payload bytes), which stores keep without reading.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::types::{ContentType, Payload};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Header {
    pub(crate) method: String,
    #[serde(default)]
    pub(crate) bytes: bool,
    #[serde(default)]
    pub(crate) metadata: Vec<(String, String)>,
}

pub(crate) fn encode(header: &Header, payload: &Payload) -> Bytes {
    // A header of strings always serialises; an empty one decodes as
    // corrupt and is dead-lettered rather than lost silently.
    let header = serde_json::to_vec(header).unwrap_or_default();
    let len = u32::try_from(header.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(4 + header.len() + payload.data.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(&payload.data);
    Bytes::from(out)
}

pub(crate) fn decode(data: &Bytes) -> Option<(Header, Payload)> {
    let len = u32::from_le_bytes(data.get(..4)?.try_into().ok()?) as usize;
    let end = 4usize.checked_add(len)?;
    let header: Header = serde_json::from_slice(data.get(4..end)?).ok()?;
    let payload = Payload {
        data: data.slice(end..),
        content_type: if header.bytes {
            ContentType::Bytes
        } else {
            ContentType::Json
        },
    };
    Some((header, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_garbage_is_refused() {
        let header = Header {
            method: "incr".into(),
            bytes: true,
            metadata: vec![("k".into(), "v".into())],
        };
        let payload = Payload {
            data: Bytes::from_static(b"\x00\x01"),
            content_type: ContentType::Bytes,
        };
        let data = encode(&header, &payload);
        let Some((back, body)) = decode(&data) else {
            panic!("an encoded entry did not decode");
        };
        assert_eq!(back.method, "incr");
        assert_eq!(back.metadata, header.metadata);
        assert_eq!(body, payload);
        assert!(decode(&Bytes::from_static(b"\xff\xff\xff\xff{}")).is_none());
        assert!(decode(&Bytes::new()).is_none());
    }
}
