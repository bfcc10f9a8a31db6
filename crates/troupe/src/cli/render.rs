//! How values, times and tables look in the CLI's output (docs/cli.md,
//! "Conventions").

use std::time::{Duration, UNIX_EPOCH};

use base64::Engine as _;
use serde_json::{json, Value};
use troupe_proto::v1 as pb;

/// A payload or state value as shown: JSON as itself, anything else as
/// base64 (`{"base64": "..."}` in JSON output, `base64:...` in tables).
#[derive(Debug, Clone, PartialEq)]
pub enum Shown {
    Json(Value),
    Raw(Vec<u8>),
}

impl Shown {
    /// Bytes that are JSON show as JSON. A JSON value that itself looks like
    /// the raw form (`{"base64": ...}` alone) is shown raw too, so a script
    /// can always read `{"base64": s}` as "the bytes are base64(s)".
    pub fn of(data: &[u8]) -> Shown {
        match serde_json::from_slice::<Value>(data) {
            Ok(v) if !looks_raw(&v) => Shown::Json(v),
            _ => Shown::Raw(data.to_vec()),
        }
    }

    /// A call's payload: raw when its content type says so, whatever the
    /// bytes look like; no bytes at all is `null` (docs/payloads.md).
    pub fn payload(payload: Option<&pb::Payload>) -> Shown {
        let Some(p) = payload else {
            return Shown::Json(Value::Null);
        };
        if p.content_type == pb::ContentType::Bytes as i32 {
            Shown::Raw(p.data.to_vec())
        } else if p.data.is_empty() {
            Shown::Json(Value::Null)
        } else {
            Shown::of(&p.data)
        }
    }

    pub fn json(&self) -> Value {
        match self {
            Shown::Json(v) => v.clone(),
            Shown::Raw(bytes) => json!({ "base64": b64(bytes) }),
        }
    }

    /// One line, for a table cell.
    pub fn text(&self) -> String {
        match self {
            Shown::Json(v) => v.to_string(),
            Shown::Raw(bytes) => format!("base64:{}", b64(bytes)),
        }
    }

    /// Indented JSON, for a value printed on its own.
    pub fn pretty(&self) -> String {
        match self {
            Shown::Json(v) => serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string()),
            Shown::Raw(_) => self.text(),
        }
    }
}

fn looks_raw(v: &Value) -> bool {
    v.as_object()
        .is_some_and(|o| o.len() == 1 && o.contains_key("base64"))
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A unix-ms time as RFC 3339 (UTC, milliseconds); `None` for 0, which the
/// API uses for "none".
pub fn time(unix_ms: u64) -> Option<String> {
    (unix_ms > 0).then(|| {
        humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(unix_ms)).to_string()
    })
}

/// A time for a table cell: RFC 3339, or `-` for none.
pub fn time_cell(unix_ms: u64) -> String {
    time(unix_ms).unwrap_or_else(|| "-".into())
}

/// A time as JSON: two members, `NAME` (RFC 3339) and `NAME_unix_ms`, both
/// `null` for none. Scripts take the number, people read the string.
pub fn time_json(object: &mut serde_json::Map<String, Value>, name: &str, unix_ms: u64) {
    object.insert(name.to_owned(), json!(time(unix_ms)));
    object.insert(
        format!("{name}_unix_ms"),
        if unix_ms > 0 {
            json!(unix_ms)
        } else {
            Value::Null
        },
    );
}

/// A byte count for people: "512 B", "3.2 MiB".
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A duration for people: "850ms", "42s", "1h 5m 3s" (below a minute's
/// precision nobody reads milliseconds past the first second).
pub fn duration(ms: u64) -> String {
    if ms < 1000 {
        return format!("{ms}ms");
    }
    humantime::format_duration(Duration::from_secs(ms / 1000)).to_string()
}

/// A duration that may be absent (0): `-`.
pub fn duration_cell(ms: u64) -> String {
    if ms == 0 {
        "-".into()
    } else {
        duration(ms)
    }
}

pub fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// An activation status as shown in both outputs: the proto value without
/// its prefix ("IDLE"); "UNKNOWN" from a daemon that does not report it.
pub fn activation_status(status: i32) -> &'static str {
    match pb::ActivationStatus::try_from(status) {
        Ok(pb::ActivationStatus::Unspecified) | Err(_) => "UNKNOWN",
        Ok(s) => s.as_str_name().trim_start_matches("ACTIVATION_STATUS_"),
    }
}

/// A state mode: "WRITE_BEHIND" or "DURABLE"; unspecified is the daemon's
/// default, write-behind.
pub fn state_mode(mode: i32) -> &'static str {
    match pb::StateMode::try_from(mode) {
        Ok(pb::StateMode::Durable) => "DURABLE",
        _ => "WRITE_BEHIND",
    }
}

/// Columns sized to their content, numbers right-aligned.
#[derive(Debug)]
pub struct Table {
    headers: Vec<&'static str>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// `columns`: header and whether the column is right-aligned.
    pub fn new(columns: &[(&'static str, bool)]) -> Table {
        Table {
            headers: columns.iter().map(|c| c.0).collect(),
            right: columns.iter().map(|c| c.1).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let headers: Vec<String> = self.headers.iter().map(|h| h.to_string()).collect();
        for row in std::iter::once(&headers).chain(&self.rows) {
            let last = row.len().saturating_sub(1);
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                let width = widths.get(i).copied().unwrap_or(0);
                let pad = " ".repeat(width.saturating_sub(cell.chars().count()));
                if i > 0 {
                    line.push_str("  ");
                }
                if self.right.get(i).copied().unwrap_or(false) {
                    line.push_str(&pad);
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    if i < last {
                        line.push_str(&pad);
                    }
                }
            }
            out.push_str(&line);
            out.push('\n');
        }
        out
    }
}

/// `label  value` lines with the values aligned, for one object's fields.
pub fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    // A value of several lines (a dead letter's error and stack trace) keeps
    // to its column, so the labels stay readable down the left.
    let continued = format!("\n{:width$}  ", "");
    pairs
        .iter()
        .map(|(label, value)| {
            let value = value.lines().collect::<Vec<_>>().join(&continued);
            format!("{label:<width$}  {value}\n")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_of_several_lines_keeps_to_its_column() {
        let shown = fields(&[
            ("seq", "7".into()),
            (
                "error",
                "the actor raised X: y\nTraceback:\n  File \"a.py\"".into(),
            ),
        ]);
        assert_eq!(
            shown,
            "seq    7\nerror  the actor raised X: y\n       Traceback:\n         File \"a.py\"\n"
        );
    }

    #[test]
    fn json_shows_as_itself_and_other_bytes_as_base64() {
        assert_eq!(Shown::of(b"5").json(), json!(5));
        assert_eq!(Shown::of(br#"{"a":[1,"x"]}"#).text(), r#"{"a":[1,"x"]}"#);
        let raw = Shown::of(&[0, 159, 146, 150]);
        assert_eq!(raw.json(), json!({"base64": "AJ+Slg=="}));
        assert_eq!(raw.text(), "base64:AJ+Slg==");
        // JSON that looks like the raw form is shown raw, so the form never
        // lies about the bytes.
        let lookalike = br#"{"base64":"AA=="}"#;
        assert_eq!(
            Shown::of(lookalike).json(),
            json!({"base64": b64(lookalike)})
        );
        assert_eq!(Shown::of(b"").text(), "base64:");
    }

    #[test]
    fn payloads_follow_their_content_type() {
        let bytes = pb::Payload {
            data: "5".into(),
            content_type: pb::ContentType::Bytes as i32,
        };
        assert_eq!(
            Shown::payload(Some(&bytes)).json(),
            json!({"base64": "NQ=="})
        );
        let empty = pb::Payload::default();
        assert_eq!(Shown::payload(Some(&empty)).json(), Value::Null);
        assert_eq!(Shown::payload(None).json(), Value::Null);
    }

    #[test]
    fn times_are_rfc3339_and_zero_is_none() {
        assert_eq!(time(0), None);
        assert_eq!(
            time(1_700_000_000_123).as_deref(),
            Some("2023-11-14T22:13:20.123Z")
        );
        let mut o = serde_json::Map::new();
        time_json(&mut o, "due", 0);
        assert_eq!(Value::Object(o), json!({"due": null, "due_unix_ms": null}));
        assert_eq!(duration(850), "850ms");
        assert_eq!(duration(3_723_400), "1h 2m 3s");
        assert_eq!(duration_cell(0), "-");
    }

    #[test]
    fn tables_fit_their_content() {
        let mut t = Table::new(&[("ID", false), ("TURNS", true), ("VALUE", false)]);
        t.row(vec!["a-long-id".into(), "7".into(), "x".into()]);
        t.row(vec!["b".into(), "1234567".into(), "y".into()]);
        assert_eq!(
            t.render(),
            "ID           TURNS  VALUE\n\
             a-long-id        7  x\n\
             b          1234567  y\n"
        );
    }
}
