//! `troupe state edit TYPE ID KEY`: one state key's value opened in the
//! user's editor (`$VISUAL`, `$EDITOR`, else `vi`), as `kubectl edit` and
//! `restate kv edit` do, then written back only if the key still holds
//! what was opened (a compare-and-set): a change made meanwhile is never
//! overwritten unseen.

use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use troupe_proto::v1 as pb;
use troupe_runtime::input::millis;

use super::actors::actor_ref;
use super::state_edit::edit;
use super::{actor_name, connect, emit, fail, Exit, Target};

pub async fn state_in_editor(
    target: &Target,
    actor_type: String,
    id: String,
    key: String,
    ttl: Option<Duration>,
) -> anyhow::Result<()> {
    let name = actor_name(&actor_type, &id);
    let daemon = connect(target).await?;
    let request = daemon.request(format!("read the state of {name}"));
    let reply = daemon
        .actor_client()
        .get_state(pb::GetStateRequest {
            actor: actor_ref(&actor_type, &id),
            keys: vec![key.clone()],
        })
        .await
        .map_err(|s| request.failed(s))?
        .into_inner();
    let stored = reply.entries.get(&key);
    let opened = match stored {
        None => Value::Null,
        Some(bytes) => serde_json::from_slice::<Value>(bytes).map_err(|_| {
            fail(
                Exit::Usage,
                format!(
                    "{name}'s key {key:?} holds bytes that are not JSON, which an editor cannot \
                     show; set it with `troupe state set {actor_type} {id} {key} --base64 ...`"
                ),
            )
        })?,
    };

    let mut file = tempfile::Builder::new()
        .prefix("troupe-state-")
        .suffix(".json")
        .tempfile()?;
    writeln!(file, "{}", serde_json::to_string_pretty(&opened)?)?;
    file.flush()?;
    run_editor(file.path()).await?;
    let text = std::fs::read_to_string(file.path())?;
    if text.trim().is_empty() {
        return emit(&format!(
            "the file was left empty: nothing changed in {name} (delete a key with `troupe \
             state delete`)\n"
        ));
    }
    let edited = match serde_json::from_str::<Value>(&text) {
        Ok(value) => value,
        Err(e) => {
            let (_, kept) = file.keep()?;
            return Err(fail(
                Exit::Usage,
                format!(
                    "the edited text is not JSON ({e}); nothing changed in {name}. Your text is \
                     kept in {}",
                    kept.display()
                ),
            ));
        }
    };
    // A new expiry is a change of its own, whatever the value.
    if edited == opened && ttl.is_none() {
        return emit(&format!("no change to {key:?} of {name}\n"));
    }
    let change = pb::StateChange {
        ttl_ms: ttl.map(millis),
        key: key.clone(),
        op: Some(pb::state_change::Op::Set(
            edited.to_string().into_bytes().into(),
        )),
    };
    // The bytes as read, not re-encoded: the daemon compares bytes.
    let expect = pb::StateChange {
        ttl_ms: None,
        key,
        op: Some(match stored {
            Some(bytes) => pb::state_change::Op::Set(bytes.clone()),
            None => pb::state_change::Op::Delete(true),
        }),
    };
    edit(&daemon, target, actor_type, id, vec![change], vec![expect]).await
}

/// Runs the user's editor on `path` and waits for it to exit; through the
/// shell, so an editor given with arguments (`code --wait`) works.
async fn run_editor(path: &Path) -> anyhow::Result<()> {
    let editor = ["VISUAL", "EDITOR"]
        .into_iter()
        .filter_map(|var| std::env::var(var).ok())
        .find(|value| !value.trim().is_empty())
        .unwrap_or_else(|| "vi".to_owned());
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(path)
        .status()
        .await
        .map_err(|e| {
            fail(
                Exit::Other,
                format!("cannot run the editor {editor:?} through sh: {e}"),
            )
        })?;
    if !status.success() {
        return Err(fail(
            Exit::Other,
            format!(
                "the editor {editor:?} exited with {status}; nothing changed (set VISUAL or \
                 EDITOR to the editor to use)"
            ),
        ));
    }
    Ok(())
}
