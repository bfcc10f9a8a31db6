//! The copy contract, which is also `stored_actors`'s: a store filled by a
//! copy holds what the source did, a copy out of it (walking its
//! `stored_actors` and its reads) gives the same again, whatever an actor
//! holds (state only, an inbox only, dead letters only, call records
//! only), across pages; a store's own `export_actors` reads what the
//! per-actor reads do; and a store that holds anything is not copied into.

use bytes::Bytes;

use crate::{
    copy_store, ActorWrite, CallRecord, Copied, CopyError, DeadLetter, DeadLetterKey, InboxEntry,
    InboxOp, MemoryReminders, MemoryStore, ReminderKey, ReminderOp, ReminderRecord, ReminderStore,
    ReminderWrite, StateStore, StoreError, Stores,
};

/// More actors than a copy reads per batch, so pages continue.
const MANY: usize = 300;

/// An actor with nothing yet, for the `with_*` helpers to fill.
fn actor(ty: &str, id: &str) -> ActorWrite {
    super::write(ty, id, &[])
}

fn with_state(mut w: ActorWrite, keys: &[&str]) -> ActorWrite {
    for k in keys {
        let value = Bytes::from(format!("{}/{}/{k}", w.actor_type, w.actor_id));
        w.changes.push((k.to_string(), Some(value)));
    }
    w
}

fn with_inbox(mut w: ActorWrite, seqs: &[u64]) -> ActorWrite {
    for seq in seqs {
        let data = Bytes::from(format!("{}/{}/tell-{seq}", w.actor_type, w.actor_id));
        w.inbox
            .push(InboxOp::Append(InboxEntry { seq: *seq, data }));
    }
    w
}

fn with_dead(mut w: ActorWrite, seq: u64) -> ActorWrite {
    w.inbox.push(InboxOp::DeadLetter(DeadLetter {
        key: DeadLetterKey {
            actor_type: w.actor_type.clone(),
            actor_id: w.actor_id.clone(),
            seq,
        },
        data: Bytes::from(format!("{}/{}/dead-{seq}", w.actor_type, w.actor_id)),
        error: "boom".into(),
        attempts: 3,
        failed_unix_ms: 1_000 + seq,
    }));
    w
}

fn with_record(mut w: ActorWrite, key: &str, at: u64) -> ActorWrite {
    w.records.push(CallRecord {
        key: key.into(),
        recorded_unix_ms: at,
        data: Bytes::from(format!("{}/{}/{key}", w.actor_type, w.actor_id)),
        new_key: false,
    });
    w
}

fn reminder(ty: &str, id: &str, name: &str, due: u64) -> ReminderWrite {
    ReminderWrite {
        op: ReminderOp::Put(ReminderRecord {
            key: ReminderKey {
                actor_type: ty.into(),
                actor_id: id.into(),
                name: name.into(),
            },
            due_unix_ms: due,
            data: Bytes::from(format!("{ty}/{id}/{name}")),
        }),
        epoch: None,
    }
}

/// A source holding one of each kind of actor, neighbours whose names
/// prefix one another, and [`MANY`] more.
async fn source() -> Result<(MemoryStore, MemoryReminders), StoreError> {
    let state = MemoryStore::new();
    let mut writes = vec![
        with_state(actor("copy", "state"), &["a", "b"]),
        with_inbox(actor("copy", "inbox"), &[1, 2]),
        with_dead(actor("copy", "dead"), 5),
        with_record(with_record(actor("copy", "records"), "k1", 100), "k2", 200),
        with_record(
            with_dead(with_inbox(with_state(actor("copy", "a"), &["x"]), &[7]), 3),
            "k",
            300,
        ),
        with_state(actor("copyx", "a"), &["y"]),
        with_state(actor("copy", "ab"), &["z"]),
    ];
    writes.extend((0..MANY).map(|i| with_state(actor("many", &format!("m{i:04}")), &["n"])));
    state.write_batch(&writes).await?;
    let reminders = MemoryReminders::new();
    reminders
        .apply_reminders(&[
            reminder("copy", "a", "r1", 10),
            reminder("copy", "a", "r2", 20),
            reminder("copy", "none", "r", 30),
            reminder("many", "m0007", "r", 40),
        ])
        .await?;
    Ok((state, reminders))
}

/// Everything a store holds, in one comparable value.
async fn everything(store: Stores<'_>) -> Result<Vec<String>, StoreError> {
    let mut out = Vec::new();
    let mut actors = Vec::new();
    loop {
        let after = actors
            .last()
            .map(|(t, i): &(String, String)| (t.as_str(), i.as_str()));
        let page = store.state.stored_actors(after, 7).await?;
        if page.is_empty() {
            break;
        }
        actors.extend(page);
    }
    let mut sorted = actors.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        actors.len(),
        "an actor listed twice: {actors:?}"
    );
    for (ty, id) in sorted {
        out.push(format!(
            "{ty}/{id} state {:?}",
            store.state.load(&ty, &id).await?
        ));
        out.push(format!(
            "{ty}/{id} inbox {:?}",
            store.state.load_inbox(&ty, &id).await?
        ));
        let mut keys = store
            .state
            .load_record_keys(&ty, &id, 0, usize::MAX)
            .await?;
        keys.sort_by(|a, b| a.key.cmp(&b.key));
        for key in keys {
            let record = store.state.load_record(&ty, &id, &key.key).await?;
            out.push(format!("{ty}/{id} record {key:?} {record:?}"));
        }
    }
    out.push(format!(
        "dead {:?}",
        store
            .state
            .list_dead_letters(None, None, usize::MAX)
            .await?
    ));
    out.push(format!(
        "reminders {:?}",
        store
            .reminders
            .list_reminders(None, None, None, usize::MAX)
            .await?
    ));
    Ok(out)
}

/// A store's own `export_actors` reads what the per-actor reads do, for
/// actors in any order, one with nothing stored among them.
async fn exports_as_the_per_actor_reads_do(store: &dyn StateStore) -> Result<(), StoreError> {
    let actors: Vec<(String, String)> = [("copy", "a"), ("nobody", "here"), ("copy", "state")]
        .iter()
        .map(|(t, i)| (t.to_string(), i.to_string()))
        .collect();
    // Records come in no particular order.
    let sorted = |mut writes: Vec<ActorWrite>| {
        for w in &mut writes {
            w.records.sort_by(|a, b| a.key.cmp(&b.key));
        }
        writes
    };
    let exported = sorted(store.export_actors(&actors).await?);
    let by_actor = sorted(crate::export::one_by_one(store, &actors).await?);
    assert_eq!(format!("{exported:?}"), format!("{by_actor:?}"));
    assert!(exported.get(1).is_some_and(ActorWrite::is_empty));
    assert!(exported.first().is_some_and(|w| w.records.len() == 1));
    Ok(())
}

fn failed(e: CopyError) -> StoreError {
    StoreError::Io(e.to_string())
}

/// Copies a source into `store` (which must start empty), and `store` into
/// a fresh memory store, and compares all three.
pub async fn copy(store: Stores<'_>) -> Result<(), StoreError> {
    let (state, reminders) = source().await?;
    let from = Stores {
        state: &state,
        reminders: &reminders,
    };
    let copied = copy_store(from, store, |_| {}).await.map_err(failed)?;
    assert_eq!(
        copied,
        Copied {
            actors: 7 + MANY as u64,
            state_keys: 5 + MANY as u64,
            inbox_entries: 3,
            dead_letters: 2,
            call_records: 3,
            reminders: 4,
        }
    );
    let expected = everything(from).await?;
    assert_eq!(everything(store).await?, expected);
    exports_as_the_per_actor_reads_do(store.state).await?;

    let (again, again_reminders) = (MemoryStore::new(), MemoryReminders::new());
    let back = Stores {
        state: &again,
        reminders: &again_reminders,
    };
    copy_store(store, back, |_| {}).await.map_err(failed)?;
    assert_eq!(everything(back).await?, expected);

    // Full now: a second copy is refused before it writes anything.
    let refused = copy_store(from, store, |_| {}).await;
    assert!(
        matches!(refused, Err(CopyError::NotEmpty { .. })),
        "{refused:?}"
    );
    assert_eq!(everything(store).await?, expected);
    Ok(())
}
