//! The inbox contract: order, atomic removal with state, dead letters, and
//! fencing of an old owner's inbox writes.

use bytes::Bytes;

use super::write_at;
use crate::{
    ActorWrite, DeadLetter, DeadLetterKey, Epoch, FencedActor, InboxEntry, InboxOp, StateStore,
    StoreError,
};

fn entry(seq: u64) -> InboxEntry {
    InboxEntry {
        seq,
        data: Bytes::from(format!("tell-{seq}")),
    }
}

/// One actor's inbox ops (and state changes), written with `epoch`.
pub fn inbox_write(
    ty: &str,
    id: &str,
    epoch: Option<Epoch>,
    changes: &[(&str, Option<&str>)],
    inbox: Vec<InboxOp>,
) -> ActorWrite {
    ActorWrite {
        inbox,
        ..write_at(ty, id, epoch, changes)
    }
}

fn dead(ty: &str, id: &str, seq: u64) -> DeadLetter {
    DeadLetter {
        key: DeadLetterKey {
            actor_type: ty.into(),
            actor_id: id.into(),
            seq,
        },
        data: Bytes::from(format!("tell-{seq}")),
        error: "boom".into(),
        attempts: 3,
        failed_unix_ms: 1_000,
    }
}

fn seqs(entries: &[InboxEntry]) -> Vec<u64> {
    entries.iter().map(|e| e.seq).collect()
}

/// Appends are read back in `seq` order whatever order they were written
/// in; a removal lands with the state changes of its batch; a dead letter
/// leaves the inbox and is listed, read and dropped; `inbox_actors` lists
/// exactly the actors with pending entries.
pub async fn inbox(store: &dyn StateStore) -> Result<(), StoreError> {
    let append = |seq| InboxOp::Append(entry(seq));
    store
        .write_batch(&[
            inbox_write("i", "a", None, &[], vec![append(20), append(10)]),
            inbox_write("i", "b", None, &[], vec![append(5)]),
        ])
        .await?;
    store
        .write_batch(&[inbox_write("i", "a", None, &[], vec![append(30)])])
        .await?;
    let a = store.load_inbox("i", "a").await?;
    assert_eq!(seqs(&a), vec![10, 20, 30]);
    assert_eq!(a[0], entry(10));
    // Inbox entries are not state: the actor lists no state keys.
    assert!(store.load("i", "a").await?.is_empty());
    assert_eq!(
        store.inbox_actors(None, 10).await?,
        vec![("i".to_string(), "a".to_string()), ("i".into(), "b".into())]
    );
    assert_eq!(
        store.inbox_actors(Some(("i", "a")), 10).await?,
        vec![("i".to_string(), "b".to_string())]
    );
    // The turn that handled 10 removes it with its state change, together.
    store
        .write_batch(&[inbox_write(
            "i",
            "a",
            None,
            &[("n", Some("1"))],
            vec![InboxOp::Remove { seq: 10 }, InboxOp::Remove { seq: 99 }],
        )])
        .await?;
    assert_eq!(seqs(&store.load_inbox("i", "a").await?), vec![20, 30]);
    assert_eq!(
        store.load("i", "a").await?,
        vec![("n".to_string(), Bytes::from("1"))]
    );
    // 20 failed for good: it leaves the inbox for the dead letters.
    store
        .write_batch(&[inbox_write(
            "i",
            "a",
            None,
            &[],
            vec![InboxOp::DeadLetter(dead("i", "a", 20))],
        )])
        .await?;
    // A dead letter for an entry never stored (appended and given up in
    // one flush window) is kept as well.
    store
        .write_batch(&[inbox_write(
            "j",
            "z",
            None,
            &[],
            vec![InboxOp::DeadLetter(dead("j", "z", 7))],
        )])
        .await?;
    assert_eq!(seqs(&store.load_inbox("i", "a").await?), vec![30]);
    let all = store.list_dead_letters(None, None, 10).await?;
    assert_eq!(all, vec![dead("i", "a", 20), dead("j", "z", 7)]);
    let of_j = store.list_dead_letters(Some("j"), None, 10).await?;
    assert_eq!(of_j, vec![dead("j", "z", 7)]);
    let after = store.list_dead_letters(None, Some(&all[0].key), 10).await?;
    assert_eq!(after, vec![dead("j", "z", 7)]);
    assert_eq!(
        store.get_dead_letter(&dead("i", "a", 20).key).await?,
        Some(dead("i", "a", 20))
    );
    assert!(store.remove_dead_letter(&dead("i", "a", 20).key).await?);
    assert!(!store.remove_dead_letter(&dead("i", "a", 20).key).await?);
    assert_eq!(store.get_dead_letter(&dead("i", "a", 20).key).await?, None);
    // Emptied inboxes are no longer listed.
    store
        .write_batch(&[
            inbox_write("i", "a", None, &[], vec![InboxOp::Remove { seq: 30 }]),
            inbox_write("i", "b", None, &[], vec![InboxOp::Remove { seq: 5 }]),
        ])
        .await?;
    assert!(store.inbox_actors(None, 10).await?.is_empty());
    assert!(store.remove_dead_letter(&dead("j", "z", 7).key).await?);
    Ok(())
}

/// An old owner's inbox writes are refused like its state writes, and
/// nothing of the refused write lands: not its append, not its removal.
pub async fn inbox_fencing(store: &dyn StateStore) -> Result<(), StoreError> {
    store
        .write_batch(&[inbox_write(
            "g",
            "a",
            Some(3),
            &[],
            vec![InboxOp::Append(entry(1))],
        )])
        .await?;
    let _ = store.claim("g", "a", 5).await?;
    let refused = store
        .write_batch(&[inbox_write(
            "g",
            "a",
            Some(3),
            &[("k", Some("stale"))],
            vec![InboxOp::Remove { seq: 1 }, InboxOp::Append(entry(2))],
        )])
        .await?;
    assert_eq!(
        refused,
        vec![FencedActor {
            actor_type: "g".into(),
            actor_id: "a".into(),
            epoch: 3
        }]
    );
    assert_eq!(seqs(&store.load_inbox("g", "a").await?), vec![1]);
    assert!(store.load("g", "a").await?.is_empty());
    // The new owner's removal goes through.
    let refused = store
        .write_batch(&[inbox_write(
            "g",
            "a",
            Some(5),
            &[],
            vec![InboxOp::Remove { seq: 1 }],
        )])
        .await?;
    assert!(refused.is_empty());
    assert!(store.load_inbox("g", "a").await?.is_empty());
    Ok(())
}
