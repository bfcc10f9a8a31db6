//! Distributed tracing through the daemon: W3C trace context from a client's
//! headers to the app's `Turn` and on into a nested call, and the spans the
//! daemon exports over OTLP/gRPC (received here by a small collector).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::metadata::MetadataValue;
use tonic::transport::server::TcpIncoming;
use troupe_tests::{actor, json_payload, pb, within, Client, Daemon, RawApp, WAIT};

// ---------------------------------------------------------------- collector

/// One exported span, flattened.
#[derive(Debug, Clone)]
struct Exported {
    name: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    kind: i32,
    status: i32,
    attributes: HashMap<String, String>,
    resource: HashMap<String, String>,
}

impl Exported {
    fn attr(&self, key: &str) -> &str {
        self.attributes.get(key).map_or("", String::as_str)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn flatten(attributes: &[KeyValue]) -> HashMap<String, String> {
    attributes
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => s.clone(),
                Some(any_value::Value::IntValue(i)) => i.to_string(),
                Some(any_value::Value::BoolValue(b)) => b.to_string(),
                Some(any_value::Value::DoubleValue(d)) => d.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

/// An OTLP/gRPC trace receiver on 127.0.0.1; every span it gets lands in
/// a watch channel the test waits on.
struct Collector {
    addr: SocketAddr,
    spans: watch::Sender<Vec<Exported>>,
    task: JoinHandle<()>,
}

#[derive(Clone)]
struct Receiver(Arc<watch::Sender<Vec<Exported>>>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut got = Vec::new();
        for rs in request.into_inner().resource_spans {
            let resource = rs
                .resource
                .as_ref()
                .map(|r| flatten(&r.attributes))
                .unwrap_or_default();
            for ss in rs.scope_spans {
                for s in ss.spans {
                    got.push(Exported {
                        name: s.name.clone(),
                        trace_id: hex(&s.trace_id),
                        span_id: hex(&s.span_id),
                        parent_span_id: hex(&s.parent_span_id),
                        kind: s.kind,
                        status: s.status.as_ref().map_or(0, |st| st.code),
                        attributes: flatten(&s.attributes),
                        resource: resource.clone(),
                    });
                }
            }
        }
        self.0.send_modify(|all| all.extend(got));
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

impl Collector {
    async fn start() -> anyhow::Result<Collector> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let spans = watch::Sender::new(Vec::new());
        let receiver = Receiver(Arc::new(spans.clone()));
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(receiver))
                .serve_with_incoming(TcpIncoming::from(listener))
                .await;
        });
        Ok(Collector { addr, spans, task })
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Waits (bounded) until the spans received satisfy `pred`.
    async fn wait_for(
        &self,
        what: &str,
        mut pred: impl FnMut(&[Exported]) -> bool,
    ) -> anyhow::Result<Vec<Exported>> {
        let mut rx = self.spans.subscribe();
        let seen = within(WAIT, what, rx.wait_for(|s| pred(s))).await?;
        let spans = seen.context("the collector stopped")?.clone();
        Ok(spans)
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------- helpers

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";
/// The span the app's handler for A would open, as an SDK does.
const APP_SPAN: &str = "b7ad6b7169203331";

fn traceparent(trace: &str, span: &str) -> String {
    format!("00-{trace}-{span}-01")
}

/// (trace id, span id) of a well-formed sampled `traceparent`.
fn parse_traceparent(tp: &str) -> anyhow::Result<(String, String)> {
    let parts: Vec<&str> = tp.split('-').collect();
    match parts.as_slice() {
        ["00", trace, span, flags] if trace.len() == 32 && span.len() == 16 && flags.len() == 2 => {
            Ok(((*trace).to_owned(), (*span).to_owned()))
        }
        _ => bail!("not a W3C traceparent: {tp:?}"),
    }
}

fn svc() -> Vec<pb::ActorTypeSpec> {
    vec![pb::ActorTypeSpec {
        name: "svc".into(),
        ..Default::default()
    }]
}

/// Invokes `svc/id` with the given trace headers, in its own task (the test
/// plays the app meanwhile).
fn invoke_traced(
    client: &Client,
    id: &str,
    traceparent: &str,
    tracestate: &str,
) -> anyhow::Result<JoinHandle<Result<pb::InvokeResponse, tonic::Status>>> {
    let mut request = tonic::Request::new(pb::InvokeRequest {
        actor: Some(actor("svc", id)),
        method: "work".into(),
        payload: Some(json_payload("{}")),
        ..Default::default()
    });
    request.set_timeout(Duration::from_secs(30));
    if !traceparent.is_empty() {
        request
            .metadata_mut()
            .insert("traceparent", MetadataValue::try_from(traceparent)?);
    }
    if !tracestate.is_empty() {
        request
            .metadata_mut()
            .insert("tracestate", MetadataValue::try_from(tracestate)?);
    }
    let mut client = client.clone();
    Ok(tokio::spawn(async move {
        client.0.invoke(request).await.map(|r| r.into_inner())
    }))
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
    let nested = invoke_traced(&client, "b", &traceparent(&trace_a, APP_SPAN), "")?;
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

    let call = invoke_traced(&client, "f", &traceparent(CLIENT_TRACE, CLIENT_SPAN), "")?;
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
    let call = invoke_traced(&client, "s", &traceparent(CLIENT_TRACE, CLIENT_SPAN), "")?;
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
    let call = invoke_traced(&client, "p", &sent, "a=1,b=2")?;
    let turn = app.next_turn().await?;
    assert_eq!(turn.traceparent, sent);
    assert_eq!(turn.tracestate, "a=1,b=2");
    app.reply(turn.call_id, "1")?;
    joined("the traced call", call).await?;

    let call = invoke_traced(&client, "p", "", "")?;
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
