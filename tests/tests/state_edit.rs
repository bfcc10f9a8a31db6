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

    // Refusals change nothing and say why.
    let err = set_log(&daemon, "p", "[oops", &[], 2).await?;
    assert!(err.contains("--data is not JSON"), "{err}");
    let (_, err) = cli_against(&daemon, &["state", "delete", TY, "p", "log", "log"], 2).await?;
    assert!(err.contains("twice"), "{err}");
    let (_, err) = cli_against(&daemon, &["state", "set", TY, "p", "", "--data", "1"], 2).await?;
    assert!(err.contains("state key"), "{err}");

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
