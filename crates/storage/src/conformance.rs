//! The contract every store keeps, as checks each backend's tests run
//! against its own implementation (feature `conformance`), plus the helpers
//! those tests share.

mod copy;
mod hooked;
mod inbox;
mod purge;
mod records;

pub use copy::copy;
pub use hooked::{HookedReminders, ReminderHooks};
pub use inbox::{inbox, inbox_fencing};
pub use purge::{purge, purge_fencing};
pub use records::{records, records_fencing};

use bytes::Bytes;

use crate::{
    ActorWrite, Epoch, FencedActor, ReminderApplied, ReminderKey, ReminderOp, ReminderRecord,
    ReminderStore, ReminderWrite, StateStore, StoreError,
};

/// One actor's changes; `None` deletes the key. Not fenced.
pub fn write(ty: &str, id: &str, changes: &[(&str, Option<&str>)]) -> ActorWrite {
    write_at(ty, id, None, changes)
}

/// One actor's changes, written with `epoch`.
pub fn write_at(
    ty: &str,
    id: &str,
    epoch: Option<Epoch>,
    changes: &[(&str, Option<&str>)],
) -> ActorWrite {
    ActorWrite {
        actor_type: ty.into(),
        actor_id: id.into(),
        epoch,
        changes: changes
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    v.map(|v| Bytes::copy_from_slice(v.as_bytes())),
                )
            })
            .collect(),
        inbox: Vec::new(),
        records: Vec::new(),
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

/// A reminder of actor `t/{id}` named `name`, due at `due`.
pub fn rec(id: &str, name: &str, due: u64) -> ReminderRecord {
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

/// An unfenced put of `record`.
pub fn put(record: ReminderRecord) -> ReminderWrite {
    ReminderWrite {
        op: ReminderOp::Put(record),
        epoch: None,
    }
}

fn delete(key: ReminderKey) -> ReminderWrite {
    ReminderWrite {
        op: ReminderOp::Delete(key),
        epoch: None,
    }
}

/// The contract every reminder store keeps: an index by due time that
/// follows moves and deletes, cursors, counts and listings.
pub async fn reminders(store: &dyn ReminderStore) -> Result<(), StoreError> {
    store
        .apply_reminders(&[
            put(rec("a", "r1", 30)),
            put(rec("b", "r1", 10)),
            put(rec("a", "r2", 20)),
        ])
        .await?;
    // Moving a reminder moves its index entry, also twice in one batch.
    store
        .apply_reminders(&[put(rec("b", "r1", 50)), put(rec("b", "r1", 40))])
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
        .apply_reminders(&[delete(rec("a", "r2", 0).key), delete(rec("z", "x", 0).key)])
        .await?;
    assert_eq!(
        existed,
        vec![
            ReminderApplied::Deleted { existed: true },
            ReminderApplied::Deleted { existed: false }
        ]
    );
    // A put and a delete of one reminder in one batch: the delete wins, and
    // it saw the reminder the put made.
    let answers = store
        .apply_reminders(&[delete(rec("c", "r", 0).key), put(rec("c", "r", 5))])
        .await?;
    assert_eq!(
        answers,
        vec![
            ReminderApplied::Deleted { existed: true },
            ReminderApplied::Put
        ]
    );
    assert!(store.get_reminder(&rec("c", "r", 0).key).await?.is_none());
    assert_eq!(store.count_reminders().await?, 2);
    let listed = store.list_reminders(Some("t"), Some("a"), None, 10).await?;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].data, Bytes::from("a/r1"));
    assert!(store.get_reminder(&rec("b", "r1", 0).key).await?.is_some());
    moves_leave_no_index_behind(store).await
}

/// A put that moves a reminder, and a delete, leave nothing at the old due
/// time, in the same batch as the first put or in later ones.
async fn moves_leave_no_index_behind(store: &dyn ReminderStore) -> Result<(), StoreError> {
    store
        .apply_reminders(&[put(rec("h", "moved", 1_000)), put(rec("h", "twice", 1_000))])
        .await?;
    store
        .apply_reminders(&[
            put(rec("h", "moved", 1_500)),
            put(rec("h", "twice", 1_200)),
            put(rec("h", "twice", 1_600)),
        ])
        .await?;
    let due = |from: u64| async move {
        let records = store
            .due_reminders(Some((from, &ReminderKey::default())), 2_000, 10)
            .await?;
        Ok::<_, StoreError>(
            records
                .into_iter()
                .map(|r| (r.key.name, r.due_unix_ms))
                .collect::<Vec<_>>(),
        )
    };
    // Twice, as a store may clean up at its next write what a load skipped.
    for _ in 0..2 {
        assert_eq!(
            due(999).await?,
            vec![("moved".into(), 1_500), ("twice".into(), 1_600)]
        );
        store.apply_reminders(&[]).await?;
    }
    let deleted = store
        .apply_reminders(&[
            delete(rec("h", "moved", 0).key),
            delete(rec("h", "twice", 0).key),
            delete(rec("h", "twice", 0).key),
        ])
        .await?;
    assert_eq!(
        deleted,
        vec![
            ReminderApplied::Deleted { existed: true },
            ReminderApplied::Deleted { existed: true },
            ReminderApplied::Deleted { existed: false },
        ]
    );
    for _ in 0..2 {
        assert!(due(999).await?.is_empty());
        store.apply_reminders(&[]).await?;
    }
    for name in ["moved", "twice"] {
        assert!(store.get_reminder(&rec("h", name, 0).key).await?.is_none());
    }
    Ok(())
}

/// The fencing contract, for a state store and the reminder store that
/// shares its epochs: a claim or a write with an epoch refuses every later
/// write with an older one, state and reminders alike; unfenced writes pass.
pub async fn fencing(
    state: &dyn StateStore,
    reminders: &dyn ReminderStore,
) -> Result<(), StoreError> {
    let fenced = |id: &str, epoch: Epoch| FencedActor {
        actor_type: "f".into(),
        actor_id: id.into(),
        epoch,
    };
    // The old owner writes under epoch 3.
    let refused = state
        .write_batch(&[write_at("f", "a", Some(3), &[("k", Some("old"))])])
        .await?;
    assert!(refused.is_empty());
    // A new owner claims it under 5 and sees the old owner's write.
    let loaded = state.claim("f", "a", 5).await?;
    assert_eq!(loaded, vec![("k".to_string(), Bytes::from("old"))]);
    // The old owner's held write lands late: refused, and only it: another
    // actor in the same batch is written.
    let refused = state
        .write_batch(&[
            write_at("f", "a", Some(3), &[("k", Some("stale"))]),
            write_at("f", "b", Some(3), &[("k", Some("b"))]),
        ])
        .await?;
    assert_eq!(refused, vec![fenced("a", 3)]);
    assert_eq!(
        state.load("f", "a").await?,
        vec![("k".to_string(), Bytes::from("old"))]
    );
    assert_eq!(
        state.load("f", "b").await?,
        vec![("k".to_string(), Bytes::from("b"))]
    );
    // An older claim is refused; the owner's own writes pass.
    match state.claim("f", "a", 4).await {
        Err(StoreError::Fenced { epoch: 4, .. }) => {}
        other => panic!("a claim under an older epoch was not fenced: {other:?}"),
    }
    let refused = state
        .write_batch(&[write_at("f", "a", Some(5), &[("k", Some("new"))])])
        .await?;
    assert!(refused.is_empty());
    // Unfenced writes are not checked.
    let refused = state
        .write_batch(&[write_at("f", "a", None, &[("k", Some("single"))])])
        .await?;
    assert!(refused.is_empty());

    // Reminder writes share the actor's epoch: the old owner's are refused
    // (and nothing of them lands), the new owner's pass.
    let at = |epoch: Option<Epoch>, op: ReminderOp| ReminderWrite { op, epoch };
    let key = |id: &str| ReminderKey {
        actor_type: "f".into(),
        actor_id: id.into(),
        name: "r".into(),
    };
    let record = |id: &str| ReminderRecord {
        key: key(id),
        due_unix_ms: 10,
        data: Bytes::from("x"),
    };
    let answers = reminders
        .apply_reminders(&[
            at(Some(5), ReminderOp::Put(record("a"))),
            at(Some(3), ReminderOp::Delete(key("a"))),
            at(Some(3), ReminderOp::Put(record("c"))),
        ])
        .await?;
    assert_eq!(
        answers,
        vec![
            ReminderApplied::Put,
            ReminderApplied::Fenced,
            ReminderApplied::Put
        ]
    );
    assert!(reminders.get_reminder(&key("a")).await?.is_some());
    // A reminder write raises the epoch too: state writes under the old
    // one are refused from then on.
    reminders
        .apply_reminders(&[at(Some(7), ReminderOp::Delete(key("c")))])
        .await?;
    let refused = state
        .write_batch(&[write_at("f", "c", Some(6), &[("k", Some("late"))])])
        .await?;
    assert_eq!(refused, vec![fenced("c", 6)]);
    Ok(())
}
