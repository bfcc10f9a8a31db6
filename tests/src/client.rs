//! A client of the daemon's API with the helpers tests use most.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use tonic::transport::Channel;
use tonic::Status;

use crate::*;

/// An `ActorClient` with JSON helpers. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Client(pub pb::actor_client_client::ActorClientClient<Channel>);

pub fn actor(ty: &str, id: &str) -> pb::ActorRef {
    pb::ActorRef {
        r#type: ty.to_owned(),
        id: id.to_owned(),
    }
}

/// A JSON string of `len` bytes (at least 2), quotes included: a payload
/// of an exact size.
pub fn json_string(len: usize) -> Vec<u8> {
    let mut data = vec![b'x'; len.max(2)];
    data[0] = b'"';
    if let Some(last) = data.last_mut() {
        *last = b'"';
    }
    data
}

pub fn json_payload(data: impl Into<Bytes>) -> pb::Payload {
    pb::Payload {
        data: data.into(),
        content_type: pb::ContentType::Json as i32,
    }
}

impl Client {
    /// Invokes with a raw payload; the status on failure.
    pub async fn invoke_raw(
        &mut self,
        ty: &str,
        id: &str,
        method: &str,
        data: impl Into<Bytes>,
    ) -> Result<Bytes, Status> {
        let mut request = tonic::Request::new(pb::InvokeRequest {
            actor: Some(actor(ty, id)),
            method: method.to_owned(),
            payload: Some(json_payload(data)),
            ..Default::default()
        });
        request.set_timeout(Duration::from_secs(30));
        let reply = self.0.invoke(request).await?.into_inner();
        Ok(reply.payload.map(|p| p.data).unwrap_or_default())
    }

    /// Invokes with idempotency key `key`; the status on failure.
    pub async fn invoke_keyed(
        &mut self,
        ty: &str,
        id: &str,
        method: &str,
        data: &str,
        key: &str,
    ) -> Result<Bytes, Status> {
        let mut request = tonic::Request::new(pb::InvokeRequest {
            actor: Some(actor(ty, id)),
            method: method.to_owned(),
            payload: Some(json_payload(data.to_owned())),
            idempotency_key: key.to_owned(),
            ..Default::default()
        });
        request.set_timeout(Duration::from_secs(30));
        let reply = self.0.invoke(request).await?.into_inner();
        Ok(reply.payload.map(|p| p.data).unwrap_or_default())
    }

    /// Invokes with a JSON payload and parses the JSON reply.
    pub async fn invoke(
        &mut self,
        ty: &str,
        id: &str,
        method: &str,
        data: &str,
    ) -> anyhow::Result<serde_json::Value> {
        let reply = within(
            WAIT,
            "an invoke",
            self.invoke_raw(ty, id, method, data.to_owned()),
        )
        .await?
        .with_context(|| format!("invoking {ty}/{id}.{method}"))?;
        Ok(serde_json::from_slice(&reply)?)
    }

    /// `counter.incr(by)`: the new count.
    pub async fn incr(&mut self, ty: &str, id: &str, by: i64) -> anyhow::Result<i64> {
        let data = serde_json::json!({"kwargs": {"by": by}}).to_string();
        let v = self.invoke(ty, id, "incr", &data).await?;
        v.as_i64().with_context(|| format!("incr replied {v}"))
    }

    /// `counter.incr_publish(by)`: publishes the new count, then
    /// `{"after": count}`; the new count.
    pub async fn incr_publish(&mut self, ty: &str, id: &str, by: i64) -> anyhow::Result<i64> {
        let data = serde_json::json!({"kwargs": {"by": by}}).to_string();
        let v = self.invoke(ty, id, "incr_publish", &data).await?;
        v.as_i64()
            .with_context(|| format!("incr_publish replied {v}"))
    }

    /// GetState: (entries, active).
    pub async fn state(
        &mut self,
        ty: &str,
        id: &str,
    ) -> anyhow::Result<(HashMap<String, Bytes>, bool)> {
        let reply = within(
            WAIT,
            "GetState",
            self.0.get_state(pb::GetStateRequest {
                actor: Some(actor(ty, id)),
                keys: Vec::new(),
            }),
        )
        .await??
        .into_inner();
        Ok((reply.entries.into_iter().collect(), reply.active))
    }

    /// The "count" key from GetState as a number (None if unset).
    pub async fn stored_count(&mut self, ty: &str, id: &str) -> anyhow::Result<Option<i64>> {
        let (entries, _) = self.state(ty, id).await?;
        match entries.get("count") {
            None => Ok(None),
            Some(v) => Ok(Some(
                serde_json::from_slice::<i64>(v)
                    .with_context(|| format!("count is not a number: {v:?}"))?,
            )),
        }
    }
}

/// An actor's events as a watch streams them (`ActorClient.Watch`).
pub type Events = tonic::Streaming<pb::ActorEvent>;

impl Client {
    /// Watches a counter (`after`: a cursor, or "" for from now on); the
    /// daemon watches once this returns.
    pub async fn watch_counter(&mut self, id: &str, after: &str) -> Result<Events, Status> {
        let request = pb::WatchRequest {
            actor: Some(actor("counter", id)),
            after: after.to_owned(),
        };
        Ok(self.0.watch(request).await?.into_inner())
    }

    /// Watches every actor of `ty` (`after`: a type watch's cursor, or ""
    /// for from now on); every daemon hosting it watches once this returns.
    pub async fn watch_type(&mut self, ty: &str, after: &str) -> Result<Events, Status> {
        self.watch_type_ids(ty, "", after).await
    }

    /// [`Client::watch_type`] of the actors whose id starts with `id_prefix`.
    pub async fn watch_type_ids(
        &mut self,
        ty: &str,
        id_prefix: &str,
        after: &str,
    ) -> Result<Events, Status> {
        let request = pb::WatchTypeRequest {
            r#type: ty.to_owned(),
            after: after.to_owned(),
            id_prefix: id_prefix.to_owned(),
        };
        Ok(self.0.watch_type(request).await?.into_inner())
    }
}

/// The id of the actor that published `event`.
pub fn event_actor(event: &pb::ActorEvent) -> String {
    event
        .actor
        .as_ref()
        .map(|a| a.id.clone())
        .unwrap_or_default()
}

/// The next event of a watch, failing when it fails, ends, or sends none
/// within `limit`.
pub async fn next_event(events: &mut Events, limit: Duration) -> anyhow::Result<pb::ActorEvent> {
    match tokio::time::timeout(limit, events.message()).await {
        Ok(Ok(Some(event))) => Ok(event),
        Ok(Err(status)) => anyhow::bail!("the watch failed: {status}"),
        Ok(Ok(None)) => anyhow::bail!("the watch ended"),
        Err(_) => anyhow::bail!("no event within {limit:?}"),
    }
}

/// An event's payload as text.
pub fn event_text(event: &pb::ActorEvent) -> String {
    event
        .payload
        .as_ref()
        .map(|p| String::from_utf8_lossy(&p.data).into_owned())
        .unwrap_or_default()
}
