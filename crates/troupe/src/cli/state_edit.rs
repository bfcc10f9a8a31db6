//! `troupe state set | delete`: an operator's repair of an actor's state
//! keys (a cart stuck on a bad value, a key an old version left behind)
//! without app code or a store client. The daemon ends the actor's
//! activation first, so the change is what its next activation loads;
//! `--if-value` makes `set` (and `delete` of one key) a compare-and-set
//! against what was read; `--ttl` sets or ends the key's expiry.

use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use troupe_proto::v1 as pb;
use troupe_runtime::input::millis;

use super::actors::actor_ref;
use super::json_arg::JsonArg;
use super::render::Shown;
use super::{actor_name, connect, emit, emit_json, fail, Daemon, Exit, Output, Target};

/// Values longer than this show abridged in the table output.
const SHOWN_CHARS: usize = 80;

/// The value `troupe state set` writes: JSON as the SDKs store it, or raw
/// bytes.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub struct StateValue {
    /// The key's new value as JSON, stored as the SDKs store state (the
    /// JSON text), e.g. --data 5 or --data '{"items": []}'. @FILE reads
    /// it from FILE, @- from standard input.
    #[arg(long, value_name = "JSON")]
    pub data: Option<String>,
    /// The key's new value as raw bytes, in base64.
    #[arg(long, value_name = "BYTES")]
    pub base64: Option<String>,
}

impl StateValue {
    fn bytes(&self) -> anyhow::Result<Vec<u8>> {
        match (&self.data, &self.base64) {
            (Some(text), _) => json_bytes("--data", text),
            (None, Some(text)) => base64_bytes("--base64", text),
            (None, None) => Err(fail(Exit::Usage, "give the value with --data or --base64")),
        }
    }
}

/// The value a compare-and-set expects a key to hold as the edit applies
/// (`troupe state set`, and `delete` of one key); left out, whatever is
/// there is replaced.
#[derive(Debug, clap::Args)]
#[group(required = false, multiple = false)]
pub struct ExpectedValue {
    /// Only if the key still holds this JSON value (as `state get` showed
    /// it); else nothing changes and the command exits 6. @FILE reads it
    /// from FILE, @- from standard input.
    #[arg(long, value_name = "JSON")]
    pub if_value: Option<String>,
    /// Only if the key still holds these raw bytes, in base64.
    #[arg(long, value_name = "BYTES")]
    pub if_base64: Option<String>,
}

/// What `troupe state set` expects the key to hold: a value, or nothing.
#[derive(Debug, clap::Args)]
pub struct StateExpect {
    #[command(flatten)]
    pub value: ExpectedValue,
    /// Only if the actor does not have the key yet.
    #[arg(long, conflicts_with_all = ["if_value", "if_base64"])]
    pub if_absent: bool,
}

impl StateExpect {
    fn change(&self, key: &str) -> anyhow::Result<Option<pb::StateChange>> {
        if self.if_absent {
            return Ok(Some(pb::StateChange {
                ttl_ms: None,
                key: key.to_owned(),
                op: Some(pb::state_change::Op::Delete(true)),
            }));
        }
        self.value.change(key)
    }
}

impl ExpectedValue {
    /// `troupe state delete`'s expectation: of its one key, if any.
    fn of_one(&self, keys: &[String]) -> anyhow::Result<Vec<pb::StateChange>> {
        if self.if_value.is_none() && self.if_base64.is_none() {
            return Ok(Vec::new());
        }
        let [key] = keys else {
            return Err(fail(
                Exit::Usage,
                format!(
                    "--if-value and --if-base64 name the value of one key, and {} keys were \
                     given; delete them one at a time to check each",
                    keys.len()
                ),
            ));
        };
        Ok(self.change(key)?.into_iter().collect())
    }

    /// `key` expected to hold the value of `--if-value` (JSON) or
    /// `--if-base64`; `None` without either.
    fn change(&self, key: &str) -> anyhow::Result<Option<pb::StateChange>> {
        let bytes = match (&self.if_value, &self.if_base64) {
            (Some(text), _) => json_bytes("--if-value", text)?,
            (None, Some(text)) => base64_bytes("--if-base64", text)?,
            (None, None) => return Ok(None),
        };
        Ok(Some(pb::StateChange {
            ttl_ms: None,
            key: key.to_owned(),
            op: Some(pb::state_change::Op::Set(bytes.into())),
        }))
    }
}

/// `given` (JSON, or @FILE) as the SDKs store a JSON value: compact JSON
/// text.
fn json_bytes(flag: &str, given: &str) -> anyhow::Result<Vec<u8>> {
    let hint = format!(
        "give the value as JSON, e.g. {flag} 5, {flag} '\"text\"' or {flag} '{{\"items\": \
         []}}', or @FILE to read it from a file; raw bytes go in base64"
    );
    let value = JsonArg::read(flag, given)?.parse(flag, &hint)?;
    Ok(value.to_string().into_bytes())
}

fn base64_bytes(flag: &str, text: &str) -> anyhow::Result<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| fail(Exit::Usage, format!("{flag} is not base64 ({e}): {text}")))
}

pub async fn state_set(
    target: &Target,
    actor_type: String,
    id: String,
    key: String,
    value: StateValue,
    expect: StateExpect,
    ttl: Option<Duration>,
) -> anyhow::Result<()> {
    let expect = expect.change(&key)?.into_iter().collect();
    let change = pb::StateChange {
        ttl_ms: ttl.map(millis),
        key,
        op: Some(pb::state_change::Op::Set(value.bytes()?.into())),
    };
    let daemon = connect(target).await?;
    edit(&daemon, target, actor_type, id, vec![change], expect).await
}

pub async fn state_delete(
    target: &Target,
    actor_type: String,
    id: String,
    keys: Vec<String>,
    expect: ExpectedValue,
) -> anyhow::Result<()> {
    let expect = expect.of_one(&keys)?;
    let changes = keys
        .into_iter()
        .map(|key| pb::StateChange {
            ttl_ms: None,
            key,
            op: Some(pb::state_change::Op::Delete(true)),
        })
        .collect();
    let daemon = connect(target).await?;
    edit(&daemon, target, actor_type, id, changes, expect).await
}

/// Sends the edit and prints each key before and after.
pub(super) async fn edit(
    daemon: &Daemon,
    target: &Target,
    actor_type: String,
    id: String,
    changes: Vec<pb::StateChange>,
    expect: Vec<pb::StateChange>,
) -> anyhow::Result<()> {
    let name = actor_name(&actor_type, &id);
    let mut admin = daemon.admin();
    let request = daemon.request(format!("edit the state of {name}"));
    let reply = admin
        .edit_actor_state(pb::EditActorStateRequest {
            actor: actor_ref(&actor_type, &id),
            changes: changes.clone(),
            expect,
        })
        .await
        .map_err(|s| request.failed(s))?
        .into_inner();
    let rows: Vec<(&str, Option<Shown>, Option<Shown>)> = changes
        .iter()
        .map(|change| {
            let before = reply
                .before
                .iter()
                .find(|b| b.key == change.key)
                .and_then(value_of);
            (change.key.as_str(), before, value_of(change))
        })
        .collect();
    match target.output {
        Output::Json => {
            let keys: Vec<Value> = rows
                .iter()
                .map(|(key, before, after)| {
                    json!({
                        "key": key,
                        "before": before.as_ref().map_or(Value::Null, Shown::json),
                        "after": after.as_ref().map_or(Value::Null, Shown::json),
                    })
                })
                .collect();
            emit_json(&json!({
                "type": actor_type,
                "id": id,
                "was_active": reply.was_active,
                "keys": keys,
            }))
        }
        Output::Table => emit(&summary(&name, reply.was_active, &rows)),
    }
}

fn value_of(change: &pb::StateChange) -> Option<Shown> {
    match &change.op {
        Some(pb::state_change::Op::Set(bytes)) => Some(Shown::of(bytes)),
        _ => None,
    }
}

/// "edited counter/c1 (…)" and a line per key: `count: 5 → 7`.
fn summary(name: &str, was_active: bool, rows: &[(&str, Option<Shown>, Option<Shown>)]) -> String {
    let active = if was_active {
        " (it was active: its app saw a deactivation)"
    } else {
        ""
    };
    let shown = |value: &Option<Shown>, absent: &str| match value {
        Some(value) => abridged(&value.text()),
        None => absent.to_owned(),
    };
    let mut out = format!("edited {name}{active}\n");
    for (key, before, after) in rows {
        out.push_str(&format!(
            "  {key}: {} → {}\n",
            shown(before, "(absent)"),
            shown(after, "(deleted)")
        ));
    }
    out
}

fn abridged(text: &str) -> String {
    match text.char_indices().nth(SHOWN_CHARS) {
        None => text.to_owned(),
        Some((cut, _)) => format!("{}…", &text[..cut]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_shows_each_key_before_and_after() {
        let rows = [
            ("count", Some(Shown::of(b"5")), Some(Shown::of(b"7"))),
            ("total", None, None),
            ("blob", Some(Shown::of(&[0xff, 0])), None),
        ];
        assert_eq!(
            summary("counter/c1", true, &rows),
            "edited counter/c1 (it was active: its app saw a deactivation)\n  count: 5 → 7\n  \
             total: (absent) → (deleted)\n  blob: base64:/wA= → (deleted)\n"
        );
        let long = "x".repeat(200);
        assert_eq!(abridged(&long).chars().count(), SHOWN_CHARS + 1);
    }

    #[test]
    fn an_expectation_is_a_value_or_the_key_absent() -> anyhow::Result<()> {
        let expect = |if_value: Option<&str>, if_absent| StateExpect {
            value: ExpectedValue {
                if_value: if_value.map(str::to_owned),
                if_base64: None,
            },
            if_absent,
        };
        assert_eq!(expect(None, false).change("k")?, None);
        assert_eq!(
            expect(Some("[7, 3]"), false).change("k")?,
            Some(pb::StateChange {
                ttl_ms: None,
                key: "k".into(),
                op: Some(pb::state_change::Op::Set(b"[7,3]".to_vec().into())),
            })
        );
        assert_eq!(
            expect(None, true).change("k")?,
            Some(pb::StateChange {
                ttl_ms: None,
                key: "k".into(),
                op: Some(pb::state_change::Op::Delete(true)),
            })
        );
        Ok(())
    }

    #[test]
    fn data_is_stored_as_compact_json_and_base64_as_bytes() {
        let data = StateValue {
            data: Some("{ \"a\" : [1, 2] }".into()),
            base64: None,
        };
        assert_eq!(data.bytes().ok(), Some(br#"{"a":[1,2]}"#.to_vec()));
        let raw = StateValue {
            data: None,
            base64: Some("/wA=".into()),
        };
        assert_eq!(raw.bytes().ok(), Some(vec![0xff, 0]));
        for bad in [
            StateValue {
                data: Some("{nope".into()),
                base64: None,
            },
            StateValue {
                data: None,
                base64: Some("!!".into()),
            },
        ] {
            let Err(e) = bad.bytes() else {
                panic!("{bad:?} was accepted")
            };
            assert_eq!(super::super::exit_of(&e), Exit::Usage, "{e:?}");
        }
    }
}
