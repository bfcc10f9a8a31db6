//! A `kill -9` amid concurrent reminder moves and deletes on the sled store:
//! after the restart every reminder is as its last acknowledged write left
//! it, or as the write in flight at the kill would have; it fires once, with
//! that version, or not at all when that write was a delete. sled writes its
//! log at each batch's flush (and every 500 ms), so a kill mostly cuts
//! between batches; the cuts inside one (single-key operations, see
//! crates/storage-sled/src/reminders/write.rs) are checked one by one in
//! that crate's tests.
//!
//! Each version of a reminder increments its counter by 3^version, so the
//! count after the firings names the one version that fired (a sum of two
//! distinct powers of three, or twice one, is no power of three). The
//! daemons run on the test clock: versions are due in about an hour, and
//! advancing the clock fires them all, so nothing fires before the kill.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use troupe_proto::v1 as pb;
use troupe_tests::{actor, json_payload, type_spec, Daemon, TestApp};

const WRITERS: usize = 8;
const ACTORS_PER_WRITER: usize = 8;
/// Rounds of writes per actor at most; versions stay below this, so
/// 3^version fits an i64 with room for a double firing to show.
const ROUNDS: u32 = 30;
/// Acknowledged writes before the kill: about a third of all there are, so
/// every writer still has a write in flight when it comes.
const KILL_AFTER: usize = WRITERS * ACTORS_PER_WRITER * ROUNDS as usize / 3;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Write {
    Set { version: u32 },
    Delete,
}

impl Write {
    /// The count its firing leaves: 3^version, or nothing for a delete.
    fn count(self) -> i64 {
        match self {
            Write::Set { version } => 3i64.pow(version),
            Write::Delete => 0,
        }
    }
}

/// Per actor: its last acknowledged write, and the one in flight, if any.
type Ledger = Arc<Mutex<HashMap<String, (Option<Write>, Option<Write>)>>>;

fn set(id: &str, version: u32) -> pb::SetReminderRequest {
    pb::SetReminderRequest {
        actor: Some(actor("counter", id)),
        name: "incr".into(),
        // A different due time per version: each set moves the index entry.
        due: format!("{}ms", 3_600_000 + u64::from(version) * 7),
        payload: Some(json_payload(format!(
            r#"{{"kwargs": {{"by": {}}}}}"#,
            3i64.pow(version)
        ))),
        ..Default::default()
    }
}

fn note(ledger: &Ledger, id: &str, update: impl FnOnce(&mut (Option<Write>, Option<Write>))) {
    if let Ok(mut l) = ledger.lock() {
        update(l.entry(id.to_owned()).or_default());
    }
}

/// Writes to its actors round by round until the daemon stops answering
/// (or the rounds run out), noting each write before it is sent and once
/// it is acknowledged.
async fn writer(
    mut client: troupe_tests::Client,
    ids: Vec<String>,
    ledger: Ledger,
    acked: Arc<AtomicUsize>,
    kill: Arc<tokio::sync::Notify>,
) {
    for round in 0..ROUNDS {
        for (j, id) in ids.iter().enumerate() {
            let write = if (round as usize + j) % 4 == 3 {
                Write::Delete
            } else {
                Write::Set { version: round }
            };
            note(&ledger, id, |e| e.1 = Some(write));
            let answered = match write {
                Write::Set { version } => client.0.set_reminder(set(id, version)).await.is_ok(),
                Write::Delete => client
                    .0
                    .delete_reminder(pb::ReminderRef {
                        actor: Some(actor("counter", id)),
                        name: "incr".into(),
                    })
                    .await
                    .is_ok(),
            };
            if !answered {
                return; // killed: this write may or may not have landed
            }
            note(&ledger, id, |e| *e = (Some(write), None));
            if acked.fetch_add(1, Ordering::SeqCst) + 1 == KILL_AFTER {
                kill.notify_one();
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_amid_reminder_moves_leaves_each_as_written_and_firing_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let args = ["--test-clock"];
    let mut daemon = Daemon::start(dir.path(), &args).await?;
    let ledger = Ledger::default();
    let acked = Arc::new(AtomicUsize::new(0));
    let kill = Arc::new(tokio::sync::Notify::new());
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let ids = (0..ACTORS_PER_WRITER)
            .map(|j| format!("m{w}-{j}"))
            .collect();
        writers.push(tokio::spawn(writer(
            daemon.client().await?,
            ids,
            ledger.clone(),
            acked.clone(),
            kill.clone(),
        )));
    }
    kill.notified().await;
    daemon.kill9().await?;
    for w in writers {
        w.await?;
    }
    let in_flight = ledger
        .lock()
        .map(|l| l.values().filter(|e| e.1.is_some()).count())
        .unwrap_or(0);
    assert!(in_flight > 0, "the kill came with no write in flight");

    let daemon = Daemon::start(dir.path(), &args).await?;
    let app = TestApp::attach(daemon.addr, vec![type_spec("counter")]).await?;
    let mut client = daemon.client().await?;
    daemon
        .admin()
        .await?
        .advance_clock(pb::AdvanceClockRequest { by: "2h".into() })
        .await?;

    let ledger = ledger.lock().map(|l| l.clone()).unwrap_or_default();
    let mut turns: HashMap<String, usize> = HashMap::new();
    for ((_, id), _) in app.events().turns_run {
        *turns.entry(id).or_default() += 1;
    }
    for (id, (last, in_flight)) in &ledger {
        // Never written, or last a delete: no firing.
        let mut allowed = vec![last.map_or(0, Write::count)];
        allowed.extend(in_flight.map(Write::count));
        let count = client.stored_count("counter", id).await?.unwrap_or(0);
        assert!(
            allowed.contains(&count),
            "{id}: count {count}, expected one of {allowed:?} (last acknowledged {last:?}, in flight {in_flight:?})"
        );
        let fired = turns.get(id).copied().unwrap_or(0);
        assert_eq!(fired, usize::from(count != 0), "{id}: fired {fired} times");
        let left = client
            .0
            .get_reminder(pb::ReminderRef {
                actor: Some(actor("counter", id)),
                name: "incr".into(),
            })
            .await;
        assert!(
            matches!(&left, Err(s) if s.code() == tonic::Code::NotFound),
            "{id}: a reminder is left after its firing: {left:?}"
        );
    }
    Ok(())
}
