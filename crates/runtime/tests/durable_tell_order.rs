//! A durable tell whose delivery fails keeps its place: while it waits out
//! its retry backoff, the durable tells sent after it wait too (they are
//! applied after it, in order), and invokes go ahead.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use troupe_runtime::{
    ActorFailure, ActorId, Call, CallError, FnHost, Payload, Runtime, RuntimeConfig, StateChange,
    TurnOutcome, TypeSpec,
};
use troupe_storage::MemoryStore;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// `append(item)` adds the item to key `log`, failing once for each item in
/// `fail_once`; `log` answers the log.
fn start(fail_once: Arc<Mutex<HashSet<String>>>) -> Result<Runtime, CallError> {
    let rt = common::single_node(RuntimeConfig::default(), Arc::new(MemoryStore::new()))?;
    let host = FnHost::new(
        "test",
        move |_actor: &ActorId, req: troupe_runtime::TurnRequest| {
            let log = req
                .state
                .get("log")
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default();
            if &*req.name == "log" {
                return TurnOutcome {
                    result: Ok(Payload::json(log)),
                    changes: Vec::new(),
                };
            }
            let item = String::from_utf8_lossy(&req.payload.data).into_owned();
            let fail = fail_once
                .lock()
                .map(|mut f| f.remove(&item))
                .unwrap_or(false);
            if fail {
                return TurnOutcome {
                    result: Err(ActorFailure {
                        ty: "ValueError".into(),
                        message: format!("{item} fails once"),
                        details: String::new(),
                        ..Default::default()
                    }),
                    changes: Vec::new(),
                };
            }
            let log = if log.is_empty() {
                item
            } else {
                format!("{log},{item}")
            };
            TurnOutcome {
                result: Ok(Payload::json("null")),
                changes: vec![StateChange::set("log", log)],
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

#[tokio::test]
async fn a_retried_tell_is_not_overtaken_by_later_ones() -> TestResult {
    let fail_once = Arc::new(Mutex::new(HashSet::from(["x1".to_string()])));
    let rt = start(fail_once.clone())?;
    let actor = ActorId::new("t", "a");
    for item in ["x1", "x2", "x3"] {
        let call = Call::new(actor.clone(), "append", Payload::json(item.to_owned()));
        rt.tell_durable(call).await?;
    }
    // An invoke is not held behind the retry: it answers while x1 waits
    // out its backoff (the log is still empty then).
    let early = rt
        .invoke(Call::new(actor.clone(), "log", Payload::default()))
        .await?;
    assert_eq!(&early.data[..], b"", "nothing applied before x1");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let log = loop {
        let log = rt
            .invoke(Call::new(actor.clone(), "log", Payload::default()))
            .await?;
        if log.data.len() >= "x1,x2,x3".len() {
            break String::from_utf8_lossy(&log.data).into_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "tells never applied"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(log, "x1,x2,x3", "the retried tell kept its place");
    assert!(fail_once.lock().map(|f| f.is_empty()).unwrap_or(false));
    let _ = rt.shutdown().await;
    Ok(())
}
