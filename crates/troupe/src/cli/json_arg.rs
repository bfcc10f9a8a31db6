//! The JSON a flag takes (`--data`, `--payload`, `--if-value`): given
//! inline, or `@PATH` to read it from a file (`@-`: standard input), as
//! curl's `--data` takes it. JSON never starts with `@`, so the two cannot
//! be confused; a shell argument stops at 128 KiB on Linux, a file does
//! not.

use std::io::Read as _;

use serde_json::Value;
use troupe_runtime::validate::shortened;

use super::{fail, Exit};

/// Inline text longer than this is cut short in error messages.
const SHOWN_CHARS: usize = 200;

/// A flag's JSON text and how error messages name it.
#[derive(Debug)]
pub(super) struct JsonArg {
    pub(super) text: String,
    /// The text itself (cut short), or where it was read from.
    pub(super) shown: String,
}

impl JsonArg {
    /// The text `given` for `flag`, read from where `@PATH` points.
    pub(super) fn read(flag: &str, given: &str) -> anyhow::Result<JsonArg> {
        let Some(path) = given.strip_prefix('@') else {
            return Ok(JsonArg {
                text: given.to_owned(),
                shown: shortened(given, SHOWN_CHARS).into_owned(),
            });
        };
        let unreadable = |e: std::io::Error, what: &str| {
            fail(
                Exit::Usage,
                format!(
                    "{flag} {given}: cannot read {what} ({e}); give a readable file after the @, \
                     or the JSON itself"
                ),
            )
        };
        if path == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| unreadable(e, "standard input"))?;
            return Ok(JsonArg {
                text,
                shown: "(standard input)".to_owned(),
            });
        }
        let text = std::fs::read_to_string(path).map_err(|e| unreadable(e, path))?;
        Ok(JsonArg {
            text,
            shown: format!("(the contents of {path})"),
        })
    }

    /// The text as JSON; `hint` ends the message when it is not.
    pub(super) fn parse(&self, flag: &str, hint: &str) -> anyhow::Result<Value> {
        serde_json::from_str::<Value>(&self.text).map_err(|e| {
            fail(
                Exit::Usage,
                format!("{flag} is not JSON ({e}): {}\n  {hint}", self.shown),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_text_or_a_file_after_an_at_sign() -> anyhow::Result<()> {
        let inline = JsonArg::read("--data", "[5]")?;
        assert_eq!(
            (inline.text.as_str(), inline.shown.as_str()),
            ("[5]", "[5]")
        );

        let dir = tempfile::tempdir()?;
        let path = dir.path().join("v.json");
        std::fs::write(&path, "{\"by\": 5}")?;
        let from_file = JsonArg::read("--data", &format!("@{}", path.display()))?;
        assert_eq!(from_file.parse("--data", "")?, serde_json::json!({"by": 5}));

        let missing = JsonArg::read("--data", "@/nonexistent/v.json");
        assert!(
            matches!(&missing, Err(e) if super::super::exit_of(e) == Exit::Usage),
            "{missing:?}"
        );
        // A long inline text is cut short in the refusal.
        let long = JsonArg::read("--data", &format!("[{}", "1,".repeat(500)))?;
        let Err(e) = long.parse("--data", "hint") else {
            panic!("accepted")
        };
        assert!(e.to_string().len() < 400, "{e}");
        Ok(())
    }
}
