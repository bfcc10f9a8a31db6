//! `troupe state set | delete` against the real binary and a real app: the
//! edit replaces what the actor held (written-behind changes included), its
//! app sees the activation end and the next one start on the edited state,
//! and the edit is what a restart finds. On sled and on PostgreSQL.

use serde_json::json;
use troupe_tests::log_app::{restart_args, start, LOG_TYPE};
use troupe_tests::log_seed::{json_of, stored_log};
use troupe_tests::*;

const TY: &str = LOG_TYPE;

async fn append(client: &mut Client, id: &str, n: i64) -> anyhow::Result<()> {
    client
        .invoke(TY, id, "append", &json!({"kwargs": {"n": n}}).to_string())
        .await?;
    Ok(())
}

/// `troupe state set log ID log --data VALUE EXTRA...`, expecting exit
/// `code`; its stderr.
async fn set_log(
    daemon: &Daemon,
    id: &str,
    value: &str,
    extra: &[&str],
    code: i32,
) -> anyhow::Result<String> {
    let args = [&["state", "set", TY, id, "log", "--data", value], extra].concat();
    let (_, err) = cli_against(daemon, &args, code).await?;
    Ok(err)
}

/// `troupe state edit` with `script` as the editor, on log/p's key "log".
async fn edit_with(
    daemon: &Daemon,
    dir: &std::path::Path,
    script: &str,
    code: i32,
) -> anyhow::Result<(String, String)> {
    edit_with_args(daemon, dir, script, &[], code).await
}

/// [`edit_with`], with `extra` flags after the key.
async fn edit_with_args(
    daemon: &Daemon,
    dir: &std::path::Path,
    script: &str,
    extra: &[&str],
    code: i32,
) -> anyhow::Result<(String, String)> {
    use std::os::unix::fs::PermissionsExt as _;
    let editor = dir.join("editor.sh");
    std::fs::write(&editor, format!("#!/bin/sh\nset -e\n{script}\n"))?;
    std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755))?;
    let addr = daemon.addr.to_string();
    let editor = editor.display().to_string();
    let args = [&["state", "edit", TY, "p", "log", "--addr", &addr], extra].concat();
    let (status, out, err) = run_cli_env(&args, &[("VISUAL", ""), ("EDITOR", &editor)]).await?;
    anyhow::ensure!(
        status.code() == Some(code),
        "state edit exited {status}, expected {code}\nstdout:\n{out}\nstderr:\n{err}"
    );
    Ok((out, err))
}

/// The editor flow: what is saved is written back only if the key still
/// holds what was opened.
async fn in_editor(daemon: &Daemon, dir: &std::path::Path) -> anyhow::Result<()> {
    // The editor sees the value pretty-printed; a saved change lands.
    let (out, _) = edit_with(daemon, dir, r#"sed -i 's/^  5,$/  50,/' "$1""#, 0).await?;
    assert_eq!(
        out,
        "edited log/p (it was active: its app saw a deactivation)\n  log: [5,4] → [50,4]\n"
    );
    // Saved unchanged, or emptied: nothing is sent.
    let (out, _) = edit_with(daemon, dir, "true", 0).await?;
    assert_eq!(out, "no change to \"log\" of log/p\n");
    // With --ttl the new expiry is a change, the value saved as it was.
    let (out, _) = edit_with_args(daemon, dir, "true", &["--ttl", "1h"], 0).await?;
    assert!(out.starts_with("edited log/p"), "{out}");
    let (got, _) = cli_against(daemon, &["state", "get", TY, "p", "-o", "json"], 0).await?;
    let got: serde_json::Value = serde_json::from_str(&got)?;
    assert_eq!(got["state"]["log"], json!([50, 4]), "{got}");
    assert!(got["expires_unix_ms"]["log"].as_u64().is_some(), "{got}");
    let (out, _) = edit_with(daemon, dir, r#": > "$1""#, 0).await?;
    assert!(
        out.starts_with("the file was left empty: nothing changed"),
        "{out}"
    );
    // Not JSON: refused, the text kept for another try.
    let (_, err) = edit_with(daemon, dir, r#"echo '[oops' > "$1""#, 2).await?;
    let kept = err.rsplit("kept in ").next().unwrap_or_default().trim();
    assert_eq!(std::fs::read_to_string(kept)?, "[oops\n", "{err}");
    std::fs::remove_file(kept)?;
    // Changed by someone else while the editor was open: not overwritten.
    let troupe = troupe_bin().display().to_string();
    let meanwhile = format!(
        r#"{troupe} state set {TY} p log --data '[1]' --addr {} >/dev/null
sed -i 's/50/51/' "$1""#,
        daemon.addr
    );
    let (_, err) = edit_with(daemon, dir, &meanwhile, 6).await?;
    assert!(err.contains("not what the edit expects"), "{err}");
    let (_, err) = edit_with(daemon, dir, "exit 3", 1).await?;
    assert!(
        err.contains("exited with") && err.contains("nothing changed"),
        "{err}"
    );
    // Back to what the test expects of log/p from here on.
    cli_against(
        daemon,
        &[
            "state", "set", TY, "p", "log", "--data", "[5,4]", "--ttl", "0",
        ],
        0,
    )
    .await?;
    Ok(())
}

async fn edits_replace_what_the_actor_held(store: TestStore) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let args = restart_args(&store);
    let (mut daemon, app) = start(dir.path(), &args).await?;
    let mut client = daemon.client().await?;
    append(&mut client, "p", 1).await?;
    append(&mut client, "p", 2).await?;

    let edited = json_of(&daemon, &["state", "set", TY, "p", "log", "--data", "[7]"]).await?;
    assert_eq!(
        edited,
        json!({"type": TY, "id": "p", "was_active": true,
               "keys": [{"key": "log", "before": [1, 2], "after": [7]}]})
    );
    // The app's copy of [1, 2] ended with its activation; the next starts
    // on the edit.
    append(&mut client, "p", 3).await?;
    assert_eq!(stored_log(&mut client, "p").await?, vec![7, 3]);

    let (out, _) = cli_against(&daemon, &["state", "delete", TY, "p", "log", "other"], 0).await?;
    assert_eq!(
        out,
        "edited log/p (it was active: its app saw a deactivation)\n  log: [7,3] → (deleted)\n  \
         other: (absent) → (deleted)\n"
    );
    append(&mut client, "p", 4).await?;
    // Compare-and-set: a stale read changes nothing (ABORTED, exit 6);
    // what the key holds now applies.
    let err = set_log(&daemon, "p", "[9]", &["--if-value", "[7,3]"], 6).await?;
    assert!(err.contains("\"log\" holds another value"), "{err}");
    set_log(&daemon, "p", "[9]", &["--if-absent"], 6).await?;
    set_log(&daemon, "p", "[5]", &["--if-value", "[4]"], 0).await?;
    append(&mut client, "p", 4).await?;
    // An actor that never ran gets state it starts on.
    set_log(&daemon, "fresh", "[40]", &["--if-absent"], 0).await?;
    append(&mut client, "fresh", 2).await?;
    // Deleting one key checks it the same way; with more keys the check is
    // refused before anything is sent.
    set_log(&daemon, "gone", "[40,2]", &[], 0).await?;
    let delete_gone = |extra: &'static [&'static str]| {
        [&["state", "delete", TY, "gone", "log"][..], extra].concat()
    };
    let (_, err) = cli_against(&daemon, &delete_gone(&["--if-value", "[40]"]), 6).await?;
    assert!(err.contains("\"log\" holds another value"), "{err}");
    let (_, err) = cli_against(&daemon, &delete_gone(&["x", "--if-value", "[40,2]"]), 2).await?;
    assert!(err.contains("one key"), "{err}");
    assert_eq!(stored_log(&mut client, "gone").await?, vec![40, 2]);
    cli_against(&daemon, &delete_gone(&["--if-value", "[40,2]"]), 0).await?;

    // Refusals change nothing and say why.
    let err = set_log(&daemon, "p", "[oops", &[], 2).await?;
    assert!(err.contains("--data is not JSON"), "{err}");
    let (_, err) = cli_against(&daemon, &["state", "delete", TY, "p", "log", "log"], 2).await?;
    assert!(err.contains("twice"), "{err}");
    let (_, err) = cli_against(&daemon, &["state", "set", TY, "p", "", "--data", "1"], 2).await?;
    assert!(err.contains("state key"), "{err}");

    in_editor(&daemon, dir.path()).await?;

    // A value past what a shell argument holds (128 KiB), from a file.
    let file = dir.path().join("filed.json");
    let filed: Vec<i64> = (0..60_000).collect();
    std::fs::write(&file, serde_json::to_string(&filed)?)?;
    let at_file = format!("@{}", file.display());
    cli_against(
        &daemon,
        &["state", "set", TY, "filed", "log", "--data", &at_file],
        0,
    )
    .await?;
    assert_eq!(stored_log(&mut client, "filed").await?, filed);

    // A value as large as the daemon takes (--max-payload-bytes, 4 MiB by
    // default) goes in through the admin API and comes back to the CLI as
    // what the next edit replaced: neither side's message limit is the
    // payload limit.
    let big = format!("\"{}\"", "a".repeat(4 * 1024 * 1024 - 2));
    daemon
        .admin()
        .await?
        .edit_actor_state(pb::EditActorStateRequest {
            actor: Some(actor(TY, "big")),
            changes: vec![pb::StateChange {
                ttl_ms: None,
                key: "blob".into(),
                op: Some(pb::state_change::Op::Set(big.clone().into())),
            }],
            expect: Vec::new(),
        })
        .await?;
    let (out, _) = cli_against(&daemon, &["state", "delete", TY, "big", "blob"], 0).await?;
    assert!(
        out.contains("blob: \"aaaa"),
        "{}",
        &out[..out.len().min(200)]
    );
    let (out, _) = cli_against(&daemon, &["state", "get", TY, "big"], 0).await?;
    assert_eq!(out, "log/big has no state\n");

    daemon.terminate().await?;
    drop(app);
    let (daemon, _app) = start(dir.path(), &args).await?;
    let mut client = daemon.client().await?;
    assert_eq!(stored_log(&mut client, "p").await?, vec![5, 4]);
    assert_eq!(stored_log(&mut client, "fresh").await?, vec![40, 2]);
    assert_eq!(stored_log(&mut client, "gone").await?, Vec::<i64>::new());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn edits_replace_what_the_actor_held_on_sled() -> anyhow::Result<()> {
    edits_replace_what_the_actor_held(TestStore::Sled).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn edits_replace_what_the_actor_held_on_postgres() -> anyhow::Result<()> {
    match TestStore::postgres("edits_replace_what_the_actor_held_on_postgres").await? {
        Some(store) => edits_replace_what_the_actor_held(store).await,
        None => Ok(()),
    }
}
