//! The figures operators read about durable tells, through the runtime on an
//! in-memory store: per-type counts (stored, delivered, retried,
//! dead-lettered, re-driven, dropped), the inbox depth held here, an actor's
//! retries waiting, the dead letters counted from the store, and their
//! `/metrics` families.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use troupe_runtime::{
    ActorFailure, ActorId, Call, CallError, DeadLetterCount, DeliveryCounts, FnHost, Payload,
    Runtime, RuntimeConfig, TurnOutcome, TypeSpec,
};
use troupe_storage::MemoryStore;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A runtime with metrics on whose type `t` fails every turn while
/// `failing` is set; each turn's payload is sent on `handled`.
fn start(
    failing: Arc<AtomicBool>,
    handled: mpsc::UnboundedSender<String>,
) -> Result<Runtime, CallError> {
    let config = RuntimeConfig {
        metrics: true,
        flush_interval: Duration::from_secs(3600),
        ..RuntimeConfig::default()
    };
    let rt = common::single_node(config, Arc::new(MemoryStore::new()))?;
    let host = FnHost::new(
        "test",
        move |_: &ActorId, req: troupe_runtime::TurnRequest| {
            let item = String::from_utf8_lossy(&req.payload.data).into_owned();
            let _ = handled.send(item.clone());
            let result = if failing.load(Ordering::SeqCst) {
                Err(ActorFailure {
                    ty: "ValueError".into(),
                    message: format!("refusing {item}"),
                    details: String::new(),
                    ..Default::default()
                })
            } else {
                Ok(Payload::json("null"))
            };
            TurnOutcome {
                result,
                changes: Vec::new(),
            }
        },
    );
    rt.register_host(
        Arc::new(host),
        vec![TypeSpec {
            name: "t".into(),
            ..TypeSpec::default()
        }],
    )?;
    Ok(rt)
}

fn tell(actor: &ActorId, item: &str) -> Call {
    Call::new(actor.clone(), "append", Payload::json(item.to_owned()))
}

/// Polls `check` every 5 ms until it gives a value (at most 10 s).
async fn until<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> Result<T, String> {
    for _ in 0..2_000 {
        if let Some(v) = check().await {
            return Ok(v);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Err(format!("timed out waiting for {what}"))
}

async fn counts(rt: &Runtime) -> DeliveryCounts {
    rt.delivery_status().await.counts
}

#[tokio::test]
async fn counts_follow_tells_through_retries_dead_letters_and_redrives() -> TestResult {
    let failing = Arc::new(AtomicBool::new(false));
    let (tx, mut handled) = mpsc::unbounded_channel();
    let rt = start(failing.clone(), tx)?;
    let actor = ActorId::new("t", "a");

    rt.tell_durable(tell(&actor, "ok")).await?;
    assert_eq!(handled.recv().await.as_deref(), Some("ok"));
    let after_ok = until("the first tell's turn to end", async || {
        let c = counts(&rt).await;
        (c.delivered == 1 && c.inbox_depth == 0).then_some(c)
    })
    .await?;
    assert_eq!(after_ok.stored, 1, "{after_ok:?}");

    // Failing: retried twice (100 ms, then 200 ms), then a dead letter.
    failing.store(true, Ordering::SeqCst);
    rt.tell_durable(tell(&actor, "x")).await?;
    assert_eq!(handled.recv().await.as_deref(), Some("x"));
    let retries = until("the retry to be recorded", async || {
        let d = rt.describe_actor(&actor).await.ok()??;
        (!d.inbox_retries.is_empty()).then_some(d.inbox_retries)
    })
    .await?;
    assert_eq!(retries.len(), 1, "{retries:?}");
    let retry = &retries[0];
    assert!((1..=2).contains(&retry.attempts), "{retry:?}");
    assert_eq!(retry.max_attempts, 3);
    assert!(retry.last_error.contains("refusing x"), "{retry:?}");
    let status = rt.delivery_status().await;
    assert_eq!(status.retrying, 1, "{status:?}");
    assert_eq!(
        status.counts.inbox_depth, 1,
        "held while it waits: {status:?}"
    );
    let mut metrics = String::new();
    rt.encode_metrics(&mut metrics)?;
    for line in [
        "troupe_inbox_retrying{actor_type=\"t\"} 1",
        "troupe_inbox_depth{actor_type=\"t\"} 1",
        "troupe_durable_tells_stored_total{actor_type=\"t\"} 2",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line:?} in\n{metrics}"
        );
    }

    for _ in 0..2 {
        assert_eq!(handled.recv().await.as_deref(), Some("x"));
    }
    let dead = until("the dead letter", async || {
        let c = counts(&rt).await;
        (c.dead_lettered == 1).then_some(c)
    })
    .await?;
    assert_eq!(
        dead,
        DeliveryCounts {
            inbox_depth: 0,
            stored: 2,
            delivered: 1,
            retried: 2,
            dead_lettered: 1,
            redriven: 0,
            dropped: 0,
        }
    );
    assert_eq!(rt.delivery_status().await.retrying, 0);
    let d = rt
        .describe_actor(&actor)
        .await?
        .ok_or("the actor is unknown")?;
    assert!(d.inbox_retries.is_empty(), "{:?}", d.inbox_retries);

    // Written with the actor's next flush, which a deactivation forces.
    rt.deactivate_actor(&actor).await?;
    let letters = rt.list_dead_letters(None, None, 10).await?;
    assert_eq!(letters.len(), 1);
    assert_eq!(
        rt.delivery_status().await.dead_letters?,
        DeadLetterCount {
            counted: 1,
            at_least: false
        }
    );

    // Re-driven (stored anew, delivered), then one more dead letter dropped.
    failing.store(false, Ordering::SeqCst);
    assert!(rt.redrive_dead_letter(&actor, letters[0].seq).await?);
    assert_eq!(handled.recv().await.as_deref(), Some("x"));
    failing.store(true, Ordering::SeqCst);
    rt.tell_durable(tell(&actor, "y")).await?;
    for _ in 0..3 {
        assert_eq!(handled.recv().await.as_deref(), Some("y"));
    }
    let letter = until("the second dead letter", async || {
        rt.deactivate_actor(&actor).await.ok()?;
        rt.list_dead_letters(None, None, 10).await.ok()?.pop()
    })
    .await?;
    assert!(rt.drop_dead_letter(&actor, letter.seq).await?);
    assert!(!rt.drop_dead_letter(&actor, letter.seq).await?, "gone");
    let end = until("the counts to settle", async || {
        let c = counts(&rt).await;
        (c.delivered == 2 && c.dead_lettered == 2).then_some(c)
    })
    .await?;
    assert_eq!(
        end,
        DeliveryCounts {
            inbox_depth: 0,
            stored: 4,
            delivered: 2,
            retried: 4,
            dead_lettered: 2,
            redriven: 1,
            dropped: 1,
        }
    );
    let mut metrics = String::new();
    rt.encode_metrics(&mut metrics)?;
    for line in [
        "troupe_durable_tells_stored_total{actor_type=\"t\"} 4",
        "troupe_durable_tells_delivered_total{actor_type=\"t\"} 2",
        "troupe_durable_tells_retried_total{actor_type=\"t\"} 4",
        "troupe_durable_tells_dead_lettered_total{actor_type=\"t\"} 2",
        "troupe_dead_letters_redriven_total{actor_type=\"t\"} 1",
        "troupe_dead_letters_dropped_total{actor_type=\"t\"} 1",
        "troupe_inbox_depth{actor_type=\"t\"} 0",
        "troupe_inbox_retrying{actor_type=\"t\"} 0",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line:?} in\n{metrics}"
        );
    }
    let _ = rt.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_retry_given_up_with_its_activation_leaves_no_record() -> TestResult {
    let failing = Arc::new(AtomicBool::new(true));
    let (tx, mut handled) = mpsc::unbounded_channel();
    let rt = start(failing, tx)?;
    let actor = ActorId::new("t", "gone");
    rt.tell_durable(tell(&actor, "z")).await?;
    assert_eq!(handled.recv().await.as_deref(), Some("z"));
    until("the retry to be recorded", async || {
        (rt.delivery_status().await.retrying == 1).then_some(())
    })
    .await?;
    // Deactivated while it waits out its backoff: the entry stays stored
    // for the next activation, and this one's retry is no more.
    rt.deactivate_actor(&actor).await?;
    let status = until("the retry to be forgotten", async || {
        let s = rt.delivery_status().await;
        (s.retrying == 0 && s.counts.inbox_depth == 0).then_some(s)
    })
    .await?;
    assert_eq!(status.counts.dead_lettered, 0, "{status:?}");
    let _ = rt.shutdown().await;
    Ok(())
}
