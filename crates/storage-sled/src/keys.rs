//! How names become sled keys: length-prefixed segments, so one actor's keys
//! are contiguous and no type/id/key value can collide with another.

/// `len(type) u16 | type | len(id) u16 | id`: a prefix shared by all keys of
/// one actor. Length prefixes (not separators) keep any UTF-8 name safe.
pub(crate) fn actor_prefix(actor_type: &str, actor_id: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + actor_type.len() + actor_id.len() + 16);
    push_segment(&mut out, actor_type);
    push_segment(&mut out, actor_id);
    out
}

fn push_segment(out: &mut Vec<u8>, s: &str) {
    // Names are validated to at most 256 bytes by the runtime; saturate to be
    // safe rather than wrap if a caller ever bypasses that.
    let len = u16::try_from(s.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

pub(crate) fn type_prefix(actor_type: &str) -> Vec<u8> {
    let mut out = Vec::new();
    push_segment(&mut out, actor_type);
    out
}

/// Splits `len | id | rest` after a type prefix into the id.
pub(crate) fn read_segment(buf: &[u8]) -> Option<(&str, &[u8])> {
    let len = u16::from_be_bytes([*buf.first()?, *buf.get(1)?]) as usize;
    let s = buf.get(2..2 + len)?;
    Some((std::str::from_utf8(s).ok()?, &buf[2 + len..]))
}
