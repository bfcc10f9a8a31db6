//! Idempotency keys through the runtime on an in-memory store: a keyed
//! call's answer (result or the method's error) is recorded with its state
//! changes and replayed to any retry with the same key — concurrent, after
//! the runtime is gone, for durable tells too — until it expires; read-only
//! and unkeyed calls run every time.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use troupe_runtime::{
    ActorFailure, ActorId, Call, CallError, CallExtra, FnHost, Payload, Runtime, RuntimeConfig,
    StateChange, StateMode, TurnOutcome, TypeSpec,
};
use troupe_storage::{MemoryStore, StateStore};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Type `t` (durable state): `incr` adds one to `count` and answers the new
/// count, `fail` raises, `get` (read-only) answers the count. Type `w` is
/// the same with write-behind state. `ran` counts the turns the host ran.
fn start(
    store: Arc<MemoryStore>,
    ran: Arc<AtomicU32>,
    retention: Duration,
) -> Result<Runtime, CallError> {
    start_flushing_every(
        store,
        ran,
        retention,
        RuntimeConfig::default().flush_interval,
    )
}

fn start_flushing_every(
    store: Arc<MemoryStore>,
    ran: Arc<AtomicU32>,
    retention: Duration,
    flush_interval: Duration,
) -> Result<Runtime, CallError> {
    start_configured(
        store,
        ran,
        RuntimeConfig {
            idempotency_retention: retention,
            flush_interval,
            metrics: true,
            ..RuntimeConfig::default()
        },
    )
}

fn start_configured(
    store: Arc<MemoryStore>,
    ran: Arc<AtomicU32>,
    config: RuntimeConfig,
) -> Result<Runtime, CallError> {
    let rt = common::single_node(config, store)?;
    let host = FnHost::new(
        "test",
        move |_actor: &ActorId, req: troupe_runtime::TurnRequest| {
            ran.fetch_add(1, Ordering::SeqCst);
            let count: u64 = req
                .state
                .get("count")
                .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
                .unwrap_or(0);
            match &*req.name {
                "fail" => TurnOutcome {
                    result: Err(ActorFailure {
                        ty: "ValueError".into(),
                        message: format!("refused at {count}"),
                        details: String::new(),
                        ..Default::default()
                    }),
                    changes: Vec::new(),
                },
                "get" => TurnOutcome {
                    result: Ok(Payload::json(count.to_string())),
                    changes: Vec::new(),
                },
                _ => TurnOutcome {
                    result: Ok(Payload::json((count + 1).to_string())),
                    changes: vec![StateChange::set("count", (count + 1).to_string())],
                },
            }
        },
    );
    rt.register_host(
        Arc::new(host),
        vec![
            TypeSpec {
                name: "t".into(),
                state_mode: Some(StateMode::Durable),
                readonly_methods: vec!["get".into()],
                ..TypeSpec::default()
            },
            TypeSpec {
                name: "w".into(),
                state_mode: Some(StateMode::WriteBehind),
                readonly_methods: vec!["get".into()],
                ..TypeSpec::default()
            },
        ],
    )?;
    Ok(rt)
}

fn keyed(actor: &ActorId, method: &str, key: Option<&str>) -> Call {
    let mut call = Call::new(actor.clone(), method, Payload::json("null"));
    call.extra = key.map(|k| {
        Box::new(CallExtra {
            idempotency_key: Some(k.into()),
            ..CallExtra::default()
        })
    });
    call
}

fn text(p: &Payload) -> String {
    String::from_utf8_lossy(&p.data).into_owned()
}

#[tokio::test]
async fn a_keyed_call_runs_once_and_every_retry_gets_its_answer() -> TestResult {
    let ran = Arc::new(AtomicU32::new(0));
    let rt = start(
        Arc::new(MemoryStore::new()),
        ran.clone(),
        Duration::from_secs(3600),
    )?;
    let a = ActorId::new("t", "a");
    let first = rt.invoke(keyed(&a, "incr", Some("k1"))).await?;
    let again = rt.invoke(keyed(&a, "incr", Some("k1"))).await?;
    assert_eq!((text(&first), text(&again)), ("1".into(), "1".into()));
    assert_eq!(ran.load(Ordering::SeqCst), 1, "the retry did not run");

    // Concurrent attempts of one new key: one turn, one answer for all.
    let attempts: Vec<_> = (0..8)
        .map(|_| {
            let (rt, a) = (rt.clone(), a.clone());
            tokio::spawn(async move { rt.invoke(keyed(&a, "incr", Some("k2"))).await })
        })
        .collect();
    for attempt in attempts {
        assert_eq!(text(&attempt.await??), "2");
    }
    assert_eq!(ran.load(Ordering::SeqCst), 2);

    // The method's error is an answer too.
    for _ in 0..2 {
        match rt.invoke(keyed(&a, "fail", Some("k3"))).await {
            Err(CallError::Actor(f)) => assert_eq!(f.message, "refused at 2"),
            other => panic!("expected the recorded ValueError, got {other:?}"),
        }
    }
    assert_eq!(ran.load(Ordering::SeqCst), 3);

    // Unkeyed and read-only calls run every time; keys are per actor.
    rt.invoke(keyed(&a, "incr", None)).await?;
    rt.invoke(keyed(&a, "incr", None)).await?;
    rt.invoke(keyed(&a, "get", Some("r"))).await?;
    let read = rt.invoke(keyed(&a, "get", Some("r"))).await?;
    assert_eq!(text(&read), "4");
    let b = ActorId::new("t", "b");
    assert_eq!(text(&rt.invoke(keyed(&b, "incr", Some("k1"))).await?), "1");
    assert_eq!(ran.load(Ordering::SeqCst), 8);
    let _ = rt.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_retry_on_the_next_runtime_gets_the_stored_answer() -> TestResult {
    let store = Arc::new(MemoryStore::new());
    let ran = Arc::new(AtomicU32::new(0));
    let a = ActorId::new("t", "a");
    let rt = start(store.clone(), ran.clone(), Duration::from_secs(3600))?;
    // Durable type: answered once the answer is stored with the count.
    assert_eq!(text(&rt.invoke(keyed(&a, "incr", Some("k"))).await?), "1");
    let records = store.load_record_keys("t", "a", 0, usize::MAX).await?;
    assert_eq!(records.len(), 1, "recorded with the state: {records:?}");
    // The runtime goes without a word (as a killed daemon would): the next
    // one on the store answers the retry from the record.
    drop(rt);
    let rt = start(store.clone(), ran.clone(), Duration::from_secs(3600))?;
    assert_eq!(text(&rt.invoke(keyed(&a, "incr", Some("k"))).await?), "1");
    assert_eq!(ran.load(Ordering::SeqCst), 1, "the method ran once");
    assert_eq!(text(&rt.invoke(keyed(&a, "incr", Some("k+"))).await?), "2");
    let _ = rt.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn an_expired_answer_is_forgotten_and_the_call_runs_again() -> TestResult {
    let store = Arc::new(MemoryStore::new());
    let ran = Arc::new(AtomicU32::new(0));
    let a = ActorId::new("t", "a");
    let rt = start(store.clone(), ran.clone(), Duration::from_millis(50))?;
    rt.invoke(keyed(&a, "incr", Some("k"))).await?;
    // The retention window is the subject: let it pass.
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert_eq!(text(&rt.invoke(keyed(&a, "incr", Some("k"))).await?), "2");
    assert_eq!(ran.load(Ordering::SeqCst), 2);
    // The sweeper (every second at the least) deletes it from the store.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !store
        .load_record_keys("t", "a", 0, usize::MAX)
        .await?
        .is_empty()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "records never expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = rt.shutdown().await;
    Ok(())
}

/// A caller that sends its key again only for a while (an SDK, for the keys
/// it makes) has the answer kept that long, not for the whole retention: a
/// later call with the key runs again, and the store lets the record go,
/// while a key sent without a retention keeps its answer.
#[tokio::test]
async fn an_answer_is_kept_as_long_as_its_caller_may_resend_the_key() -> TestResult {
    let store = Arc::new(MemoryStore::new());
    let ran = Arc::new(AtomicU32::new(0));
    let a = ActorId::new("t", "a");
    let config = RuntimeConfig {
        idempotency_retention: Duration::from_secs(3600),
        min_key_retention: Duration::from_millis(10),
        ..RuntimeConfig::default()
    };
    let rt = start_configured(store.clone(), ran.clone(), config.clone())?;
    let briefly = |key: &str| {
        let mut call = keyed(&a, "incr", Some(key));
        if let Some(extra) = call.extra.as_mut() {
            extra.key_retention = Some(Duration::from_millis(50));
        }
        call
    };
    assert_eq!(text(&rt.invoke(briefly("brief")).await?), "1");
    assert_eq!(
        text(&rt.invoke(keyed(&a, "incr", Some("kept"))).await?),
        "2"
    );
    assert_eq!(
        text(&rt.invoke(briefly("brief")).await?),
        "1",
        "a retry in time"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 2);
    // A durable tell's key, recorded with its append, is kept as briefly.
    rt.tell_durable(briefly("brief-tell")).await?;
    let stored = store.load_record_keys("t", "a", 0, usize::MAX).await?;
    let started = |key: &str| {
        stored
            .iter()
            .find(|r| r.key == key)
            .map(|r| r.recorded_unix_ms)
    };
    let hour_ago = troupe_runtime::clock::unix_now_ms() - 3_600_000;
    for key in ["brief", "brief-tell"] {
        assert!(
            started(key).is_some_and(|at| at < hour_ago + 1_000),
            "{key}'s retention ends 50 ms after it was recorded: {stored:?}"
        );
    }
    assert!(started("kept").is_some_and(|at| at > hour_ago + 3_000_000));
    // The caller's retention is the subject: let it pass.
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert_eq!(text(&rt.invoke(briefly("brief")).await?), "4");
    assert_eq!(
        text(&rt.invoke(keyed(&a, "incr", Some("kept"))).await?),
        "2"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 4);
    let _ = rt.shutdown().await;
    // The next runtime sweeps at start: the brief records go.
    let rt = start_configured(store.clone(), ran.clone(), config)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let keys = store.load_record_keys("t", "a", 0, usize::MAX).await?;
        let keys: Vec<&str> = keys.iter().map(|r| r.key.as_str()).collect();
        if keys == ["kept"] {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the brief record never expired: {keys:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = rt.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_retried_durable_tell_is_stored_and_applied_once() -> TestResult {
    let store = Arc::new(MemoryStore::new());
    let ran = Arc::new(AtomicU32::new(0));
    let a = ActorId::new("t", "a");
    let rt = start(store.clone(), ran.clone(), Duration::from_secs(3600))?;
    for _ in 0..3 {
        rt.tell_durable(keyed(&a, "incr", Some("t1"))).await?;
    }
    rt.tell_durable(keyed(&a, "incr", Some("t2"))).await?;
    // Read through the actor: its turns run in order, so the tells are in.
    let count = rt.invoke(keyed(&a, "get", None)).await?;
    assert_eq!(text(&count), "2", "each keyed tell applied once");
    assert_eq!(ran.load(Ordering::SeqCst), 3);
    let _ = rt.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn an_old_answer_past_the_memory_bound_comes_from_the_store() -> TestResult {
    let store = Arc::new(MemoryStore::new());
    let ran = Arc::new(AtomicU32::new(0));
    let a = ActorId::new("t", "a");
    let rt = start(store.clone(), ran.clone(), Duration::from_secs(3600))?;
    // More keyed calls than memory keeps for one actor (1024).
    let calls = 1_100u32;
    for i in 0..calls {
        rt.invoke(keyed(&a, "incr", Some(&format!("k{i}")))).await?;
    }
    rt.tell_durable(keyed(&a, "incr", Some("t0"))).await?;
    for i in 0..1_030u32 {
        rt.invoke(keyed(&a, "incr", Some(&format!("later{i}"))))
            .await?;
    }
    let before = ran.load(Ordering::SeqCst);
    // The first ones left memory long ago: the store answers.
    assert_eq!(text(&rt.invoke(keyed(&a, "incr", Some("k0"))).await?), "1");
    rt.tell_durable(keyed(&a, "incr", Some("t0"))).await?;
    assert_eq!(ran.load(Ordering::SeqCst), before, "nothing ran again");
    // And after a restart, whose load stops at the bound.
    drop(rt);
    let rt = start(store.clone(), ran.clone(), Duration::from_secs(3600))?;
    assert_eq!(text(&rt.invoke(keyed(&a, "incr", Some("k1"))).await?), "2");
    assert_eq!(ran.load(Ordering::SeqCst), before, "nothing ran again");
    let _ = rt.shutdown().await;
    Ok(())
}

/// Keys whose fingerprints memory keeps per actor (1,024), plus the keys
/// let go past them, kept as tags (8,192): up to this many, memory knows
/// every key of the actor the store holds.
const KNOWN_KEYS: u32 = 1_024 + 8_192;

/// Past the 1,024 keys memory keeps per actor, the keys it lets go stay as
/// tags: a key the caller chose and never sent is new without a store read,
/// and a retry of one let go reads its answer from the store. Past the tags
/// too, a key memory does not know may be in the store, so a call with it
/// reads the store first (on PostgreSQL a round trip per call to a busy
/// actor), unless its caller made it for the call and never sent it before
/// (`new_key`, as the SDKs send their fresh keys).
#[tokio::test]
async fn keys_past_the_memory_bound_are_looked_for_in_the_store_only_where_they_may_be(
) -> TestResult {
    let store = Arc::new(MemoryStore::new());
    let ran = Arc::new(AtomicU32::new(0));
    let a = ActorId::new("t", "a");
    let rt = start(store.clone(), ran.clone(), Duration::from_secs(3600))?;
    let new = |key: &str| {
        let mut call = keyed(&a, "incr", Some(key));
        if let Some(extra) = call.extra.as_mut() {
            extra.new_key = true;
        }
        call
    };
    // Keys a caller chose, more than memory keeps fingerprints of.
    for i in 0..1_100u32 {
        rt.invoke(keyed(&a, "incr", Some(&format!("k{i}")))).await?;
    }
    rt.tell_durable(keyed(&a, "incr", Some("t0"))).await?;
    assert_eq!(store.record_reads(), 0, "the keys past the bound were read");
    // A retry of a key long out of the fingerprints: the store answers.
    let before = ran.load(Ordering::SeqCst);
    assert_eq!(text(&rt.invoke(keyed(&a, "incr", Some("k0"))).await?), "1");
    assert_eq!(ran.load(Ordering::SeqCst), before, "k0 ran again");
    assert_eq!(store.record_reads(), 1);

    // Past the tags too (the rest marked new, so as not to read).
    for i in 1_100..KNOWN_KEYS + 10 {
        rt.invoke(new(&format!("k{i}"))).await?;
    }
    rt.invoke(new("n1")).await?;
    rt.tell_durable(new("t1")).await?;
    assert_eq!(
        store.record_reads(),
        1,
        "new keys past both bounds were read"
    );
    // The same calls without the word: the store is asked each time.
    rt.invoke(keyed(&a, "incr", Some("n2"))).await?;
    rt.tell_durable(keyed(&a, "incr", Some("t2"))).await?;
    assert_eq!(store.record_reads(), 3, "unknown keys past both bounds");
    // Operators see them.
    let mut metrics = String::new();
    rt.encode_metrics(&mut metrics)?;
    let reads = r#"troupe_call_record_reads_total{actor_type="t"} 3"#;
    assert!(metrics.contains(reads), "{metrics}");
    let before = ran.load(Ordering::SeqCst);
    assert_eq!(text(&rt.invoke(keyed(&a, "incr", Some("k1"))).await?), "2");
    assert_eq!(ran.load(Ordering::SeqCst), before, "k1 ran again");
    let _ = rt.shutdown().await;
    Ok(())
}

/// An activation reads up to `KNOWN_KEYS` of its keys: with fewer stored,
/// it knows them all, and a key it does not know is new without a read.
#[tokio::test]
async fn an_activation_knows_all_its_stored_keys_up_to_the_load_limit() -> TestResult {
    let store = Arc::new(MemoryStore::new());
    let ran = Arc::new(AtomicU32::new(0));
    let a = ActorId::new("t", "a");
    let rt = start(store.clone(), ran.clone(), Duration::from_secs(3600))?;
    for i in 0..1_100u32 {
        rt.invoke(keyed(&a, "incr", Some(&format!("k{i}")))).await?;
    }
    let _ = rt.shutdown().await;
    let rt = start(store.clone(), ran.clone(), Duration::from_secs(3600))?;
    assert_eq!(
        text(&rt.invoke(keyed(&a, "incr", Some("never-sent"))).await?),
        "1101"
    );
    assert_eq!(store.record_reads(), 0, "a new key was read");
    let before = ran.load(Ordering::SeqCst);
    assert_eq!(text(&rt.invoke(keyed(&a, "incr", Some("k0"))).await?), "1");
    assert_eq!(ran.load(Ordering::SeqCst), before, "k0 ran again");
    assert_eq!(store.record_reads(), 1, "k0's answer came from the store");
    let _ = rt.shutdown().await;
    Ok(())
}

/// Memory's bound must not drop an answer the store does not hold yet: a
/// write-behind actor can answer more keyed calls than memory keeps
/// between two flushes.
#[tokio::test]
async fn an_answer_not_yet_stored_stays_in_memory_past_the_bound() -> TestResult {
    let store = Arc::new(MemoryStore::new());
    let ran = Arc::new(AtomicU32::new(0));
    let a = ActorId::new("w", "a");
    // No periodic flush during the test: every answer stays unwritten.
    let hour = Duration::from_secs(3600);
    let rt = start_flushing_every(store.clone(), ran.clone(), hour, hour)?;
    for i in 0..1_100u32 {
        rt.invoke(keyed(&a, "incr", Some(&format!("k{i}")))).await?;
    }
    assert!(store.load_record_keys("w", "a", 0, 1).await?.is_empty());
    assert_eq!(text(&rt.invoke(keyed(&a, "incr", Some("k0"))).await?), "1");
    assert_eq!(ran.load(Ordering::SeqCst), 1_100, "k0 did not run again");
    // Once stored, the oldest leave memory and the store answers for them.
    rt.flush().await?;
    assert_eq!(
        store.load_record_keys("w", "a", 0, usize::MAX).await?.len(),
        1_100
    );
    assert_eq!(text(&rt.invoke(keyed(&a, "incr", Some("k1"))).await?), "2");
    assert_eq!(ran.load(Ordering::SeqCst), 1_100, "k1 did not run again");
    let _ = rt.shutdown().await;
    Ok(())
}

/// The value of the metric line starting with `name` (no labels).
fn metric(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Past `idempotency_memory_bytes`, the actors holding the most keys give
/// memory back: it stays within the bound, new keys still cost no store
/// read, and a retry of a key memory let go reads its answer from the
/// store instead of running the method again.
#[tokio::test]
async fn past_the_memory_bound_a_retry_reads_its_answer_from_the_store() -> TestResult {
    let store = Arc::new(MemoryStore::new());
    let ran = Arc::new(AtomicU32::new(0));
    let bound = 16 * 1024;
    let rt = start_configured(
        store.clone(),
        ran.clone(),
        RuntimeConfig {
            idempotency_retention: Duration::from_secs(3600),
            idempotency_memory_bytes: bound,
            metrics: true,
            ..RuntimeConfig::default()
        },
    )?;
    // Eight actors of 100 stored keys each: several times the bound.
    let actors: Vec<ActorId> = (0..8).map(|i| ActorId::new("t", format!("a{i}"))).collect();
    let callers: Vec<_> = actors
        .iter()
        .map(|a| {
            let (rt, a) = (rt.clone(), a.clone());
            tokio::spawn(async move {
                for k in 0..100 {
                    rt.invoke(keyed(&a, "incr", Some(&format!("k{k}")))).await?;
                }
                Ok::<_, CallError>(())
            })
        })
        .collect();
    for caller in callers {
        caller.await??;
    }
    // Each answer was stored before its durable reply, and memory checked
    // against the bound with it.
    let mut metrics = String::new();
    rt.encode_metrics(&mut metrics)?;
    let held = metric(&metrics, "troupe_call_records_memory_bytes").ok_or(metrics.clone())?;
    let shed = metric(&metrics, "troupe_call_records_shed_total").ok_or(metrics.clone())?;
    assert!(held <= bound as f64, "{held} bytes held past the bound");
    assert!(shed >= 1.0, "no actor shed: {metrics}");
    assert_eq!(store.record_reads(), 0);

    for a in &actors {
        assert_eq!(text(&rt.invoke(keyed(a, "incr", Some("k0"))).await?), "1");
    }
    assert_eq!(ran.load(Ordering::SeqCst), 800, "a retry ran again");
    // The actors that shed keep their keys as tags: the retries of theirs
    // read the store, new keys did not.
    assert!(store.record_reads() >= 1, "no retry read the store");
    let _ = rt.shutdown().await;
    Ok(())
}
