//! An actor exception's stack trace in a trailer: what the app's SDK sent
//! as `ActorFailure.details`, so the caller sees where the actor failed, not
//! only what it said.
//!
//! The trace is percent-encoded as gRPC encodes `grpc-message` (a header
//! carries no newlines and no bytes outside printable ASCII), which keeps
//! it an ASCII trailer every hop already passes on: daemon links and the
//! SDKs' native core keep ASCII trailers only.

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, CONTROLS};
use tonic::metadata::{Ascii, MetadataValue};

/// Trailer beside `troupe-error-type` holding the exception's stack trace,
/// percent-encoded; absent when the SDK sent none.
pub const ERROR_DETAILS_TRAILER: &str = "troupe-error-details";

/// Most bytes of the encoded trailer. With the status message's 3 KiB
/// (9 KiB percent-encoded at worst) the trailers stay under callers' 16 KiB
/// header limit, past which the answer would arrive as a protocol error.
/// A longer trace keeps its end: a Python traceback ends with the raising
/// line (the SDKs send traces that fit, a JavaScript stack's top first).
pub const MAX_DETAILS_ENCODED: usize = 4 * 1024;

/// What `grpc-message` leaves as it is: printable ASCII but `%`.
const ENCODED: &AsciiSet = &CONTROLS.add(b'%');

/// The trailer's value for `details`, cut to [`MAX_DETAILS_ENCODED`] from
/// the front on a character's boundary; `None` for no details.
pub fn details_trailer(details: &str) -> Option<MetadataValue<Ascii>> {
    let mut room = MAX_DETAILS_ENCODED;
    let mut start = details.len();
    for (at, c) in details.char_indices().rev() {
        let mut buf = [0u8; 4];
        let cost: usize = utf8_percent_encode(c.encode_utf8(&mut buf), ENCODED)
            .map(str::len)
            .sum();
        let Some(left) = room.checked_sub(cost) else {
            break;
        };
        room = left;
        start = at;
    }
    // A header value must not start or end with a space (RFC 9113, 8.2.1):
    // a cut into an indented line would start with one.
    let kept = details
        .get(start..)
        .map(|kept| kept.trim_matches(' '))
        .filter(|kept| !kept.is_empty())?;
    MetadataValue::try_from(utf8_percent_encode(kept, ENCODED).to_string()).ok()
}

/// The stack trace a [`details_trailer`] value holds (bytes that are no
/// UTF-8 as U+FFFD: it is for people to read).
pub fn details_of_trailer(value: &str) -> String {
    percent_decode_str(value).decode_utf8_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    type Outcome = Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn a_trace_with_newlines_and_non_ascii_comes_back_as_it_was() -> Outcome {
        let trace = "Traceback (most recent call last):\n  File \"app.py\", line 3\nValueError: café 100%\n";
        let value = details_trailer(trace).ok_or("no trailer")?;
        let encoded = value.to_str()?;
        assert!(!encoded.contains('\n'), "{encoded}");
        assert_eq!(details_of_trailer(encoded), trace);
        Ok(())
    }

    #[test]
    fn a_long_trace_keeps_its_end_within_the_limit() -> Outcome {
        let trace = format!("{}\nValueError: the last line", "é frame\n".repeat(5_000));
        let value = details_trailer(&trace).ok_or("no trailer")?;
        let encoded = value.to_str()?;
        assert!(encoded.len() <= MAX_DETAILS_ENCODED, "{}", encoded.len());
        assert!(encoded.len() > MAX_DETAILS_ENCODED - 8, "{}", encoded.len());
        let back = details_of_trailer(encoded);
        assert!(trace.ends_with(&back));
        assert!(back.ends_with("ValueError: the last line"));
        Ok(())
    }

    #[test]
    fn a_trailer_never_starts_or_ends_with_a_space() -> Outcome {
        // Cut into an indented line, as the end of a long Python traceback is.
        let trace = format!(
            "{}    raise ValueError()\nValueError ",
            "  File \"a.py\"\n".repeat(1_000)
        );
        let value = details_trailer(&trace).ok_or("no trailer")?;
        let encoded = value.to_str()?;
        assert!(
            !encoded.starts_with(' ') && !encoded.ends_with(' '),
            "{encoded:?}"
        );
        assert!(details_of_trailer(encoded).ends_with("ValueError"));
        Ok(())
    }

    #[test]
    fn no_details_no_trailer() {
        assert!(details_trailer("").is_none());
    }
}
