//! `troupe backup` of a daemon under load and `troupe restore` of it: the
//! restored store holds every write acknowledged before the backup began,
//! and every turn whole.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{ensure, Context};
use tokio::sync::Notify;
use troupe_tests::*;

/// Actors under load, and the calls each gets.
const ACTORS: usize = 8;
const CALLS_EACH: usize = 300;

/// `count` and `copy` of `ty`/`id` as the store holds them (the actor is
/// not active on a daemon that has just started: this reads the store).
async fn stored_pair(client: &mut Client, ty: &str, id: &str) -> anyhow::Result<(i64, i64)> {
    let state = client
        .0
        .get_state(pb::GetStateRequest {
            actor: Some(actor(ty, id)),
            keys: Vec::new(),
        })
        .await?
        .into_inner();
    let read = |key: &str| -> anyhow::Result<i64> {
        let bytes = state
            .entries
            .get(key)
            .with_context(|| format!("{ty}/{id} has no {key:?}: {:?}", state.entries))?;
        Ok(serde_json::from_slice(bytes)?)
    };
    Ok((read("count")?, read("copy")?))
}

/// Backs up a daemon hosting `spec` while its actors take turns that set
/// `count` and `copy` to the same new value (a backup that tore a turn
/// would show them apart), restores the backup, and checks it on a daemon
/// started on the restored directory: each turn whole, each write
/// acknowledged before the backup there, and the reminder set before it.
async fn backup_under_load(spec: pb::ActorTypeSpec) -> anyhow::Result<()> {
    let ty = spec.name.clone();
    let args = ["--flush-interval", "1h", "--metrics-listen", "127.0.0.1:0"];
    let (_dir, daemon, _app, mut client) = daemon_with_app(&args, vec![spec]).await?;
    client
        .0
        .set_reminder(pb::SetReminderRequest {
            actor: Some(actor(&ty, "a0")),
            name: "nightly".into(),
            due: "1h".into(),
            ..Default::default()
        })
        .await?;

    let acked: Arc<Vec<AtomicI64>> = Arc::new((0..ACTORS).map(|_| AtomicI64::new(0)).collect());
    let done = Arc::new(AtomicU64::new(0));
    let started = Arc::new(Notify::new());
    let mut load = Vec::new();
    for i in 0..ACTORS {
        let (acked, done, started, ty) = (acked.clone(), done.clone(), started.clone(), ty.clone());
        let mut client = daemon.client().await?;
        load.push(tokio::spawn(async move {
            for _ in 0..CALLS_EACH {
                let value = client
                    .invoke(
                        &ty,
                        &format!("a{i}"),
                        "incr_pair",
                        r#"{"kwargs": {"by": 1}}"#,
                    )
                    .await?;
                acked[i].store(value.as_i64().unwrap_or(0), Ordering::SeqCst);
                if done.fetch_add(1, Ordering::SeqCst) == 100 {
                    started.notify_one();
                }
            }
            anyhow::Ok(())
        }));
    }
    started.notified().await;
    let before: Vec<i64> = acked.iter().map(|a| a.load(Ordering::SeqCst)).collect();

    let root = tempfile::tempdir()?;
    let file = root.path().join("troupe.backup");
    let (file_arg, addr) = (file.display().to_string(), daemon.addr.to_string());
    let (status, out, err) = run_cli(&["backup", &file_arg, "--addr", &addr]).await?;
    ensure!(status.success(), "backup: {status}\n{out}\n{err}");
    ensure!(
        out.starts_with("backed up sled:") && out.contains("; writes paused "),
        "{out}"
    );
    let backed_up = out;
    // The metrics endpoint counts it, for alerts on backups that stop.
    let metrics = troupe_tests::scrape::metrics_addr(&daemon.log())
        .with_context(|| format!("no metrics address in the log:\n{}", daemon.log()))?;
    let scraped = troupe_tests::scrape::scrape(metrics).await?;
    ensure!(
        scraped.sum("troupe_backups_total", &[("outcome", "ok")]) == 1.0
            && scraped.sum("troupe_backups_total", &[("outcome", "failed")]) == 0.0
            && scraped.sum("troupe_backup_last_success_timestamp_seconds", &[]) > 0.0
            && scraped.sum("troupe_backup_last_size_bytes", &[]) > 0.0
            && scraped.sum("troupe_store_size_bytes", &[]) > 0.0,
        "{scraped:?}"
    );
    let during = done.load(Ordering::SeqCst);
    for task in load {
        task.await??;
    }
    ensure!(
        during < (ACTORS * CALLS_EACH) as u64,
        "the load ended before the backup did: it ran beside no turns"
    );
    let (status, _, err) = run_cli(&["backup", &file_arg, "--addr", &addr]).await?;
    ensure!(status.code() == Some(2) && err.contains("exists"), "{err}");

    let restored: PathBuf = root.path().join("restored");
    let restored_arg = restored.display().to_string();
    let (status, out, err) = run_cli(&["restore", &file_arg, "--data-dir", &restored_arg]).await?;
    ensure!(status.success(), "restore: {status}\n{out}\n{err}");
    // The changes logged while the backup read are replayed over its keys,
    // not counted as more keys.
    ensure!(
        keys_said(&out) == keys_said(&backed_up) && keys_said(&out).is_some(),
        "backup said {backed_up:?}, restore {out:?}"
    );
    let (status, _, err) = run_cli(&["restore", &file_arg, "--data-dir", &restored_arg]).await?;
    ensure!(
        status.code() == Some(2) && err.contains("not empty"),
        "{err}"
    );

    let second = Daemon::start(&restored, &[]).await?;
    let mut restored_client = second.client().await?;
    for (i, acked_before) in before.iter().enumerate() {
        let id = format!("a{i}");
        let (count, copy) = stored_pair(&mut restored_client, &ty, &id).await?;
        ensure!(
            count == copy,
            "{ty}/{id}: a torn turn, count {count}, copy {copy}"
        );
        ensure!(
            count >= *acked_before,
            "{ty}/{id}: {count} restored, {acked_before} acknowledged before the backup"
        );
    }
    let reminders = restored_client
        .0
        .list_reminders(pb::ListRemindersRequest {
            r#type: ty.clone(),
            id: "a0".into(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .reminders;
    ensure!(
        reminders.iter().any(|r| r.name == "nightly"),
        "{reminders:?}"
    );
    Ok(())
}

/// The "N keys" a backup or a restore reports.
fn keys_said(out: &str) -> Option<u64> {
    let before = out.split(" keys").next()?;
    before.rsplit(' ').next()?.parse().ok()
}

/// Write-behind that never flushes by itself: only the backup's own flush
/// can have put the counts in the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_holds_the_write_behind_state_acknowledged_before_it() -> anyhow::Result<()> {
    backup_under_load(type_spec("counter")).await
}

/// Durable state: every turn writes the store while the backup reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_beside_durable_writes_holds_whole_turns() -> anyhow::Result<()> {
    backup_under_load(pb::ActorTypeSpec {
        state_mode: pb::StateMode::Durable as i32,
        ..type_spec("vault")
    })
    .await
}

#[tokio::test]
async fn a_daemon_without_sled_says_how_to_back_up_instead() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &["--store", "memory"]).await?;
    let file = dir.path().join("b");
    let (status, _, err) = run_cli(&[
        "backup",
        &file.display().to_string(),
        "--addr",
        &daemon.addr.to_string(),
    ])
    .await?;
    ensure!(status.code() == Some(6), "{status}: {err}");
    ensure!(
        err.contains("FAILED_PRECONDITION") && err.contains("not sled"),
        "{err}"
    );
    ensure!(
        !file.exists() && !dir.path().join("b.partial").exists(),
        "no file left behind"
    );
    Ok(())
}

/// `troupe backup -` and `troupe restore -`: a backup through a pipe, as to
/// compression or object storage, restores the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_through_a_pipe_restores_the_same() -> anyhow::Result<()> {
    use std::process::Stdio;
    use tokio::io::AsyncWriteExt;

    let (_dir, daemon, _app, mut client) = daemon_with_app(&[], vec![type_spec("counter")]).await?;
    assert_eq!(client.incr("counter", "p1", 5).await?, 5);
    let addr = daemon.addr.to_string();
    let backup = tokio::process::Command::new(troupe_bin())
        .args(["backup", "-", "--addr", &addr])
        .stdin(Stdio::null())
        .output()
        .await?;
    let said = String::from_utf8_lossy(&backup.stderr);
    ensure!(backup.status.success(), "backup -: {said}");
    ensure!(
        said.starts_with("backed up sled:") && said.contains(" to -: "),
        "{said}"
    );

    let root = tempfile::tempdir()?;
    let restored = root.path().join("restored");
    let mut restore = tokio::process::Command::new(troupe_bin())
        .args(["restore", "-", "--data-dir"])
        .arg(&restored)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stdin = restore.stdin.take().context("no stdin")?;
    stdin.write_all(&backup.stdout).await?;
    drop(stdin);
    let restore = restore.wait_with_output().await?;
    let out = String::from_utf8_lossy(&restore.stdout);
    ensure!(
        restore.status.success(),
        "restore -: {out}{}",
        String::from_utf8_lossy(&restore.stderr)
    );
    ensure!(out.starts_with("restored standard input into"), "{out}");
    ensure!(
        std::fs::read_dir(root.path())?.count() == 1,
        "standard input's spool file was left beside the data directory"
    );

    let second = Daemon::start(&restored, &[]).await?;
    let (state, _) = second.client().await?.state("counter", "p1").await?;
    ensure!(
        state.get("count").map(|v| v.as_ref()) == Some(&b"5"[..]),
        "{state:?}"
    );

    // Something else piped in is refused as standard input, not as the
    // file that held it for the check.
    let mut refused = tokio::process::Command::new(troupe_bin())
        .args(["restore", "-", "--data-dir"])
        .arg(root.path().join("other"))
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stdin = refused.stdin.take().context("no stdin")?;
    stdin.write_all(b"not a backup at all").await?;
    drop(stdin);
    let refused = refused.wait_with_output().await?;
    let err = String::from_utf8_lossy(&refused.stderr);
    ensure!(refused.status.code() == Some(2), "{err}");
    ensure!(
        err.contains("standard input is not a troupe sled backup") && !err.contains(".tmp"),
        "{err}"
    );
    Ok(())
}
