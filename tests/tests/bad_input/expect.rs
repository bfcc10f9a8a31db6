//! What a case must get, how a result is checked against it, and the case
//! row itself.

use tonic::{Code, Status};

use crate::requests::Req;

/// The longest status message any case may get: inputs are never echoed whole.
const MAX_MESSAGE: usize = 1024;

/// What a case must get.
#[derive(Debug, Clone, Copy)]
pub enum Expect {
    Ok,
    /// This code, with a message holding each of these words.
    Fails(Code, &'static [&'static str]),
}

pub fn bad(words: &'static [&'static str]) -> Expect {
    Expect::Fails(Code::InvalidArgument, words)
}

pub fn not_found(words: &'static [&'static str]) -> Expect {
    Expect::Fails(Code::NotFound, words)
}

/// Why `got` does not meet `expect`; `None` when it does.
pub fn mismatch<T: std::fmt::Debug>(expect: Expect, got: &Result<T, Status>) -> Option<String> {
    match (expect, got) {
        (Expect::Ok, Ok(_)) => None,
        (Expect::Ok, Err(s)) => Some(format!(
            "expected OK, got {:?}: {}",
            s.code(),
            shown(s.message())
        )),
        (Expect::Fails(code, _), Ok(v)) => {
            let v: String = format!("{v:?}").chars().take(200).collect();
            Some(format!("expected {code:?}, it succeeded: {v}"))
        }
        (Expect::Fails(code, words), Err(s)) => {
            let message = s.message();
            if s.code() != code {
                return Some(format!(
                    "expected {code:?}, got {:?}: {}",
                    s.code(),
                    shown(message)
                ));
            }
            if message.len() > MAX_MESSAGE {
                return Some(format!(
                    "the message is {} bytes: {}",
                    message.len(),
                    shown(message)
                ));
            }
            let missing: Vec<_> = words.iter().filter(|w| !message.contains(*w)).collect();
            (!missing.is_empty()).then(|| format!("message {message:?} lacks {missing:?}"))
        }
    }
}

fn shown(message: &str) -> String {
    let cut: String = message.chars().take(300).collect();
    if cut.len() < message.len() {
        format!("{cut:?}… ({} bytes)", message.len())
    } else {
        format!("{cut:?}")
    }
}

/// One row of the matrix.
#[derive(Debug)]
pub struct Case {
    pub category: &'static str,
    pub what: String,
    pub req: Req,
    pub grpc_timeout: Option<&'static str>,
    pub expect: Expect,
}

pub fn case(category: &'static str, what: impl Into<String>, req: Req, expect: Expect) -> Case {
    Case {
        category,
        what: what.into(),
        req,
        grpc_timeout: None,
        expect,
    }
}
