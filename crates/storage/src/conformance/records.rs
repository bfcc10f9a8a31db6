//! The call-record contract: stored with the state changes of their batch
//! (and refused with them when fenced), first record of a key kept, loaded
//! by age, expired by age across actors.

use bytes::Bytes;

use super::write_at;
use crate::{ActorWrite, CallRecord, Epoch, RecordedKey, StateStore, StoreError};

fn record(key: &str, at: u64) -> CallRecord {
    CallRecord {
        key: key.into(),
        recorded_unix_ms: at,
        data: Bytes::from(format!("answer-{key}")),
        new_key: false,
    }
}

fn with_records(
    ty: &str,
    id: &str,
    epoch: Option<Epoch>,
    changes: &[(&str, Option<&str>)],
    records: Vec<CallRecord>,
) -> ActorWrite {
    ActorWrite {
        records,
        ..write_at(ty, id, epoch, changes)
    }
}

fn keys(records: &[RecordedKey]) -> Vec<&str> {
    let mut keys: Vec<&str> = records.iter().map(|r| r.key.as_str()).collect();
    keys.sort_unstable();
    keys
}

pub async fn records(store: &dyn StateStore) -> Result<(), StoreError> {
    let (ty, other) = ("rec-t", "rec-other");
    store
        .write_batch(&[
            with_records(
                ty,
                "a",
                None,
                &[("count", Some("1"))],
                vec![record("k1", 1_000), record("k2", 2_000)],
            ),
            with_records(ty, "b", None, &[], vec![record("k1", 1_500)]),
        ])
        .await?;
    let a = store.load_record_keys(ty, "a", 0, usize::MAX).await?;
    assert_eq!(keys(&a), ["k1", "k2"], "records of a stored");
    let k1 = RecordedKey {
        key: "k1".into(),
        recorded_unix_ms: 1_000,
    };
    assert!(a.contains(&k1), "record's time read back: {a:?}");
    assert_eq!(store.load(ty, "a").await?.len(), 1, "state beside them");
    assert_eq!(
        keys(&store.load_record_keys(ty, "a", 1_500, usize::MAX).await?),
        ["k2"]
    );
    assert_eq!(
        keys(&store.load_record_keys(ty, "b", 0, usize::MAX).await?),
        ["k1"]
    );
    assert!(store
        .load_record_keys(other, "a", 0, usize::MAX)
        .await?
        .is_empty());

    // The most recent ones when limited; one by key.
    let newest = store.load_record_keys(ty, "a", 0, 1).await?;
    assert_eq!(keys(&newest), ["k2"], "the newest of a's");
    let one = store.load_record(ty, "a", "k1").await?;
    assert_eq!(one, Some(record("k1", 1_000)));
    assert_eq!(store.load_record(ty, "a", "nope").await?, None);
    assert_eq!(store.load_record(ty, "b", "k2").await?, None, "per actor");

    // A key recorded again keeps its first answer.
    let mut again = record("k1", 3_000);
    again.data = Bytes::from_static(b"second");
    store
        .write_batch(&[with_records(ty, "a", None, &[], vec![again])])
        .await?;
    let a = store.load_record(ty, "a", "k1").await?;
    assert_eq!(a, Some(record("k1", 1_000)), "first answer kept");

    // A key its caller said was new is stored as any other (a store may
    // skip looking for an earlier record); read back, it is a record.
    let fresh = CallRecord {
        new_key: true,
        ..record("k3", 2_500)
    };
    store
        .write_batch(&[with_records(ty, "c", None, &[], vec![fresh])])
        .await?;
    let c = store.load_record(ty, "c", "k3").await?;
    assert_eq!(
        c,
        Some(record("k3", 2_500)),
        "stored, and read back unmarked"
    );

    // Expiry by age, across actors, bounded by `limit`.
    let gone = store.expire_records(1_600, 1).await?;
    assert_eq!(gone, 1, "one of the two older records, as limited");
    let gone = store.expire_records(1_600, 100).await?;
    assert_eq!(gone, 1, "the other older one");
    assert_eq!(
        keys(&store.load_record_keys(ty, "a", 0, usize::MAX).await?),
        ["k2"]
    );
    assert!(store
        .load_record_keys(ty, "b", 0, usize::MAX)
        .await?
        .is_empty());
    assert_eq!(store.expire_records(1_600, 100).await?, 0);
    assert_eq!(
        keys(&store.load_record_keys(ty, "c", 0, usize::MAX).await?),
        ["k3"],
        "the new key's record is younger"
    );
    assert_eq!(
        store.expire_records(3_000, 100).await?,
        2,
        "then it expires too"
    );
    Ok(())
}

/// A stale owner's records are refused with its state.
pub async fn records_fencing(store: &dyn StateStore) -> Result<(), StoreError> {
    let ty = "rec-fenced";
    store.claim(ty, "f", 7).await?;
    let refused = store
        .write_batch(&[with_records(
            ty,
            "f",
            Some(6),
            &[("count", Some("9"))],
            vec![record("stale", 1_000)],
        )])
        .await?;
    assert_eq!(refused.len(), 1, "the stale write is refused");
    assert!(store
        .load_record_keys(ty, "f", 0, usize::MAX)
        .await?
        .is_empty());
    store
        .write_batch(&[with_records(
            ty,
            "f",
            Some(7),
            &[],
            vec![record("ok", 1_000)],
        )])
        .await?;
    assert_eq!(
        keys(&store.load_record_keys(ty, "f", 0, usize::MAX).await?),
        ["ok"]
    );
    Ok(())
}
