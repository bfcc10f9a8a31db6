//! Logs, and traces for OTLP export.
//!
//! Logs go to stderr, filtered by `RUST_LOG`. The runtime makes its spans for
//! export under [`TRACE_TARGET`]; only the export layer enables that target,
//! so without `--otlp-endpoint` no subscriber is interested in those
//! callsites and each costs one disabled-callsite check.
//!
//! Trace context arrives as W3C `traceparent` / `tracestate` request headers
//! ([`incoming_call`]) and leaves on every `Turn` ([`turn_context`]), so a
//! trace runs client -> daemon -> app -> nested call.

use std::time::Duration;

use anyhow::Context as _;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{Status as OtelStatus, TraceContextExt, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use parking_lot::Mutex;
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};
use tracing::field::Empty;
use tracing::{warn, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::{Directive, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};
use troupe_runtime::{ActorId, CallTrace, TRACE_TARGET};

use crate::config::TraceExport;

/// The exporting provider, kept so a graceful stop can flush it.
static PROVIDER: Mutex<Option<SdkTracerProvider>> = Mutex::new(None);

/// How long a graceful stop waits for the last spans to reach the collector.
const EXPORT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One readable line per event (colour on a terminal).
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Installs the global subscriber: logs in `format` at `default_filter`
/// unless `RUST_LOG` says otherwise, and trace export when `export` is given.
///
/// With export, this must run inside the tokio runtime: the exporter's
/// channel and the batch processor's task live on it.
pub fn init(
    default_filter: &str,
    format: LogFormat,
    export: Option<&TraceExport>,
) -> anyhow::Result<()> {
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = log_filter(rust_log.as_deref(), default_filter)?;
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    // Boxed: the two formats are different layer types.
    let fmt = match format {
        LogFormat::Text => fmt
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => fmt.json().with_filter(filter).boxed(),
    };
    let registry = tracing_subscriber::registry().with(fmt);
    match export {
        None => registry.try_init(),
        Some(export) => registry.with(otlp_layer(export)?).try_init(),
    }
    .context("installing the log subscriber")?;
    if let Some(export) = export {
        tracing::info!(endpoint = %export.endpoint, "exporting traces over OTLP/gRPC");
    }
    Ok(())
}

/// The log filter: `RUST_LOG` when it parses, else `default`; never the
/// export target, so `RUST_LOG=trace` does not turn on export spans.
fn log_filter(rust_log: Option<&str>, default: &str) -> anyhow::Result<EnvFilter> {
    let filter = rust_log
        .and_then(|s| EnvFilter::try_new(s).ok())
        .unwrap_or_else(|| EnvFilter::new(default));
    let off: Directive = format!("{TRACE_TARGET}=off")
        .parse()
        .context("the directive that keeps export spans out of the logs")?;
    Ok(filter.add_directive(off))
}

fn otlp_layer<S>(export: &TraceExport) -> anyhow::Result<impl Layer<S>>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(export.endpoint.clone())
        .build()
        .with_context(|| {
            format!(
                "cannot set up OTLP export to {}; check --otlp-endpoint",
                export.endpoint
            )
        })?;
    // The SDK's default batch processor exports from a thread of its own,
    // outside any tokio runtime, where the tonic exporter cannot run; this
    // one is a task on ours. Its batch settings come from OTEL_BSP_*.
    let processor =
        BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio).build();
    let mut resource = Resource::builder().with_attributes([
        KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        KeyValue::new("troupe.node", export.node.clone()),
    ]);
    // OTEL_SERVICE_NAME, when set, names the service instead.
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("troupe");
    }
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("troupe");
    *PROVIDER.lock() = Some(provider);
    Ok(tracing_opentelemetry::layer()
        .with_tracer(tracer)
        // Attributes come from the spans' own fields; source locations,
        // threads and busy/idle timings would only add bytes to every span.
        .with_location(false)
        .with_threads(false)
        .with_level(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_filter(Targets::new().with_target(TRACE_TARGET, tracing::Level::INFO)))
}

/// Exports the spans still buffered and stops the exporter. Called once the
/// runtime has stopped, so the spans of the shutdown itself are included.
pub async fn shutdown() {
    let Some(provider) = PROVIDER.lock().take() else {
        return;
    };
    // `shutdown` blocks until the batch task, which runs on this runtime,
    // has exported: block a blocking-pool thread, not a worker.
    let done = tokio::task::spawn_blocking(move || provider.shutdown());
    match tokio::time::timeout(EXPORT_SHUTDOWN_TIMEOUT, done).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => warn!(error = %e, "the last spans could not be exported"),
        Ok(Err(e)) => warn!(error = %e, "the trace exporter's shutdown failed"),
        Err(_) => warn!(
            timeout = ?EXPORT_SHUTDOWN_TIMEOUT,
            "the collector did not take the last spans in time; they are lost"
        ),
    }
}

// === trace context ===

const TRACEPARENT: &str = "traceparent";
const TRACESTATE: &str = "tracestate";

/// A call accepted from a client: its `troupe.call` span, and the trace to
/// hand to the runtime with the call.
#[derive(Debug)]
pub struct IncomingCall {
    span: Span,
    trace: Option<CallTrace>,
}

/// Opens the `troupe.call` span for an `ActorClient` RPC, as a child of the
/// caller's context from its `traceparent` / `tracestate` headers.
///
/// The trace is `None` (the call's `extra` stays unallocated) unless the
/// span is exported or the caller sent a `traceparent` to pass on.
pub fn incoming_call(
    headers: &MetadataMap,
    rpc: &'static str,
    actor: &ActorId,
    method: &str,
) -> IncomingCall {
    let span = tracing::info_span!(
        target: TRACE_TARGET,
        // The caller's context, if any, is the parent; never whatever span
        // this thread happens to be in.
        parent: None,
        "troupe.call",
        "otel.kind" = "server",
        "rpc.system" = "grpc",
        "rpc.service" = "troupe.v1.ActorClient",
        "rpc.method" = rpc,
        "troupe.actor.type" = &*actor.ty,
        "troupe.actor.id" = &*actor.id,
        "troupe.method" = method,
        "troupe.turn.kind" = "call",
        "rpc.grpc.status_code" = Empty,
    );
    let traceparent = header(headers, TRACEPARENT);
    if span.is_disabled() && traceparent.is_none() {
        return IncomingCall { span, trace: None };
    }
    if !span.is_disabled() && traceparent.is_some() {
        let parent = TraceContextPropagator::new().extract(&Headers(headers));
        // Fails only when no export layer sees the span, which was ruled
        // out just above; an unusable traceparent leaves a root span.
        let _ = span.set_parent(parent);
    }
    let trace = CallTrace {
        span: span.clone(),
        traceparent: traceparent.unwrap_or_default().to_owned(),
        tracestate: header(headers, TRACESTATE).unwrap_or_default().to_owned(),
    };
    IncomingCall {
        span,
        trace: Some(trace),
    }
}

impl IncomingCall {
    /// The trace for the call's `extra`.
    pub fn take_trace(&mut self) -> Option<CallTrace> {
        self.trace.take()
    }

    /// Records how the RPC ended. Following the OpenTelemetry conventions
    /// for gRPC servers, codes that blame the caller (bad argument, not
    /// found, overloaded) leave the status unset; actor exceptions (UNKNOWN)
    /// and daemon failures mark the span as an error.
    pub fn finish<T>(self, result: &Result<T, Status>) {
        if self.span.is_disabled() {
            return;
        }
        let code = match result {
            Ok(_) => Code::Ok,
            Err(status) => status.code(),
        };
        self.span.record("rpc.grpc.status_code", code as i64);
        if let Err(status) = result {
            if is_server_error(code) {
                self.span
                    .set_status(OtelStatus::error(status.message().to_owned()));
            }
        }
    }
}

fn is_server_error(code: Code) -> bool {
    matches!(
        code,
        Code::Unknown
            | Code::DeadlineExceeded
            | Code::Unimplemented
            | Code::Internal
            | Code::Unavailable
            | Code::DataLoss
    )
}

fn header<'a>(headers: &'a MetadataMap, name: &str) -> Option<&'a str> {
    headers.get(name)?.to_str().ok().filter(|v| !v.is_empty())
}

struct Headers<'a>(&'a MetadataMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        header(self.0, key)
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|k| match k {
                tonic::metadata::KeyRef::Ascii(k) => Some(k.as_str()),
                tonic::metadata::KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

/// The W3C trace context to send with a turn: the turn span's own when it is
/// exported, else the caller's as it came (so an app's trace still joins up
/// when this daemon exports nothing). Empty strings: not traced.
pub fn turn_context(trace: Option<CallTrace>) -> (String, String) {
    let Some(trace) = trace else {
        return (String::new(), String::new());
    };
    if !trace.span.is_disabled() {
        let cx = trace.span.context();
        if cx.span().span_context().is_valid() {
            let mut carrier = Carrier::default();
            TraceContextPropagator::new().inject_context(&cx, &mut carrier);
            return (carrier.traceparent, carrier.tracestate);
        }
    }
    (trace.traceparent, trace.tracestate)
}

#[derive(Default)]
struct Carrier {
    traceparent: String,
    tracestate: String,
}

impl Injector for Carrier {
    fn set(&mut self, key: &str, value: String) {
        match key {
            TRACEPARENT => self.traceparent = value,
            TRACESTATE => self.tracestate = value,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_export_the_runtime_spans_are_disabled_whatever_rust_log_says() -> anyhow::Result<()>
    {
        for rust_log in [
            None,
            Some("trace"),
            Some("troupe=trace"),
            Some("info,troupe::otel=trace"),
        ] {
            let fmt = tracing_subscriber::fmt::layer()
                .with_writer(std::io::sink)
                .with_filter(log_filter(rust_log, "info")?);
            let subscriber = tracing_subscriber::registry().with(fmt);
            tracing::subscriber::with_default(subscriber, || {
                let span = tracing::info_span!(target: TRACE_TARGET, "troupe.turn");
                assert!(span.is_disabled(), "RUST_LOG={rust_log:?}");
                // The filter is consulted: ordinary spans pass it.
                let span = tracing::error_span!(target: "troupe::server", "serve");
                assert!(!span.is_disabled(), "RUST_LOG={rust_log:?}");
            });
        }
        Ok(())
    }

    #[test]
    fn untraced_calls_carry_no_trace_and_traceparents_pass_through() {
        let actor = ActorId::new("counter", "c1");
        let mut headers = MetadataMap::new();
        let mut call = incoming_call(&headers, "Invoke", &actor, "incr");
        assert!(call.take_trace().is_none());

        let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        headers.insert(
            TRACEPARENT,
            tonic::metadata::MetadataValue::from_static(traceparent),
        );
        headers.insert(
            TRACESTATE,
            tonic::metadata::MetadataValue::from_static("k=v"),
        );
        let mut call = incoming_call(&headers, "Invoke", &actor, "incr");
        let trace = call.take_trace();
        assert_eq!(
            turn_context(trace),
            (traceparent.to_owned(), "k=v".to_owned())
        );
    }
}
