//! What `troupe dev` tells the person running it. Everything goes to
//! stderr, since stdout belongs to the app; each line starts with
//! `troupe dev:` so it stands out from the app's own output. On a terminal
//! the wait for registration is one line redrawn every second; elsewhere
//! (a log file, a test) it is a plain line every few seconds.

use std::fmt::Display;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use crate::cli::tell_user;

/// How often a plain (not terminal) progress line repeats.
const PLAIN_EVERY_SECS: u64 = 5;

#[derive(Debug)]
pub struct Say {
    terminal: bool,
    /// A progress line is on the screen, without its newline.
    progress_shown: bool,
    /// The last second a plain progress line was printed for.
    last_plain: Option<u64>,
}

impl Say {
    pub fn new() -> Self {
        Self {
            terminal: std::io::stderr().is_terminal(),
            progress_shown: false,
            last_plain: None,
        }
    }

    /// One line.
    pub fn line(&mut self, text: impl Display) {
        self.clear_progress();
        tell_user(format_args!("troupe dev: {text}\n"));
    }

    /// The wait for `command` to register its types, `waited` in.
    pub fn waiting(&mut self, command: &str, waited: Duration) {
        let secs = waited.as_secs();
        if self.terminal {
            let mut err = std::io::stderr().lock();
            // Erase the line and redraw it; no newline until it is done.
            let _ = write!(
                err,
                "\r\x1b[2Ktroupe dev: waiting for `{command}` to register its types… {secs}s"
            );
            let _ = err.flush();
            self.progress_shown = true;
            return;
        }
        let due = match self.last_plain {
            None => true,
            Some(last) => secs >= last + PLAIN_EVERY_SECS,
        };
        if due {
            self.last_plain = Some(secs);
            tell_user(format_args!(
                "troupe dev: waiting for `{command}` to register its types… {secs}s\n"
            ));
        }
    }

    /// The wait is over (or starts again, for a restarted app).
    pub fn done_waiting(&mut self) {
        self.clear_progress();
        self.last_plain = None;
    }

    fn clear_progress(&mut self) {
        if self.progress_shown {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
            self.progress_shown = false;
        }
    }
}
