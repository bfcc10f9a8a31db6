//! How a fuzz input is cut into operations: one byte naming the
//! operation, two bytes (little-endian) of length, then that many bytes of
//! body (fewer when the input ends first). Sequences let one input reach
//! what only a series of requests reaches (a call, then a listing of what
//! it activated), and libFuzzer's mutations keep most of them well formed.

/// The operations of one input.
#[derive(Debug, Clone)]
pub struct Ops<'a> {
    rest: &'a [u8],
}

impl<'a> Ops<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self { rest: data }
    }
}

impl<'a> Iterator for Ops<'a> {
    type Item = (u8, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let (&op, rest) = self.rest.split_first()?;
        let (len, rest) = match rest {
            [lo, hi, rest @ ..] => (usize::from(u16::from_le_bytes([*lo, *hi])), rest),
            _ => (rest.len(), &[][..]),
        };
        let (body, rest) = rest.split_at(len.min(rest.len()));
        self.rest = rest;
        Some((op, body))
    }
}

/// Writes inputs in that form (the seeds).
#[derive(Debug, Default, Clone)]
pub struct OpsWriter(Vec<u8>);

impl OpsWriter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn op(mut self, op: u8, body: &[u8]) -> Self {
        let len = u16::try_from(body.len()).unwrap_or(u16::MAX);
        self.0.push(op);
        self.0.extend_from_slice(&len.to_le_bytes());
        self.0.extend_from_slice(&body[..usize::from(len)]);
        self
    }

    pub fn finish(self) -> Vec<u8> {
        self.0
    }
}

/// `message` as one gRPC message on the wire: uncompressed, its length,
/// itself.
pub fn grpc_frame(message: &[u8]) -> bytes::Bytes {
    let mut framed = bytes::BytesMut::with_capacity(message.len() + 5);
    bytes::BufMut::put_u8(&mut framed, 0);
    bytes::BufMut::put_u32(
        &mut framed,
        u32::try_from(message.len()).unwrap_or(u32::MAX),
    );
    bytes::BufMut::put_slice(&mut framed, message);
    framed.freeze()
}

/// `text` after one leading byte (the inputs of the value targets).
pub fn prefixed(first: u8, text: &str) -> Vec<u8> {
    let mut input = vec![first];
    input.extend_from_slice(text.as_bytes());
    input
}

/// A little-endian number from the first bytes of `body` (missing bytes
/// read as zero), and the rest.
pub fn number(body: &[u8], bytes: usize) -> (u64, &[u8]) {
    let (head, rest) = body.split_at(bytes.min(body.len()));
    let mut le = [0u8; 8];
    le[..head.len()].copy_from_slice(head);
    (u64::from_le_bytes(le), rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_ops_read_back() {
        let data = OpsWriter::new()
            .op(1, b"ab")
            .op(7, b"")
            .op(2, b"c")
            .finish();
        let ops: Vec<_> = Ops::new(&data).collect();
        assert_eq!(ops, vec![(1, &b"ab"[..]), (7, &b""[..]), (2, &b"c"[..])]);
        let cut: Vec<_> = Ops::new(&[3, 9, 0, b'x']).collect();
        assert_eq!(cut, vec![(3, &b"x"[..])]);
    }
}
