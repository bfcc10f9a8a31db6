use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use troupe_storage::conformance::write;
use troupe_storage::{ReminderStore, StateStore, StoreError};

use super::{
    restore, write_bytes, BackupError, Checked, END, ENTRY, MAGIC, TREE, VERSION_WITHOUT_LOG,
};
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
    Ok(tokio::task::spawn_blocking(move || store.backup_to(&to))
        .await??
        .summary)
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

/// Writes go through while a backup reads the trees, and what it restores
/// is the store as of one instant: every write before it, none after, each
/// whole, keys removed meanwhile removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_go_on_while_a_backup_reads_and_it_holds_one_instant() -> Result {
    let root = tempfile::tempdir()?;
    let store = SledStore::open(&root.path().join("data"))?;
    let filler: Vec<_> = (0..200)
        .map(|i| write("filler", &i.to_string(), &[("k", Some("v"))]))
        .collect();
    store.write_batch(&filler).await?;

    // Write n sets slot n % 7 and `last` to n, and moves key `at-{n-1}`
    // on to `at-{n}`, all in one actor's write; and sets `same` as it was,
    // a write sled skips (a subscription sees it as a reservation dropped).
    let (progress_tx, mut progress) = tokio::sync::watch::channel(0u64);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (store, stop) = (store.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let (slot, value) = (format!("slot-{}", n % 7), n.to_string());
                let (at, before) = (format!("at-{n}"), format!("at-{}", n - 1));
                let changes = [
                    (slot.as_str(), Some(value.as_str())),
                    (at.as_str(), Some(value.as_str())),
                    (before.as_str(), None),
                    ("last", Some(value.as_str())),
                    ("same", Some("1")),
                ];
                store.write_batch(&[write("w", "one", &changes)]).await?;
                progress_tx.send_replace(n);
            }
            Ok::<u64, StoreError>(n)
        })
    };
    progress.wait_for(|n| *n >= 10).await?;

    let (reading_tx, reading) = tokio::sync::oneshot::channel();
    let (go_on, wait) = std::sync::mpsc::channel::<()>();
    let file = root.path().join("backup");
    let backup = {
        let (store, file) = (store.clone(), file.clone());
        tokio::task::spawn_blocking(move || {
            let out = std::fs::File::create(&file)?;
            let room = file.parent().unwrap_or(Path::new("."));
            let taken = store.backup_with(out, room, move || {
                let _ = reading_tx.send(());
                let _ = wait.recv();
            })?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(taken)
        })
    };
    reading.await?;
    let during = *progress.borrow();
    // The guard `wait_for` hands back would hold the writer up: dropped at once.
    let went_on = tokio::time::timeout(
        Duration::from_secs(10),
        progress.wait_for(|n| *n >= during + 20),
    )
    .await
    .is_ok_and(|waited| waited.is_ok());
    drop(go_on);
    assert!(went_on, "writes waited while the backup read");
    let taken = backup.await?.map_err(|e| e.to_string())?;
    stop.store(true, Ordering::Relaxed);
    let written = writer.await??;
    assert!(taken.summary.logged >= 20, "{:?}", taken.summary);

    let restored = root.path().join("restored");
    assert_eq!(restore(&file, &restored)?, taken.summary);
    let store = SledStore::open(&restored)?;
    let state: HashMap<String, Bytes> = store.load("w", "one").await?.into_iter().collect();
    let number =
        |key: &str| -> Option<u64> { std::str::from_utf8(state.get(key)?).ok()?.parse().ok() };
    let last = number("last").ok_or("no last write restored")?;
    assert!(last >= during + 20 && last <= written, "{last}");
    for slot in 0..7 {
        let expected = (1..=last).rev().find(|n| n % 7 == slot);
        assert_eq!(number(&format!("slot-{slot}")), expected, "slot {slot}");
    }
    let mut at: Vec<&String> = state.keys().filter(|k| k.starts_with("at-")).collect();
    at.sort();
    assert_eq!(
        at,
        [&format!("at-{last}")],
        "keys removed during the read stay removed"
    );
    assert_eq!(store.load("filler", "199").await?.len(), 1);
    Ok(())
}

/// A backup in the first format, which had no log, still restores.
#[test]
fn a_backup_of_the_first_format_restores() -> Result {
    let root = tempfile::tempdir()?;
    let file = root.path().join("v1");
    let mut out = Checked::new(Vec::new());
    out.write_all(MAGIC)?;
    out.write_all(&VERSION_WITHOUT_LOG.to_le_bytes())?;
    out.write_all(&[TREE])?;
    write_bytes(&mut out, b"things")?;
    out.write_all(&[ENTRY])?;
    write_bytes(&mut out, b"k")?;
    write_bytes(&mut out, b"v")?;
    out.write_all(&[END])?;
    out.write_all(&1u64.to_le_bytes())?;
    let crc = out.crc.clone().finalize();
    let mut bytes = out.inner;
    bytes.extend_from_slice(&crc.to_le_bytes());
    std::fs::write(&file, bytes)?;

    let restored = root.path().join("restored");
    let summary = restore(&file, &restored)?;
    assert_eq!((summary.trees, summary.entries, summary.logged), (1, 1, 0));
    // Through the store's own open, which waits while the restore's
    // dropped database still holds the directory's lock.
    let db = crate::db::open_when_unlocked(&restored, crate::DEFAULT_CACHE_BYTES)?.db;
    assert_eq!(
        db.open_tree("things")?.get("k")?.as_deref(),
        Some(&b"v"[..])
    );
    Ok(())
}
