//! `troupe store copy` against the real binary and a real PostgreSQL: a
//! single daemon's sled store moves to PostgreSQL and back, and a daemon on
//! each copy serves what the first one stored — state, dead letters,
//! reminders and the alarm, and the answer of a keyed call.

use anyhow::Context;
use serde_json::{json, Value};
use troupe_tests::log_app::{restart_args, start, LOG_TYPE};
use troupe_tests::log_seed::{json_of, keyed_call, seed, stored_log};
use troupe_tests::*;

const TY: &str = LOG_TYPE;

/// Runs `troupe store copy`; its output, unless it exits otherwise than `code`.
async fn copy(from: &str, to: &str, extra: &[&str], code: i32) -> anyhow::Result<(String, String)> {
    let args = [&["store", "copy", "--from", from, "--to", to], extra].concat();
    let (status, out, err) = run_cli(&args).await?;
    anyhow::ensure!(
        status.code() == Some(code),
        "`troupe {}` exited {:?}, expected {code}\nstdout:\n{out}\nstderr:\n{err}",
        args.join(" "),
        status.code()
    );
    Ok((out, err))
}

/// What the first daemon stored, as a daemon on a copy must serve it.
async fn serves_the_copy(daemon: &Daemon) -> anyhow::Result<()> {
    let mut client = daemon.client().await?;
    assert_eq!(stored_log(&mut client, "p").await?, vec![1]);
    assert_eq!(stored_log(&mut client, "q").await?, vec![5]);
    let letters = json_of(daemon, &["dead-letters", "list"]).await?;
    assert_eq!(letters.as_array().map(Vec::len), Some(1), "{letters}");
    assert_eq!(letters[0]["method"], json!("flaky"), "{letters}");
    let reminders = json_of(daemon, &["reminders", "list", "--type", TY, "--id", "p"]).await?;
    assert_eq!(reminders.as_array().map(Vec::len), Some(2), "{reminders}");
    // The call record came along: the same key answers without running
    // the call again.
    keyed_call(&mut client).await?;
    assert_eq!(stored_log(&mut client, "p").await?, vec![1]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sled_store_moves_to_postgres_and_back() -> anyhow::Result<()> {
    let Some(store) = TestStore::postgres("a_sled_store_moves_to_postgres_and_back").await? else {
        return Ok(());
    };
    let TestStore::Postgres(db) = &store else {
        anyhow::bail!("TestStore::postgres made another store");
    };
    let url = db.url.clone();
    let root = tempfile::tempdir()?;
    let one = root.path().join("one");
    let (mut daemon, app) = start(&one, &restart_args(&TestStore::Sled)).await?;
    seed(&daemon, &app).await?;
    let one = one.to_str().context("temp path is not UTF-8")?;

    // Not while a daemon holds the store, nor from a directory holding none.
    let (_, err) = copy(one, &url, &[], 1).await?;
    assert!(err.contains("no other troupe daemon uses it"), "{err}");
    daemon.terminate().await?;
    drop(app);
    let (_, err) = copy(&format!("{one}-missing"), &url, &[], 2).await?;
    assert!(err.contains("no sled store there"), "{err}");

    let (out, _) = copy(one, &url, &["-o", "json"], 0).await?;
    let copied: Value = serde_json::from_str(&out).with_context(|| out.clone())?;
    assert_eq!(
        (
            &copied["actors"],
            &copied["state_keys"],
            &copied["dead_letters"],
            &copied["reminders"]
        ),
        (&json!(2), &json!(2), &json!(1), &json!(2)),
        "{copied}"
    );
    assert!(
        copied["call_records"].as_u64().is_some_and(|n| n >= 1),
        "{copied}"
    );
    // The destination is full now: a second copy is refused.
    let (_, err) = copy(one, &url, &[], 2).await?;
    assert!(err.contains("already holds"), "{err}");

    let (mut on_postgres, _app) = start(&root.path().join("pg"), &restart_args(&store)).await?;
    serves_the_copy(&on_postgres).await?;
    // While a daemon uses the database: never into it, and out of it only
    // when told a copy that is no snapshot will do.
    let (_, err) = copy(one, &url, &[], 2).await?;
    assert!(err.contains("stop them before copying into it"), "{err}");
    let live = root.path().join("live");
    let live = live.to_str().context("temp path is not UTF-8")?;
    let (_, err) = copy(&url, live, &[], 2).await?;
    assert!(err.contains("--live-source"), "{err}");
    let (out, err) = copy(&url, live, &["--live-source", "-o", "json"], 0).await?;
    assert!(err.contains("copying anyway"), "{err}");
    let copied: Value = serde_json::from_str(&out).with_context(|| out.clone())?;
    assert_eq!(copied["actors"], json!(2), "{copied}");
    on_postgres.terminate().await?;

    // And back into a new sled store, which a daemon serves the same.
    let three = root.path().join("three");
    let three = three.to_str().context("temp path is not UTF-8")?;
    let (out, _) = copy(&url, three, &[], 0).await?;
    assert!(out.starts_with("copied postgres://"), "{out}");
    assert!(out.contains(&format!("--data-dir {three}")), "{out}");
    let (on_sled, _app) =
        start(std::path::Path::new(three), &restart_args(&TestStore::Sled)).await?;
    serves_the_copy(&on_sled).await?;
    Ok(())
}

/// A copy out of PostgreSQL holds the database as of its start: a daemon
/// that writes while it runs cannot tear it. The copy reads reminders
/// last; a lock holds it there while more are committed, which a copy
/// reading each page as it comes would take in.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_copy_out_of_postgres_holds_the_database_as_of_its_start() -> anyhow::Result<()> {
    let Some(store) =
        TestStore::postgres("a_copy_out_of_postgres_holds_the_database_as_of_its_start").await?
    else {
        return Ok(());
    };
    let TestStore::Postgres(db) = &store else {
        anyhow::bail!("TestStore::postgres made another store");
    };
    let url = db.url.clone();
    let root = tempfile::tempdir()?;
    let (mut daemon, app) = start(&root.path().join("pg"), &restart_args(&store)).await?;
    seed(&daemon, &app).await?;
    daemon.terminate().await?;
    drop(app);

    let (mut writer, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let (watcher, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let late = writer.transaction().await?;
    late.batch_execute("LOCK TABLE troupe_reminders IN ACCESS EXCLUSIVE MODE")
        .await?;
    let to = root.path().join("copy");
    let to = to.to_str().context("temp path is not UTF-8")?.to_owned();
    let from = url.clone();
    let copying = tokio::spawn(async move { copy(&from, &to, &["-o", "json"], 0).await });

    // The copy has started once it waits for the lock.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let row = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND application_name = 'troupe store copy' AND wait_event_type = 'Lock'",
                &[],
            )
            .await?;
        if row.try_get::<_, i64>(0)? > 0 {
            break;
        }
        anyhow::ensure!(
            !copying.is_finished(),
            "the copy ended without waiting for the lock: {:?}",
            copying.await
        );
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the copy never waited for the reminders' lock"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    late.batch_execute(
        "INSERT INTO troupe_reminders \
         SELECT actor_type, actor_id, name || '-late', due_ms, data FROM troupe_reminders",
    )
    .await?;
    late.commit().await?;

    let (out, _) = copying.await??;
    let copied: Value = serde_json::from_str(&out).with_context(|| out.clone())?;
    assert_eq!(copied["reminders"], json!(2), "{copied}");
    let now = watcher
        .query_one("SELECT count(*) FROM troupe_reminders", &[])
        .await?;
    assert_eq!(now.try_get::<_, i64>(0)?, 4);
    Ok(())
}
