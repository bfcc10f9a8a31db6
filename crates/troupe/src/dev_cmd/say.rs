//! What `troupe dev` tells the person running it. Everything goes to
//! stderr, since stdout belongs to the app; each line starts with
//! `troupe dev:` so it stands out from the app's own output. Every message
//! is a whole line: a progress line redrawn in place on a terminal had the
//! app's first output glued to it, and erased with it at the next redraw.

use std::fmt::Display;
use std::time::Duration;

use crate::cli::tell_user;

/// How often the wait for registration says how long it has been.
const PROGRESS_EVERY_SECS: u64 = 5;

#[derive(Debug, Default)]
pub struct Say {
    /// The last second a progress line was printed for.
    last_progress: Option<u64>,
}

impl Say {
    pub fn new() -> Self {
        Self::default()
    }

    /// One line.
    pub fn line(&mut self, text: impl Display) {
        tell_user(format_args!("troupe dev: {text}\n"));
    }

    /// The wait for `command` to register its types, `waited` in.
    pub fn waiting(&mut self, command: &str, waited: Duration) {
        let secs = waited.as_secs();
        let due = match self.last_progress {
            None => true,
            Some(last) => secs >= last.saturating_add(PROGRESS_EVERY_SECS),
        };
        if due {
            self.last_progress = Some(secs);
            tell_user(format_args!(
                "troupe dev: waiting for `{command}` to register its types… {secs}s\n"
            ));
        }
    }

    /// The wait is over (or starts again, for a restarted app).
    pub fn done_waiting(&mut self) {
        self.last_progress = None;
    }
}
