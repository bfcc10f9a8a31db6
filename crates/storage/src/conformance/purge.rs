//! The purge contract: everything of one actor goes (state, inbox, dead
//! letters, call records), nothing of any other actor, however alike their
//! names; and a purge is fenced like a write.

use bytes::Bytes;

use super::write_at;
use crate::{
    ActorWrite, CallRecord, DeadLetter, DeadLetterKey, Epoch, FencedActor, InboxEntry, InboxOp,
    PurgedActor, RecordedKey, StateStore, StoreError, StoredState,
};

/// Types and ids whose encodings prefix one another, so that a store that
/// removes by a bare prefix takes a neighbour with it.
const TY: &str = "purge";
const OTHER_TY: &str = "purgex";

/// Everything stored for one actor, as its reads return it.
#[derive(Debug, PartialEq)]
struct Snapshot {
    state: StoredState,
    inbox: Vec<InboxEntry>,
    dead: Vec<DeadLetter>,
    record_keys: Vec<RecordedKey>,
    records: Vec<Option<CallRecord>>,
}

fn dead(ty: &str, id: &str, seq: u64) -> DeadLetter {
    DeadLetter {
        key: DeadLetterKey {
            actor_type: ty.into(),
            actor_id: id.into(),
            seq,
        },
        data: Bytes::from(format!("{ty}/{id}/tell-{seq}")),
        error: "boom".into(),
        attempts: 2,
        failed_unix_ms: 500,
    }
}

fn record(ty: &str, id: &str, key: &str, at: u64) -> CallRecord {
    CallRecord {
        key: key.into(),
        recorded_unix_ms: at,
        data: Bytes::from(format!("{ty}/{id}/{key}")),
        new_key: false,
    }
}

/// What [`fill`] stores for one actor.
const FILLED: PurgedActor = PurgedActor {
    state_keys: 2,
    inbox_entries: 3,
    dead_letters: 2,
    call_records: 2,
};

/// Two state keys, three inbox entries (a fourth dead-lettered), a dead
/// letter for an entry never stored, and two call records, for each actor,
/// at `epoch`: two batches, as a batch never names one seq twice.
async fn fill(
    store: &dyn StateStore,
    actors: &[(&str, &str)],
    epoch: Option<Epoch>,
) -> Result<Vec<FencedActor>, StoreError> {
    let append = |ty: &str, id: &str, seq: u64| {
        InboxOp::Append(InboxEntry {
            seq,
            data: Bytes::from(format!("{ty}/{id}/tell-{seq}")),
        })
    };
    let stored = actors.iter().map(|(ty, id)| ActorWrite {
        inbox: (1..=4).map(|seq| append(ty, id, seq)).collect(),
        // The actors' records share their milliseconds, so a store that
        // indexes records by age keeps them in the same index entries.
        records: vec![record(ty, id, "c1", 1_000), record(ty, id, "c2", 2_000)],
        ..write_at(ty, id, epoch, &[("k1", Some("v1")), ("k2", Some("v2"))])
    });
    let mut refused = store.write_batch(&stored.collect::<Vec<_>>()).await?;
    let given_up = actors.iter().map(|(ty, id)| ActorWrite {
        inbox: vec![
            InboxOp::DeadLetter(dead(ty, id, 4)),
            InboxOp::DeadLetter(dead(ty, id, 9)),
        ],
        ..write_at(ty, id, epoch, &[])
    });
    refused.extend(store.write_batch(&given_up.collect::<Vec<_>>()).await?);
    Ok(refused)
}

/// Only the dead letters of one actor, as another actor's must not count.
async fn dead_of(
    store: &dyn StateStore,
    ty: &str,
    id: &str,
) -> Result<Vec<DeadLetter>, StoreError> {
    let all = store.list_dead_letters(Some(ty), None, usize::MAX).await?;
    Ok(all.into_iter().filter(|d| d.key.actor_id == id).collect())
}

async fn snapshot(store: &dyn StateStore, ty: &str, id: &str) -> Result<Snapshot, StoreError> {
    let mut record_keys = store.load_record_keys(ty, id, 0, usize::MAX).await?;
    record_keys.sort_by(|a, b| a.key.cmp(&b.key));
    let mut records = Vec::new();
    for key in ["c1", "c2"] {
        records.push(store.load_record(ty, id, key).await?);
    }
    Ok(Snapshot {
        state: store.load(ty, id).await?,
        inbox: store.load_inbox(ty, id).await?,
        dead: dead_of(store, ty, id).await?,
        record_keys,
        records,
    })
}

fn is_empty(s: &Snapshot) -> bool {
    s.state.is_empty()
        && s.inbox.is_empty()
        && s.dead.is_empty()
        && s.record_keys.is_empty()
        && s.records.iter().all(Option::is_none)
}

/// Actors of the purge checks' types with inbox entries.
async fn inbox_actors_of_ours(store: &dyn StateStore) -> Result<Vec<(String, String)>, StoreError> {
    let all = store.inbox_actors(None, usize::MAX).await?;
    Ok(all
        .into_iter()
        .filter(|(ty, _)| ty == TY || ty == OTHER_TY)
        .collect())
}

/// A purge removes all of one actor and says how much; its neighbours by
/// name keep everything; a second purge finds nothing. Unfenced, so every
/// store runs it (stores that keep no epochs too). Expects a store holding
/// no other call records: it checks what expiry finds after the purge.
pub async fn purge(store: &dyn StateStore) -> Result<(), StoreError> {
    fill(store, &[(TY, "a"), (TY, "ab"), (OTHER_TY, "a")], None).await?;
    let full = snapshot(store, TY, "a").await?;
    assert_eq!(full.state.len(), 2, "filled before the purge: {full:?}");
    assert_eq!(full.inbox.len(), 3, "filled before the purge: {full:?}");
    assert_eq!(full.dead.len(), 2, "filled before the purge: {full:?}");
    assert_eq!(
        full.record_keys.len(),
        2,
        "filled before the purge: {full:?}"
    );
    let ab = snapshot(store, TY, "ab").await?;
    let other = snapshot(store, OTHER_TY, "a").await?;

    let purged = store.purge_actor(TY, "a", None).await?;
    assert_eq!(purged, FILLED, "what the purge says it removed");

    let gone = snapshot(store, TY, "a").await?;
    assert!(is_empty(&gone), "left after the purge: {gone:?}");
    assert_eq!(store.list_actors(TY, None, usize::MAX).await?, vec!["ab"]);
    assert_eq!(
        inbox_actors_of_ours(store).await?,
        vec![
            (TY.to_string(), "ab".to_string()),
            (OTHER_TY.into(), "a".into())
        ]
    );
    assert_eq!(
        snapshot(store, TY, "ab").await?,
        ab,
        "a longer id untouched"
    );
    assert_eq!(
        snapshot(store, OTHER_TY, "a").await?,
        other,
        "the same id of another type untouched"
    );
    assert_eq!(
        store.list_actors(OTHER_TY, None, usize::MAX).await?,
        vec!["a"]
    );

    let again = store.purge_actor(TY, "a", None).await?;
    assert!(again.is_empty(), "a second purge found {again:?}");
    let never = store.purge_actor(TY, "never-stored", None).await?;
    assert_eq!(never, PurgedActor::default());

    // The actor can be written again, and its new record is not expired
    // with the purged one it shares a key with.
    let mut anew = write_at(TY, "a", None, &[("k1", Some("again"))]);
    anew.records = vec![record(TY, "a", "c1", 5_000)];
    store.write_batch(&[anew]).await?;
    assert_eq!(
        store.load(TY, "a").await?,
        vec![("k1".to_string(), Bytes::from("again"))]
    );
    // Only the neighbours' four records are old enough: a store that left
    // index entries of the purged records behind counts them, or takes
    // the new record with them.
    assert_eq!(store.expire_records(3_000, usize::MAX).await?, 4);
    assert_eq!(
        store.load_record(TY, "a", "c1").await?,
        Some(record(TY, "a", "c1", 5_000))
    );
    assert_eq!(store.expire_records(3_000, usize::MAX).await?, 0);
    Ok(())
}

/// A purge is fenced like a write: refused, removing nothing, under an
/// epoch older than the actor's; under a newer one it raises the actor's
/// epoch, which survives the purge, so the old owner's writes stay refused.
pub async fn purge_fencing(store: &dyn StateStore) -> Result<(), StoreError> {
    let ty = "purge-fenced";
    fill(store, &[(ty, "a")], Some(3)).await?;
    let purged = store.purge_actor(ty, "a", Some(5)).await?;
    assert_eq!(purged, FILLED);
    assert!(is_empty(&snapshot(store, ty, "a").await?));

    // The old owner's write lands late: refused, and nothing of it stored.
    let refused = fill(store, &[(ty, "a")], Some(4)).await?;
    assert_eq!(refused.len(), 2, "writes under 4 after a purge under 5");
    assert!(
        refused.iter().all(|f| f.actor_id == "a" && f.epoch == 4),
        "{refused:?}"
    );
    assert!(is_empty(&snapshot(store, ty, "a").await?));

    // The owner under 5 writes; a purge under 4 is refused and removes
    // nothing.
    let refused = fill(store, &[(ty, "a")], Some(5)).await?;
    assert!(refused.is_empty(), "the owner's own write: {refused:?}");
    let before = snapshot(store, ty, "a").await?;
    let stale = store.purge_actor(ty, "a", Some(4)).await;
    assert!(
        matches!(
            &stale,
            Err(StoreError::Fenced { actor_type, actor_id, epoch: 4 })
                if actor_type == ty && actor_id == "a"
        ),
        "a purge under an older epoch gave {stale:?}"
    );
    assert_eq!(snapshot(store, ty, "a").await?, before, "nothing removed");
    assert!(!is_empty(&before));

    // The owner's own epoch passes, and so does an unfenced purge.
    assert_eq!(store.purge_actor(ty, "a", Some(5)).await?, FILLED);
    fill(store, &[(ty, "a")], Some(5)).await?;
    assert_eq!(store.purge_actor(ty, "a", None).await?, FILLED);

    // A purge records the epoch of an actor that had none.
    let nothing = store.purge_actor(ty, "b", Some(2)).await?;
    assert!(nothing.is_empty());
    let refused = fill(store, &[(ty, "b")], Some(1)).await?;
    assert_eq!(refused.len(), 2, "writes under 1 after a purge under 2");
    assert!(is_empty(&snapshot(store, ty, "b").await?));
    // And raises a newer one: claims under the purge's predecessor fail.
    store.purge_actor(ty, "b", Some(7)).await?;
    assert!(matches!(
        store.claim(ty, "b", 6).await,
        Err(StoreError::Fenced { epoch: 6, .. })
    ));
    Ok(())
}
