//! What operators see, in process: describing an actor active and inactive,
//! forced deactivation, and the metrics moving with real turns.

mod common;

use std::sync::Arc;

use troupe_runtime::{
    ActivationState, ActorFailure, ActorId, Call, CallError, FnHost, Payload, Runtime,
    RuntimeConfig, StateChange, TurnOutcome, TypeSpec,
};
use troupe_storage::MemoryStore;

fn runtime(config: RuntimeConfig) -> Result<Runtime, CallError> {
    let rt = common::single_node(config, Arc::new(MemoryStore::new()))?;
    // `set` stores the payload under "v"; `boom` raises.
    let host = FnHost::new("inspect-app", |_actor: &ActorId, req| {
        if &*req.name == "boom" {
            return TurnOutcome {
                result: Err(ActorFailure {
                    ty: "ValueError".into(),
                    message: "boom".into(),
                    details: String::new(),
                    ..Default::default()
                }),
                changes: Vec::new(),
            };
        }
        TurnOutcome {
            result: Ok(Payload::json("null")),
            changes: vec![StateChange::set("v", req.payload.data.clone())],
        }
    });
    rt.register_host(
        Arc::new(host),
        vec![TypeSpec {
            name: "box".into(),
            ..TypeSpec::default()
        }],
    )?;
    Ok(rt)
}

fn call(id: &str, method: &str, json: &'static str) -> Call {
    Call::new(ActorId::new("box", id), method, Payload::json(json))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_follows_an_actor_through_deactivation() -> Result<(), CallError> {
    let rt = runtime(RuntimeConfig::default())?;
    let id = ActorId::new("box", "b1");
    assert!(
        rt.describe_actor(&id).await?.is_none(),
        "unknown actors are not described"
    );

    rt.invoke(call("b1", "set", "1")).await?;
    rt.invoke(call("b1", "set", "2")).await?;
    let active = rt
        .describe_actor(&id)
        .await?
        .ok_or_else(|| CallError::Internal("active actor not described".into()))?;
    assert_eq!(active.state, ActivationState::Idle);
    assert_eq!(active.app.as_deref(), Some("inspect-app"));
    assert_eq!(active.turns, 2);
    assert!(active.dirty, "write-behind: not flushed yet");
    assert_eq!(active.state_entries.len(), 1);
    assert_eq!(&active.state_entries[0].1[..], b"2");
    assert!(active.state_entries[0].2, "the key is marked dirty");
    assert!(!active.stored);
    assert!(active.activated_unix_ms.is_some());

    assert!(rt.deactivate_actor(&id).await?, "there was an activation");
    assert!(
        rt.list_actors(Some("box"), None, 10).is_empty(),
        "deactivate waits until the activation is gone"
    );
    let inactive = rt
        .describe_actor(&id)
        .await?
        .ok_or_else(|| CallError::Internal("stored actor not described".into()))?;
    assert_eq!(inactive.state, ActivationState::Inactive);
    assert!(
        inactive.stored && !inactive.dirty,
        "flushed on deactivation"
    );
    assert_eq!(&inactive.state_entries[0].1[..], b"2");
    assert_eq!(inactive.app, None);
    assert_eq!(rt.list_stored_actors("box", None, 10).await?, vec!["b1"]);

    assert!(
        !rt.deactivate_actor(&id).await?,
        "nothing to deactivate the second time"
    );
    // The next call activates it again, with its state.
    rt.invoke(call("b1", "set", "3")).await?;
    assert_eq!(
        rt.describe_actor(&id).await?.map(|d| d.state),
        Some(ActivationState::Idle)
    );
    Ok(())
}

/// The value of the sample line that starts with `prefix` (name and labels).
fn sample(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_turns_by_result() -> Result<(), CallError> {
    let rt = runtime(RuntimeConfig {
        metrics: true,
        // Unknown types fail at once instead of waiting for an app.
        host_wait: std::time::Duration::from_millis(1),
        ..RuntimeConfig::default()
    })?;
    for i in 0..3 {
        rt.invoke(call(&format!("m{i}"), "set", "1")).await?;
    }
    let raised = rt.invoke(call("m0", "boom", "null")).await;
    assert!(matches!(raised, Err(CallError::Actor(_))));
    let unknown = rt
        .invoke(Call::new(
            ActorId::new("nope", "x"),
            "m",
            Payload::default(),
        ))
        .await;
    assert!(unknown.is_err());

    let mut text = String::new();
    rt.encode_metrics(&mut text)
        .map_err(|e| CallError::Internal(e.to_string()))?;
    let ok = r#"troupe_calls_total{actor_type="box",kind="call",result="ok"}"#;
    let raised = r#"troupe_calls_total{actor_type="box",kind="call",result="actor_error"}"#;
    assert_eq!(sample(&text, ok), 3.0, "{text}");
    assert_eq!(sample(&text, raised), 1.0, "{text}");
    assert_eq!(
        sample(
            &text,
            r#"troupe_turn_duration_seconds_count{actor_type="box",kind="call"}"#
        ),
        4.0
    );
    assert_eq!(
        sample(&text, r#"troupe_activations_total{actor_type="box"}"#),
        3.0
    );
    assert_eq!(
        sample(&text, r#"troupe_actors_active{actor_type="box"}"#),
        3.0
    );
    assert_eq!(
        sample(
            &text,
            r#"troupe_calls_total{actor_type="nope",kind="call",result="not_found"}"#
        ),
        1.0,
        "{text}"
    );
    assert!(text.ends_with("# EOF\n"));

    let off = runtime(RuntimeConfig::default())?;
    let mut empty = String::new();
    off.encode_metrics(&mut empty)
        .map_err(|e| CallError::Internal(e.to_string()))?;
    assert!(empty.is_empty(), "no metrics when they are off");
    Ok(())
}
