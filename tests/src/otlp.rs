//! Distributed tracing as the tests see it: an OTLP/gRPC collector the
//! daemon exports spans to, W3C `traceparent` values, and calls that carry
//! them.

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
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::metadata::MetadataValue;
use tonic::transport::server::TcpIncoming;

use crate::{actor, json_payload, pb, within, Client, WAIT};

/// One exported span, flattened.
#[derive(Debug, Clone)]
pub struct Exported {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub kind: i32,
    pub status: i32,
    pub attributes: HashMap<String, String>,
    pub resource: HashMap<String, String>,
}

impl Exported {
    pub fn attr(&self, key: &str) -> &str {
        self.attributes.get(key).map_or("", String::as_str)
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn flatten(attributes: &[KeyValue]) -> HashMap<String, String> {
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
#[derive(Debug)]
pub struct Collector {
    addr: SocketAddr,
    spans: watch::Sender<Vec<Exported>>,
    task: JoinHandle<()>,
}

#[derive(Debug, Clone)]
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
    pub async fn start() -> anyhow::Result<Collector> {
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

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Waits (bounded) until the spans received satisfy `pred`.
    pub async fn wait_for(
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

pub const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
pub const CLIENT_SPAN: &str = "00f067aa0ba902b7";
pub fn traceparent(trace: &str, span: &str) -> String {
    format!("00-{trace}-{span}-01")
}

/// (trace id, span id) of a well-formed sampled `traceparent`.
pub fn parse_traceparent(tp: &str) -> anyhow::Result<(String, String)> {
    let parts: Vec<&str> = tp.split('-').collect();
    match parts.as_slice() {
        ["00", trace, span, flags] if trace.len() == 32 && span.len() == 16 && flags.len() == 2 => {
            Ok(((*trace).to_owned(), (*span).to_owned()))
        }
        _ => bail!("not a W3C traceparent: {tp:?}"),
    }
}

/// Invokes `ty/id`'s method `work` with the given trace headers, in its own
/// task (the test plays the app meanwhile).
pub fn invoke_traced(
    client: &Client,
    ty: &str,
    id: &str,
    traceparent: &str,
    tracestate: &str,
) -> anyhow::Result<JoinHandle<Result<pb::InvokeResponse, tonic::Status>>> {
    let mut request = tonic::Request::new(pb::InvokeRequest {
        actor: Some(actor(ty, id)),
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
