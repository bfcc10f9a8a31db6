//! A snapshot store reads the database as of its making, from every
//! connection of its pool, and writes nothing.

use troupe_storage::conformance::{put, rec};
use troupe_storage::ReminderStore;

use super::*;

fn value_of(state: &troupe_storage::StoredState, key: &str) -> Option<Bytes> {
    state.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
}

#[tokio::test]
async fn a_snapshot_reads_the_database_as_it_was_and_writes_nothing() -> TestResult {
    let Some(base) = postgres_url("PostgresStore snapshot")? else {
        return Ok(());
    };
    let db = TempDb::create(&base).await?;
    let store = PostgresStore::connect(&db.url).await?;
    store
        .write_batch(&[write("counter", "a", &[("n", Some("1"))])])
        .await?;
    store.apply_reminders(&[put(rec("a", "r1", 10))]).await?;
    let snapshot = store.snapshot().await?;
    assert!(snapshot.is_snapshot() && !store.is_snapshot());

    store
        .write_batch(&[
            write("counter", "a", &[("n", Some("2"))]),
            write("counter", "b", &[("n", Some("3"))]),
        ])
        .await?;
    store.apply_reminders(&[put(rec("b", "r1", 20))]).await?;
    assert_eq!(
        value_of(&store.load("counter", "a").await?, "n"),
        Some(Bytes::from("2"))
    );

    // Loads at once make the pool open several connections, each of which
    // must import the snapshot.
    let mut loads = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let snapshot = snapshot.clone();
        loads.spawn(async move { snapshot.load("counter", "a").await });
    }
    while let Some(loaded) = loads.join_next().await {
        assert_eq!(value_of(&loaded??, "n"), Some(Bytes::from("1")));
    }
    let actors = snapshot.stored_actors(None, 10).await?;
    assert_eq!(actors, vec![("counter".to_owned(), "a".to_owned())]);
    let exported = snapshot
        .export_actors(&[
            ("counter".to_owned(), "a".to_owned()),
            ("counter".to_owned(), "b".to_owned()),
        ])
        .await?;
    let values: Vec<Vec<(String, Option<Bytes>)>> =
        exported.into_iter().map(|w| w.changes).collect();
    assert_eq!(
        values,
        vec![vec![("n".to_owned(), Some(Bytes::from("1")))], vec![]]
    );
    assert_eq!(snapshot.count_reminders().await?, 1);
    assert_eq!(store.count_reminders().await?, 2);

    // A copy's source must not change under it, not even by mistake.
    let refused = snapshot
        .write_batch(&[write("counter", "c", &[("n", Some("4"))])])
        .await;
    assert!(
        matches!(refused, Err(troupe_storage::StoreError::Io(_))),
        "{refused:?}"
    );
    assert!(store.load("counter", "c").await?.is_empty());

    drop(snapshot);
    drop(store);
    db.drop_db().await;
    Ok(())
}
