//! What a failed request to the daemon tells the user: the status a call
//! ends with, turned into a message that says what went wrong and what to
//! do, and the exit code scripts rely on.

use std::time::Duration;

use tonic::{Code, Status};
use troupe_runtime::FailureKind;

use super::{fail, root_cause, Daemon, Exit};
use crate::convert::error_details::{details_of_trailer, ERROR_DETAILS_TRAILER};
use crate::convert::errors::code_name;

/// What a failed call was about, for its error message.
pub(super) struct Request<'a> {
    /// e.g. "describe counter/c1".
    what: String,
    /// The daemon's address, named when the connection is lost.
    addr: &'a str,
    /// Added to the message when the actor refuses the call's arguments.
    refused_hint: &'static str,
    /// The caller's `--timeout`, named when the call runs out of it.
    timeout: Option<Duration>,
}

impl Daemon {
    pub(super) fn request(&self, what: impl Into<String>) -> Request<'_> {
        Request {
            what: what.into(),
            addr: &self.addr,
            refused_hint: "",
            timeout: None,
        }
    }
}

/// The failure types with which SDKs that do not say whether the method
/// ran (no `troupe-failure-kind` trailer: from before it) refuse a call's
/// arguments: `TypeError` (Python's argument binding, TypeScript's unknown
/// method) and `PayloadError` (arguments that are not a call payload). The
/// guess also takes a `TypeError` the method raised for one.
const REFUSED_ARGUMENTS: [&str; 2] = ["TypeError", "PayloadError"];

/// The actor's stack trace under the error line, indented, for the user to
/// find the line that raised; nothing when its SDK sent none.
fn where_raised(trace: &str) -> String {
    let trace = trace.trim_end();
    if trace.is_empty() {
        return String::new();
    }
    let lines: Vec<String> = trace.lines().map(|line| format!("    {line}")).collect();
    format!(
        "\n  where it raised (the stack trace the actor's SDK sent):\n{}",
        lines.join("\n")
    )
}

impl Request<'_> {
    /// Says `hint` too when the actor refuses the arguments.
    pub(super) fn when_refused(self, hint: &'static str) -> Self {
        Self {
            refused_hint: hint,
            ..self
        }
    }

    /// Says that the call ran out of the caller's `--timeout` rather than
    /// of the daemon's own limits, when it does.
    pub(super) fn within(self, timeout: Option<Duration>) -> Self {
        Self { timeout, ..self }
    }

    /// Turns a status from the daemon into an error with its exit code.
    pub(super) fn failed(&self, status: Status) -> anyhow::Error {
        let what = &self.what;
        let addr = self.addr;
        let message = status.message();
        // The daemon answers DEADLINE_EXCEEDED just before the deadline;
        // tonic's own timer, should the daemon not answer, CANCELLED.
        let out_of_time = matches!(status.code(), Code::DeadlineExceeded | Code::Cancelled);
        match status.code() {
            _ if out_of_time && self.timeout.is_some() => {
                let timeout = humantime::format_duration(self.timeout.unwrap_or_default());
                // Which timer fired first is a race the user cannot act on:
                // both mean the deadline passed, so both read the same.
                let detail = match status.code() {
                    Code::DeadlineExceeded => message,
                    _ => "the daemon did not answer in time",
                };
                fail(
                    Exit::Daemon,
                    format!(
                        "{what}: no answer within --timeout {timeout} (DEADLINE_EXCEEDED: \
                         {detail})\n  the call may still run; give a longer --timeout, and \
                         an --idempotency-key so that running the command again runs it once"
                    ),
                )
            }
            Code::Unknown => {
                let trailer = |name| status.metadata().get(name).and_then(|v| v.to_str().ok());
                let ty = trailer(crate::convert::errors::ERROR_TYPE_TRAILER);
                let kind = trailer(crate::convert::errors::FAILURE_KIND_TRAILER)
                    .map(FailureKind::from_name);
                let refused = |ty: &str| match kind {
                    Some(FailureKind::Unspecified) | None => REFUSED_ARGUMENTS.contains(&ty),
                    Some(kind) => kind == FailureKind::BadArguments,
                };
                match ty {
                    Some(_) if kind == Some(FailureKind::NoSuchMethod) => {
                        fail(Exit::NotFound, format!("{what}: {message}"))
                    }
                    Some(ty) if refused(ty) => {
                        let hint = match self.refused_hint {
                            "" => {
                                "check the arguments against the method's parameters \
                                   (--data '{\"name\": value}' for keyword arguments, \
                                   '[value]' for positional ones)"
                            }
                            hint => hint,
                        };
                        fail(
                            Exit::Usage,
                            format!(
                                "{what}: the actor refused the arguments: {ty}: {message}\n  {hint}"
                            ),
                        )
                    }
                    Some(ty) => {
                        let trace = trailer(ERROR_DETAILS_TRAILER)
                            .map(details_of_trailer)
                            .map_or_else(String::new, |trace| where_raised(&trace));
                        fail(
                            Exit::ActorError,
                            format!("{what}: the actor raised {ty}: {message}{trace}"),
                        )
                    }
                    None => fail(Exit::Daemon, format!("{what} failed: UNKNOWN: {message}")),
                }
            }
            // The daemon's message names what is missing and how to look.
            Code::NotFound => fail(Exit::NotFound, format!("{what}: {message}")),
            Code::InvalidArgument => fail(
                Exit::Usage,
                format!("{what}: the daemon refused the request: {message}"),
            ),
            // A status the client library made up from a broken connection
            // carries its cause; one the daemon sent does not.
            Code::Unavailable if std::error::Error::source(&status).is_some() => fail(
                Exit::Unreachable,
                format!(
                    "{what}: lost the connection to the troupe daemon at {addr} ({})\n  \
                     check that it is still running",
                    root_cause(&status)
                ),
            ),
            Code::Unimplemented => fail(
                Exit::Daemon,
                format!(
                    "{what}: the daemon at {addr} does not support this ({message})\n  \
                     it is older than this CLI (troupe {}); upgrade the daemon",
                    env!("CARGO_PKG_VERSION")
                ),
            ),
            code => {
                let hint = match code {
                    Code::Unavailable => {
                        "\n  the app hosting the actor type is not connected, or the daemon is \
                         shutting down; retry once it is back"
                    }
                    Code::ResourceExhausted => {
                        "\n  a bound, memory near the daemon's limit, or a size limit (the message \
                         says which); all but a size limit ran nothing: retry later"
                    }
                    Code::DeadlineExceeded => {
                        "\n  the daemon did not finish in time; retry, or look at `troupe status`"
                    }
                    _ => "",
                };
                fail(
                    Exit::Daemon,
                    format!("{what} failed: {}: {message}{hint}", code_name(code)),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out_of_time(status: Status) -> String {
        let request = Request {
            what: "call counter/c1.sleep".into(),
            addr: "127.0.0.1:7420",
            refused_hint: "",
            timeout: Some(Duration::from_millis(300)),
        };
        request.failed(status).to_string()
    }

    /// Whether the daemon's deadline or the client's own timer fires first
    /// is a race; the user reads the same either way.
    #[test]
    fn a_timeout_reads_the_same_whichever_timer_fired() {
        let daemon = out_of_time(Status::deadline_exceeded("the turn ran out of time"));
        let client = out_of_time(Status::cancelled("Timeout expired"));
        for message in [&daemon, &client] {
            assert!(
                message.starts_with(
                    "call counter/c1.sleep: no answer within --timeout 300ms (DEADLINE_EXCEEDED: "
                ),
                "{message}"
            );
            assert!(message.contains("--idempotency-key"), "{message}");
        }
        assert!(daemon.contains("the turn ran out of time"), "{daemon}");
        assert!(
            client.contains("the daemon did not answer in time"),
            "{client}"
        );
    }
}
