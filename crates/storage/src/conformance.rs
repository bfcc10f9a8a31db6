//! The contract every store keeps, as checks each backend's tests run
//! against its own implementation (feature `conformance`), plus the helpers
//! those tests share.

use bytes::Bytes;

use crate::{ActorWrite, ReminderKey, ReminderRecord, ReminderStore, StoreError};
/// One actor's changes; `None` deletes the key.
pub fn write(ty: &str, id: &str, changes: &[(&str, Option<&str>)]) -> ActorWrite {
    ActorWrite {
        actor_type: ty.into(),
        actor_id: id.into(),
        changes: changes
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    v.map(|v| Bytes::copy_from_slice(v.as_bytes())),
                )
            })
            .collect(),
    }
}

/// `TROUPE_TEST_POSTGRES`, a connection URL for tests that need a real
/// server. Unset: prints why `test` is skipped and returns `None`, unless
/// `TROUPE_REQUIRE_POSTGRES=1`, which makes that an error.
pub fn postgres_url(test: &str) -> Result<Option<String>, String> {
    match std::env::var("TROUPE_TEST_POSTGRES") {
        Ok(url) if !url.is_empty() => Ok(Some(url)),
        _ if std::env::var("TROUPE_REQUIRE_POSTGRES").is_ok_and(|v| v == "1") => Err(format!(
            "{test}: TROUPE_REQUIRE_POSTGRES=1 but TROUPE_TEST_POSTGRES is not set \
                 (scripts/postgres.sh start prints a URL)"
        )),
        _ => {
            eprintln!(
                "skipped {test}: set TROUPE_TEST_POSTGRES to a PostgreSQL URL \
                     (scripts/postgres.sh start) to run it"
            );
            Ok(None)
        }
    }
}

fn rec(id: &str, name: &str, due: u64) -> ReminderRecord {
    ReminderRecord {
        key: ReminderKey {
            actor_type: "t".into(),
            actor_id: id.into(),
            name: name.into(),
        },
        due_unix_ms: due,
        data: Bytes::from(format!("{id}/{name}")),
    }
}

/// The contract every reminder store keeps: an index by due time that
/// follows moves and deletes, cursors, counts and listings.
pub async fn reminders(store: &dyn ReminderStore) -> Result<(), StoreError> {
    store
        .apply_reminders(
            &[rec("a", "r1", 30), rec("b", "r1", 10), rec("a", "r2", 20)],
            &[],
        )
        .await?;
    // Moving a reminder moves its index entry, also twice in one batch.
    store
        .apply_reminders(&[rec("b", "r1", 50), rec("b", "r1", 40)], &[])
        .await?;
    let due: Vec<_> = store
        .due_reminders(None, 35, 10)
        .await?
        .into_iter()
        .map(|r| r.due_unix_ms)
        .collect();
    assert_eq!(due, vec![20, 30]);
    let first = store.due_reminders(None, 100, 1).await?;
    let rest = store
        .due_reminders(Some((first[0].due_unix_ms, &first[0].key)), 100, 10)
        .await?;
    assert_eq!(rest.len(), 2);
    let existed = store
        .apply_reminders(&[], &[rec("a", "r2", 0).key, rec("z", "x", 0).key])
        .await?;
    assert_eq!(existed, vec![true, false]);
    assert_eq!(store.count_reminders().await?, 2);
    let listed = store.list_reminders(Some("t"), Some("a"), None, 10).await?;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].data, Bytes::from("a/r1"));
    assert!(store.get_reminder(&rec("b", "r1", 0).key).await?.is_some());
    Ok(())
}
