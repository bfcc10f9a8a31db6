use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use troupe_storage::conformance::write;
use troupe_storage::{ReminderStore, StateStore, StoreError};

use super::{restore, BackupError, MAGIC};
use crate::db::tests::reminder;
use crate::{SledReminders, SledStore};

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

/// A store with two actors' state and two reminders, backed up to
/// `backup`.
async fn backed_up(dir: &Path, backup: &Path) -> Result<super::BackupSummary> {
    let store = SledStore::open(dir)?;
    let reminders = SledReminders::open(&store)?;
    store
        .write_batch(&[
            write("t", "a", &[("k", Some("1")), ("j", Some("2"))]),
            write("u", "b", &[("k", Some("3"))]),
        ])
        .await?;
    reminders
        .apply_reminders(&[reminder("r1"), reminder("r2")])
        .await?;
    let (store, to) = (store.clone(), backup.to_owned());
    Ok(tokio::task::spawn_blocking(move || store.backup_to(&to)).await??)
}

#[tokio::test]
async fn a_restored_backup_holds_the_state_and_the_reminders() -> Result {
    let root = tempfile::tempdir()?;
    let file = root.path().join("backup");
    let taken = backed_up(&root.path().join("data"), &file).await?;
    assert!(taken.entries >= 5, "{taken:?}");
    assert_eq!(taken.bytes, std::fs::metadata(&file)?.len());

    let restored_dir = root.path().join("restored");
    let restored = restore(&file, &restored_dir)?;
    assert_eq!(restored, taken);
    let store = SledStore::open(&restored_dir)?;
    let mut a = store.load("t", "a").await?;
    a.sort();
    assert_eq!(
        a,
        vec![
            ("j".into(), Bytes::from_static(b"2")),
            ("k".into(), Bytes::from_static(b"1"))
        ]
    );
    assert_eq!(
        store.load("u", "b").await?,
        vec![("k".into(), Bytes::from_static(b"3"))]
    );
    let reminders = SledReminders::open(&store)?;
    assert_eq!(reminders.count_reminders().await?, 2);
    assert!(reminders
        .get_reminder(reminder("r2").op.key())
        .await?
        .is_some());
    Ok(())
}

#[tokio::test]
async fn a_damaged_backup_is_refused_before_anything_is_written() -> Result {
    let root = tempfile::tempdir()?;
    let file = root.path().join("backup");
    backed_up(&root.path().join("data"), &file).await?;
    let whole = std::fs::read(&file)?;

    let mut flipped = whole.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x40;
    let mut version = whole.clone();
    version[MAGIC.len()] = 9;
    let cases: [(&str, Vec<u8>); 5] = [
        ("truncated", whole[..whole.len() - 1].to_vec()),
        ("cut in half", whole[..middle].to_vec()),
        ("a byte flipped", flipped),
        ("not a backup", b"hello".to_vec()),
        ("a newer format", version),
    ];
    for (case, bytes) in cases {
        let damaged = root.path().join(case);
        std::fs::write(&damaged, bytes)?;
        let into = root.path().join(format!("{case} restored"));
        match restore(&damaged, &into) {
            Err(BackupError::Corrupt { .. }) if case != "a newer format" => {}
            Err(BackupError::Version { found: 9, .. }) if case == "a newer format" => {}
            other => panic!("{case}: {other:?}"),
        }
        assert!(!into.exists(), "{case}: nothing written");
    }
    Ok(())
}

#[tokio::test]
async fn a_restore_refuses_a_directory_that_holds_anything() -> Result {
    let root = tempfile::tempdir()?;
    let file = root.path().join("backup");
    let data = root.path().join("data");
    backed_up(&data, &file).await?;
    let into = root.path().join("taken");
    std::fs::create_dir(&into)?;
    std::fs::write(into.join("notes"), b"mine")?;
    assert!(matches!(
        restore(&file, &into),
        Err(BackupError::NotEmpty { .. })
    ));
    // An empty one is fine.
    let empty = root.path().join("empty");
    std::fs::create_dir(&empty)?;
    restore(&file, &empty)?;
    Ok(())
}

#[tokio::test]
async fn writes_wait_for_a_backup_and_then_go_through() -> std::result::Result<(), StoreError> {
    let dir = tempfile::tempdir().map_err(|e| StoreError::Io(e.to_string()))?;
    let store = SledStore::open(dir.path())?;
    // Held on a thread of its own, as a backup holds it.
    let (paused_tx, paused) = tokio::sync::oneshot::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let holder = {
        let store = store.clone();
        std::thread::spawn(move || {
            let _paused = store.db().pause_writes();
            let _ = paused_tx.send(());
            let _ = released.recv();
        })
    };
    paused.await.map_err(|e| StoreError::Io(e.to_string()))?;
    let mut writer = {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .write_batch(&[write("t", "a", &[("k", Some("1"))])])
                .await
        })
    };
    // Nothing signals a write that waits; one that did not wait ends in a
    // few milliseconds.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut writer)
            .await
            .is_err(),
        "a write went through while writes were paused"
    );
    assert!(store.load("t", "a").await?.is_empty(), "reads go on");
    drop(release);
    holder
        .join()
        .map_err(|_| StoreError::Io("the holder panicked".into()))?;
    writer.await.map_err(|e| StoreError::Io(e.to_string()))??;
    assert_eq!(
        store.load("t", "a").await?,
        vec![("k".into(), Bytes::from_static(b"1"))]
    );
    Ok(())
}
