//! Crash points for end-to-end tests of what survives a daemon's death at
//! one exact moment, which no signal sent from outside can hit. Off unless
//! the daemon's environment names one; read once.

use std::sync::OnceLock;

/// Names a method: the daemon aborts (no flush, no goodbye, as `kill -9`)
/// after a successful Invoke of it has run its turn and before the reply
/// leaves.
pub const ABORT_BEFORE_REPLY: &str = "TROUPE_TEST_ABORT_BEFORE_REPLY";

fn named() -> Option<&'static str> {
    static NAMED: OnceLock<Option<String>> = OnceLock::new();
    NAMED
        .get_or_init(|| std::env::var(ABORT_BEFORE_REPLY).ok())
        .as_deref()
}

/// Whether a crash point is set (calls skip the rest when it is not).
pub fn armed() -> bool {
    named().is_some()
}

/// Aborts the process if `method` is the one named by
/// [`ABORT_BEFORE_REPLY`].
pub fn abort_before_reply(method: &str) {
    if named() == Some(method) {
        eprintln!("{ABORT_BEFORE_REPLY}={method}: aborting before the reply, as asked");
        std::process::abort();
    }
}
