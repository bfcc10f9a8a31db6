//! Reopening a broken database: writes of state and reminders alike bring
//! it back, and a reopen that fails says what to do.

use bytes::Bytes;
use troupe_storage::conformance::write;
use troupe_storage::{
    ReminderKey, ReminderOp, ReminderRecord, ReminderStore, ReminderWrite, StateStore, StoreError,
};

use super::REOPEN_EVERY;
use crate::{ReopenError, SledReminders, SledStore};

fn io(e: std::io::Error) -> StoreError {
    StoreError::Io(e.to_string())
}

/// A reminder `name` of actor t/a, due at 1 s.
pub(crate) fn reminder(name: &str) -> ReminderWrite {
    ReminderWrite {
        op: ReminderOp::Put(ReminderRecord {
            key: ReminderKey {
                actor_type: "t".into(),
                actor_id: "a".into(),
                name: name.into(),
            },
            due_unix_ms: 1_000,
            data: Bytes::from_static(b"r"),
        }),
        epoch: None,
    }
}

fn value(v: &str) -> Bytes {
    Bytes::copy_from_slice(v.as_bytes())
}

#[tokio::test]
async fn a_write_reopens_a_broken_database_for_state_and_reminders_alike() -> Result<(), StoreError>
{
    let dir = tempfile::tempdir().map_err(io)?;
    let store = SledStore::open(dir.path())?;
    let reminders = SledReminders::open(&store)?;
    store
        .write_batch(&[write("t", "a", &[("k", Some("1"))])])
        .await?;
    reminders.apply_reminders(&[reminder("r1")]).await?;
    assert_eq!(store.db().generation(), Some(1));

    store.db().break_for_test();
    // Reads go on with the broken database: nothing re-opens it.
    assert_eq!(store.load("t", "a").await?, vec![("k".into(), value("1"))]);
    assert_eq!(store.db().generation(), Some(1));
    // A write re-opens it, which needs every old handle gone (sled
    // locks the directory), the reminders' included.
    store
        .write_batch(&[write("t", "a", &[("k", Some("2"))])])
        .await?;
    assert_eq!(store.db().generation(), Some(2));
    assert_eq!(store.load("t", "a").await?, vec![("k".into(), value("2"))]);
    assert!(reminders
        .get_reminder(reminder("r1").op.key())
        .await?
        .is_some());

    // The reminders' writes re-open it as well, for both.
    store.db().break_for_test();
    reminders.apply_reminders(&[reminder("r2")]).await?;
    assert_eq!(store.db().generation(), Some(3));
    assert_eq!(reminders.count_reminders().await?, 2);
    assert_eq!(store.list_actors("t", None, 10).await?, vec!["a"]);
    Ok(())
}

#[tokio::test]
async fn a_failed_reopen_says_what_to_do_and_the_next_attempt_recovers() -> Result<(), StoreError> {
    let parent = tempfile::tempdir().map_err(io)?;
    let dir = parent.path().join("data");
    let aside = parent.path().join("aside");
    let store = SledStore::open(&dir)?;
    store
        .write_batch(&[write("t", "a", &[("k", Some("1"))])])
        .await?;
    store.db().break_for_test();
    // The directory is gone and a file stands in its place: sled
    // cannot open it there.
    std::fs::rename(&dir, &aside).map_err(io)?;
    std::fs::write(&dir, b"not a directory").map_err(io)?;
    let failed = store
        .write_batch(&[write("t", "a", &[("k", Some("2"))])])
        .await;
    let Err(StoreError::Open { path, source }) = failed else {
        panic!("a re-open that cannot open gave {failed:?}");
    };
    assert_eq!(path, dir.display().to_string());
    assert!(source.downcast_ref::<ReopenError>().is_some(), "{source:?}");
    let message = StoreError::Open { path, source }.to_string();
    assert!(
        message.contains("recovers by itself once the file system"),
        "{message}"
    );
    // Closed now: reads get the same error instead of a database.
    assert!(matches!(
        store.load("t", "a").await,
        Err(StoreError::Open { .. })
    ));

    std::fs::remove_file(&dir).map_err(io)?;
    std::fs::rename(&aside, &dir).map_err(io)?;
    // Attempts after a failure wait out REOPEN_EVERY; a few are enough.
    let mut tries = 0;
    loop {
        tries += 1;
        match store
            .write_batch(&[write("t", "a", &[("k", Some("2"))])])
            .await
        {
            Ok(_) => break,
            Err(StoreError::Open { .. }) if tries < 20 => {
                tokio::time::sleep(REOPEN_EVERY).await;
            }
            Err(e) => return Err(e),
        }
    }
    assert_eq!(store.load("t", "a").await?, vec![("k".into(), value("2"))]);
    Ok(())
}
