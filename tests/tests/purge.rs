//! `troupe actors purge` against the real binary: everything stored for the
//! actor goes (state, dead letters, call records, reminders and alarm),
//! nothing of it comes back through a restart, other actors keep theirs.

use serde_json::json;
use troupe_tests::log_app::{restart_args, start, LOG_TYPE};
use troupe_tests::log_seed::{json_of, keyed_call, seed, stored_log};
use troupe_tests::*;

const TY: &str = LOG_TYPE;

async fn purge_erases_the_actor(store: TestStore) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let args = restart_args(&store);
    let (mut daemon, app) = start(dir.path(), &args).await?;
    let mut client = daemon.client().await?;
    // State, a call record, a dead letter, a reminder and the alarm of
    // log/p; log/q's state beside it.
    seed(&daemon, &app).await?;

    // Without --yes nothing happens.
    let (_, err) = cli_against(&daemon, &["actors", "purge", TY, "p"], 2).await?;
    assert!(err.contains("--yes"), "{err}");
    assert_eq!(stored_log(&mut client, "p").await?, vec![1]);

    let purged = json_of(&daemon, &["actors", "purge", TY, "p", "--yes"]).await?;
    assert_eq!(purged["was_active"], json!(true), "{purged}");
    assert_eq!(purged["state_keys"], json!(1), "{purged}");
    assert_eq!(purged["dead_letters"], json!(1), "{purged}");
    assert_eq!(purged["inbox_entries"], json!(0), "{purged}");
    assert_eq!(purged["reminders"], json!(2), "{purged}");
    // The keyed invoke's, and the durable tell's own key.
    assert!(
        purged["call_records"].as_u64().is_some_and(|n| n >= 1),
        "{purged}"
    );
    let (out, _) = cli_against(&daemon, &["actors", "purge", TY, "p", "--yes"], 0).await?;
    assert_eq!(out, "purged log/p: nothing was stored for it\n");

    // Nothing comes back, not through the graceful stop's flush either.
    daemon.terminate().await?;
    drop(app);
    let (daemon, _app) = start(dir.path(), &args).await?;
    let mut client = daemon.client().await?;
    cli_against(&daemon, &["actors", "get", TY, "p"], 4).await?;
    // Both stores say what they take (PostgreSQL: troupe's tables).
    let status = json_of(&daemon, &["status"]).await?;
    assert!(
        status["store_bytes"].as_u64().is_some_and(|n| n > 0),
        "{status}"
    );
    assert_eq!(
        json_of(&daemon, &["dead-letters", "list"]).await?,
        json!([])
    );
    let reminders = json_of(&daemon, &["reminders", "list", "--type", TY, "--id", "p"]).await?;
    assert_eq!(reminders, json!([]));
    assert_eq!(stored_log(&mut client, "q").await?, vec![5]);
    // The call record went too: the same key runs the call again.
    keyed_call(&mut client).await?;
    assert_eq!(stored_log(&mut client, "p").await?, vec![1]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn purge_erases_the_actor_on_sled() -> anyhow::Result<()> {
    purge_erases_the_actor(TestStore::Sled).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn purge_erases_the_actor_on_postgres() -> anyhow::Result<()> {
    match TestStore::postgres("purge_erases_the_actor_on_postgres").await? {
        Some(store) => purge_erases_the_actor(store).await,
        None => Ok(()),
    }
}
