//! Distributed tracing through the daemon: W3C trace context from a client's
//! headers to the app's `Turn` and on into a nested call, and the spans the
//! daemon exports over OTLP/gRPC (received here by a small collector).

use anyhow::{bail, Context};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use tokio::task::JoinHandle;
use troupe_tests::otlp::{
    invoke_traced, parse_traceparent, traceparent, Collector, Exported, CLIENT_SPAN, CLIENT_TRACE,
};
use troupe_tests::{actor, pb, within, Daemon, RawApp, WAIT};

/// The span the app's handler for A would open, as an SDK does.
const APP_SPAN: &str = "b7ad6b7169203331";

fn svc() -> Vec<pb::ActorTypeSpec> {
    vec![pb::ActorTypeSpec {
        name: "svc".into(),
        ..Default::default()
    }]
}

async fn joined<T>(what: &str, task: JoinHandle<Result<T, tonic::Status>>) -> anyhow::Result<T> {
    Ok(within(WAIT, what, task).await???)
}

fn one<'a>(spans: &'a [Exported], name: &str, actor_id: &str) -> anyhow::Result<&'a Exported> {
    let found: Vec<_> = spans
        .iter()
        .filter(|s| s.name == name && s.attr("troupe.actor.id") == actor_id)
        .collect();
    match found.as_slice() {
        [s] => Ok(s),
        _ => bail!(
            "expected one {name} span for actor {actor_id}, got {}: {spans:#?}",
            found.len()
        ),
    }
}

fn has(spans: &[Exported], name: &str, actor_id: &str) -> bool {
    spans
        .iter()
        .any(|s| s.name == name && s.attr("troupe.actor.id") == actor_id)
}

// ---------------------------------------------------------------- tests

/// Client -> daemon -> app (A) -> nested call -> daemon -> app (B): every
/// span the daemon exports is in the client's trace, and each one's parent
/// is the span that caused it, across the app in the middle.
#[tokio::test]
async fn one_trace_runs_from_the_client_through_the_app_into_a_nested_call() -> anyhow::Result<()> {
    let collector = Collector::start().await?;
    let dir = tempfile::tempdir()?;
    let endpoint = collector.endpoint();
    let daemon = Daemon::start_with_env(
        dir.path(),
        &["--otlp-endpoint", &endpoint],
        &[("OTEL_BSP_SCHEDULE_DELAY", "50")],
    )
    .await?;
    let (mut app, _) = RawApp::register(daemon.addr, svc()).await?;
    let client = daemon.client().await?;

    let outer = invoke_traced(
        &client,
        "svc",
        "a",
        &traceparent(CLIENT_TRACE, CLIENT_SPAN),
        "vendor=opaque",
    )?;
    let turn_a = app.next_turn().await?;
    let (trace_a, turn_a_span) = parse_traceparent(&turn_a.traceparent)?;
    assert_eq!(trace_a, CLIENT_TRACE, "A's turn is in the client's trace");
    assert_ne!(turn_a_span, CLIENT_SPAN, "A's turn names the daemon's span");
    assert_eq!(turn_a.tracestate, "vendor=opaque");

    // The app's handler for A calls B, passing its own span as the parent.
    let nested = invoke_traced(&client, "svc", "b", &traceparent(&trace_a, APP_SPAN), "")?;
    let turn_b = app.next_turn().await?;
    let (trace_b, turn_b_span) = parse_traceparent(&turn_b.traceparent)?;
    assert_eq!(trace_b, CLIENT_TRACE, "B's turn is in the same trace");
    app.reply(turn_b.call_id, "\"b done\"")?;
    joined("the nested call", nested).await?;
    app.reply(turn_a.call_id, "\"a done\"")?;
    joined("the outer call", outer).await?;

    let spans = collector
        .wait_for("the call and turn spans of A and B", |s| {
            has(s, "troupe.call", "a")
                && has(s, "troupe.turn", "a")
                && has(s, "troupe.call", "b")
                && has(s, "troupe.turn", "b")
        })
        .await?;

    let call_a = one(&spans, "troupe.call", "a")?;
    let turn_a_exported = one(&spans, "troupe.turn", "a")?;
    let call_b = one(&spans, "troupe.call", "b")?;
    let turn_b_exported = one(&spans, "troupe.turn", "b")?;
    for s in [call_a, turn_a_exported, call_b, turn_b_exported] {
        assert_eq!(s.trace_id, CLIENT_TRACE, "{s:#?}");
        assert_eq!(
            s.resource.get("service.name").map(String::as_str),
            Some("troupe")
        );
    }
    assert_eq!(
        call_a.parent_span_id, CLIENT_SPAN,
        "call A's parent: the client"
    );
    assert_eq!(turn_a_exported.parent_span_id, call_a.span_id);
    assert_eq!(
        turn_a_exported.span_id, turn_a_span,
        "Turn.traceparent names A's turn"
    );
    assert_eq!(
        call_b.parent_span_id, APP_SPAN,
        "call B's parent: the app's span"
    );
    assert_eq!(turn_b_exported.parent_span_id, call_b.span_id);
    assert_eq!(
        turn_b_exported.span_id, turn_b_span,
        "Turn.traceparent names B's turn"
    );

    assert_eq!(
        turn_a_exported.attr("troupe.actor.type"),
        "svc",
        "{turn_a_exported:#?}"
    );
    assert_eq!(turn_a_exported.attr("troupe.method"), "work");
    assert_eq!(call_a.kind, SpanKind::Server as i32);
    assert_eq!(call_a.attr("troupe.actor.type"), "svc");
    assert_eq!(call_a.attr("troupe.method"), "work");
    assert_eq!(call_a.attr("rpc.method"), "Invoke");
    assert_eq!(call_a.attr("rpc.grpc.status_code"), "0");
    assert_ne!(call_a.status, StatusCode::Error as i32);
    Ok(())
}

/// An actor exception marks the call span as an error and records the code.
#[tokio::test]
async fn a_failed_call_is_an_error_span_with_its_grpc_code() -> anyhow::Result<()> {
    let collector = Collector::start().await?;
    let dir = tempfile::tempdir()?;
    let endpoint = collector.endpoint();
    let daemon = Daemon::start_with_env(
        dir.path(),
        &["--otlp-endpoint", &endpoint],
        &[("OTEL_BSP_SCHEDULE_DELAY", "50")],
    )
    .await?;
    let (mut app, _) = RawApp::register(daemon.addr, svc()).await?;
    let client = daemon.client().await?;

    let call = invoke_traced(
        &client,
        "svc",
        "f",
        &traceparent(CLIENT_TRACE, CLIENT_SPAN),
        "",
    )?;
    let turn = app.next_turn().await?;
    app.send(pb::AppMessage {
        kind: Some(pb::app_message::Kind::TurnResult(pb::TurnResult {
            call_id: turn.call_id,
            outcome: Some(pb::turn_result::Outcome::Error(pb::ActorFailure {
                r#type: "ValueError".into(),
                message: "boom".into(),
                details: String::new(),
                ..Default::default()
            })),
            changes: Vec::new(),
            ..Default::default()
        })),
    })?;
    let failed = within(WAIT, "the failing call", call).await??;
    assert_eq!(
        failed.err().map(|s| s.code()),
        Some(tonic::Code::Unknown),
        "an actor exception is UNKNOWN"
    );
    let spans = collector
        .wait_for("the failed call's span", |s| has(s, "troupe.call", "f"))
        .await?;
    let span = one(&spans, "troupe.call", "f")?;
    assert_eq!(span.status, StatusCode::Error as i32, "{span:#?}");
    assert_eq!(span.attr("rpc.grpc.status_code"), "2");
    Ok(())
}

/// A reminder firing starts a trace of its own; the app gets its turn's
/// context.
#[tokio::test]
async fn a_reminder_firing_is_traced_and_its_turn_carries_the_context() -> anyhow::Result<()> {
    let collector = Collector::start().await?;
    let dir = tempfile::tempdir()?;
    let endpoint = collector.endpoint();
    let daemon = Daemon::start_with_env(
        dir.path(),
        &["--otlp-endpoint", &endpoint],
        &[("OTEL_BSP_SCHEDULE_DELAY", "50")],
    )
    .await?;
    let (mut app, _) = RawApp::register(daemon.addr, svc()).await?;
    let mut client = daemon.client().await?;
    client
        .0
        .set_reminder(pb::SetReminderRequest {
            actor: Some(actor("svc", "r")),
            name: "ping".into(),
            ..Default::default()
        })
        .await?;
    let turn = app.next_turn().await?;
    assert_eq!(turn.kind, pb::TurnKind::Reminder as i32);
    let (trace, turn_span) = parse_traceparent(&turn.traceparent)?;
    app.reply(turn.call_id, "null")?;

    let spans = collector
        .wait_for("the reminder and its turn", |s| {
            s.iter().any(|x| x.name == "troupe.reminder") && has(s, "troupe.turn", "r")
        })
        .await?;
    let turn_exported = one(&spans, "troupe.turn", "r")?;
    let firing = spans
        .iter()
        .find(|s| s.name == "troupe.reminder")
        .context("no troupe.reminder span")?;
    assert_eq!(turn_exported.span_id, turn_span);
    assert_eq!(turn_exported.trace_id, trace);
    assert_eq!(turn_exported.parent_span_id, firing.span_id);
    assert_eq!(firing.trace_id, trace);
    assert_eq!(firing.parent_span_id, "", "a firing starts its own trace");
    Ok(())
}

/// Spans still buffered when SIGTERM comes are exported before the exit.
#[tokio::test]
async fn spans_buffered_at_sigterm_are_exported_before_exit() -> anyhow::Result<()> {
    let collector = Collector::start().await?;
    let dir = tempfile::tempdir()?;
    let endpoint = collector.endpoint();
    // A batch delay far beyond the test: only the shutdown flush can export.
    let mut daemon = Daemon::start_with_env(
        dir.path(),
        &["--otlp-endpoint", &endpoint],
        &[("OTEL_BSP_SCHEDULE_DELAY", "600000")],
    )
    .await?;
    let (mut app, _) = RawApp::register(daemon.addr, svc()).await?;
    let client = daemon.client().await?;
    let call = invoke_traced(
        &client,
        "svc",
        "s",
        &traceparent(CLIENT_TRACE, CLIENT_SPAN),
        "",
    )?;
    let turn = app.next_turn().await?;
    app.reply(turn.call_id, "1")?;
    joined("the call", call).await?;

    // Answer the shutdown's deactivation so the daemon can stop.
    let stopping = tokio::spawn(async move {
        loop {
            match app.recv().await {
                Ok(Some(pb::DaemonMessage {
                    kind: Some(pb::daemon_message::Kind::Deactivate(d)),
                })) => {
                    let _ = app.send(pb::AppMessage {
                        kind: Some(pb::app_message::Kind::Deactivated(pb::DeactivateResult {
                            call_id: d.call_id,
                            changes: Vec::new(),
                        })),
                    });
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return,
            }
        }
    });
    let status = daemon.terminate().await?;
    assert!(status.success(), "exit {status}: {}", daemon.log());
    stopping.abort();
    let spans = collector
        .wait_for("the spans flushed at shutdown", |s| {
            has(s, "troupe.call", "s") && has(s, "troupe.turn", "s")
        })
        .await?;
    assert!(
        spans.iter().any(|s| s.name == "troupe.deactivate"),
        "the shutdown's own deactivation is exported too: {spans:#?}"
    );
    Ok(())
}

/// Without export the daemon passes the caller's context to the app as it
/// came, and an untraced call carries none.
#[tokio::test]
async fn without_export_the_callers_context_passes_through_unchanged() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &[]).await?;
    let (mut app, _) = RawApp::register(daemon.addr, svc()).await?;
    let client = daemon.client().await?;

    let sent = traceparent(CLIENT_TRACE, CLIENT_SPAN);
    let call = invoke_traced(&client, "svc", "p", &sent, "a=1,b=2")?;
    let turn = app.next_turn().await?;
    assert_eq!(turn.traceparent, sent);
    assert_eq!(turn.tracestate, "a=1,b=2");
    app.reply(turn.call_id, "1")?;
    joined("the traced call", call).await?;

    let call = invoke_traced(&client, "svc", "p", "", "")?;
    let turn = app.next_turn().await?;
    assert_eq!(turn.traceparent, "");
    assert_eq!(turn.tracestate, "");
    app.reply(turn.call_id, "2")?;
    joined("the untraced call", call).await?;
    Ok(())
}

/// A collector address that is not an http:// URL stops the start with a
/// message that says what to give.
#[tokio::test]
async fn a_bad_otlp_endpoint_is_a_startup_error() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let Err(e) = Daemon::start(dir.path(), &["--otlp-endpoint", "collector:4317"]).await else {
        bail!("the daemon started with an OTLP endpoint that is not a URL");
    };
    let text = format!("{e:#}");
    assert!(text.contains("--otlp-endpoint"), "{text}");
    assert!(text.contains("http://HOST:PORT"), "{text}");
    Ok(())
}
