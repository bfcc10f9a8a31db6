//! `troupe invoke` and `troupe tell`: the client API from the shell.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Value};
use troupe_proto::v1 as pb;

use super::json_arg::JsonArg;
use super::render::{self, Shown};
use super::{actor_name, connect, emit, emit_json, fail, Exit, Output, Target};
use crate::shell_word::quoted;
use troupe_runtime::input::millis;

fn actor_ref(ty: String, id: String) -> Option<pb::ActorRef> {
    Some(pb::ActorRef { r#type: ty, id })
}

/// The method of an actor that `troupe invoke` or `troupe tell` calls.
#[derive(Debug, Clone, clap::Args)]
pub struct MethodRef {
    /// The actor type, as its app registered it.
    #[arg(value_name = "TYPE")]
    pub actor_type: String,
    /// The actor's id; an actor that is not active is activated.
    pub id: String,
    /// The method to call.
    pub method: String,
}

impl MethodRef {
    fn actor(&self) -> Option<pb::ActorRef> {
        actor_ref(self.actor_type.clone(), self.id.clone())
    }

    /// "counter/c2.incr", or the actor's name alone for an empty method
    /// (which the daemon refuses, naming it).
    fn name(&self) -> String {
        let name = actor_name(&self.actor_type, &self.id);
        if self.method.is_empty() {
            name
        } else {
            format!("{name}.{}", self.method)
        }
    }
}

/// What `troupe invoke` and `troupe tell` send alike, checked before
/// anything is sent.
struct Outgoing {
    payload: Option<pb::Payload>,
    idempotency_key: String,
    key_retention_ms: u64,
    metadata: HashMap<String, String>,
}

/// The arguments of `troupe invoke` and `troupe tell`: `--data` as the
/// SDKs' clients take them, or `--payload` as they travel; the key and the
/// deadline.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CallArgs {
    /// The arguments as JSON: an object is keyword arguments ('{"by": 5}'),
    /// an array positional ones ('[5]'), anything else one positional
    /// argument, as the Python client's `invoke` takes them. @FILE reads
    /// the JSON from FILE, @- from standard input.
    #[arg(long, conflicts_with = "payload")]
    pub data: Option<String>,
    /// The call payload exactly as sent, '{"args": [...], "kwargs": {...}}'
    /// (docs/payloads.md): positional and keyword arguments together.
    /// @FILE reads it from FILE, @- from standard input.
    #[arg(long)]
    pub payload: Option<String>,
    /// Names this call (1 to 256 bytes of printable UTF-8), so that the
    /// command run again with the same key, say by a script that retries,
    /// runs the method once: the daemon answers a key it recorded with the
    /// recorded answer (docs/delivery.md).
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    /// How long you may run the command again with --idempotency-key: the
    /// daemon keeps its answer that long, at least a minute and at most its
    /// own --idempotency-retention; left out, all of that.
    #[arg(long, value_name = "DURATION", requires = "idempotency_key",
          value_parser = crate::duration::flag)]
    pub idempotency_retention: Option<Duration>,
    /// Metadata sent with the call, KEY=VALUE (repeatable; a key given
    /// twice keeps the last value): what the actor's handler reads as
    /// `ctx.metadata` and the app's call filters check, e.g. a tenant or a
    /// request id.
    #[arg(long = "metadata", value_name = "KEY=VALUE", value_parser = metadata_pair)]
    pub metadata: Vec<(String, String)>,
    /// How long to wait for the daemon's answer. It is sent with the call
    /// as its deadline, so the daemon gives up on the call then too; left
    /// out, the daemon's --call-timeout (60s by default) bounds it.
    #[arg(long, value_name = "DURATION", value_parser = crate::duration::flag)]
    pub timeout: Option<Duration>,
}

/// One `--metadata KEY=VALUE`.
fn metadata_pair(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!(
            "{text:?} is not KEY=VALUE; give e.g. --metadata tenant=acme (the value may be empty)"
        )),
    }
}

impl CallArgs {
    /// The JSON call payload to send. Checked here rather than by the
    /// actor: a typo in the shell should not cost a turn, and the message
    /// can show the expected shape.
    fn encode(&self) -> anyhow::Result<String> {
        let (flag, given) = match (&self.data, &self.payload) {
            (Some(data), _) => ("--data", data),
            (None, Some(payload)) => ("--payload", payload),
            (None, None) => return Ok(r#"{"args":[],"kwargs":{}}"#.to_owned()),
        };
        let arg = JsonArg::read(flag, given)?;
        let value = arg.parse(
            flag,
            "pass keyword arguments as an object, e.g. --data '{\"by\": 5}', or positional \
             ones as an array, e.g. --data '[5]' (or @FILE to read the JSON from a file)",
        )?;
        if self.payload.is_some() {
            return Ok(arg.text);
        }
        // The Python client's `invoke(..., params)`: a dict is kwargs, a
        // list args; a lone value is the one argument a shell user means.
        let envelope = match value {
            Value::Object(kwargs) => json!({ "args": [], "kwargs": kwargs }),
            Value::Array(args) => json!({ "args": args, "kwargs": {} }),
            Value::Null => json!({ "args": [], "kwargs": {} }),
            one => json!({ "args": [one], "kwargs": {} }),
        };
        Ok(envelope.to_string())
    }

    /// `key_retention_ms` on the wire: 0 asks for the daemon's whole
    /// retention, so a retention that would round to it is refused.
    fn key_retention_ms(&self) -> anyhow::Result<u64> {
        if self.idempotency_key.as_deref() == Some("") {
            // Sent, it would read as no key at all, and the call as unkeyed.
            return Err(fail(
                Exit::Usage,
                "--idempotency-key is empty; give 1 to 256 bytes of printable UTF-8 naming \
                 the call, or leave it out",
            ));
        }
        let Some(keep) = self.idempotency_retention else {
            return Ok(0);
        };
        if keep.is_zero() {
            return Err(fail(
                Exit::Usage,
                "--idempotency-retention is zero; give how long you may run the command \
                 again with its key (e.g. 2h), or leave it out to keep the answer for the \
                 daemon's whole --idempotency-retention",
            ));
        }
        Ok(troupe_runtime::input::millis(keep).max(1))
    }

    /// `message` as a request carrying `--timeout` as its deadline.
    fn request<T>(&self, message: T) -> anyhow::Result<tonic::Request<T>> {
        let mut request = tonic::Request::new(message);
        if let Some(timeout) = self.timeout {
            if timeout.is_zero() {
                return Err(fail(
                    Exit::Usage,
                    "--timeout is zero; give how long to wait for the answer (e.g. 5s), or \
                     leave it out for the daemon's --call-timeout",
                ));
            }
            request.set_timeout(timeout);
        }
        Ok(request)
    }

    fn outgoing(&self) -> anyhow::Result<Outgoing> {
        Ok(Outgoing {
            payload: Some(pb::Payload {
                data: self.encode()?.into_bytes().into(),
                content_type: pb::ContentType::Json as i32,
            }),
            key_retention_ms: self.key_retention_ms()?,
            idempotency_key: self.idempotency_key.clone().unwrap_or_default(),
            metadata: self.metadata.iter().cloned().collect(),
        })
    }

    /// `--data` that reads as a payload (`{"kwargs": ...}`, as `--data`
    /// meant before it took the arguments themselves): worth a word when the
    /// actor refuses it.
    fn looks_like_payload(&self) -> bool {
        let Some(Ok(Value::Object(data))) = self.data.as_deref().map(serde_json::from_str::<Value>)
        else {
            return false;
        };
        !data.is_empty() && data.keys().all(|k| k == "args" || k == "kwargs")
    }
}

pub async fn invoke(target: &Target, to: MethodRef, call: CallArgs) -> anyhow::Result<()> {
    let Outgoing {
        payload,
        idempotency_key,
        key_retention_ms,
        metadata,
    } = call.outgoing()?;
    let message = call.request(pb::InvokeRequest {
        actor: to.actor(),
        method: to.method.clone(),
        payload,
        idempotency_key,
        key_retention_ms,
        metadata,
        ..Default::default()
    })?;
    let daemon = connect(target).await?;
    let mut client = daemon.actor_client();
    let request = daemon
        .request(format!("call {}", to.name()))
        .within(call.timeout);
    let request = if call.looks_like_payload() {
        request.when_refused(
            "--data is the arguments themselves ('{\"by\": 5}'); to send \"args\" and \
             \"kwargs\" as written, pass them with --payload",
        )
    } else {
        request
    };
    let reply = client
        .invoke(message)
        .await
        .map_err(|s| request.failed(s))?
        .into_inner();
    let value = Shown::payload(reply.payload.as_ref());
    match target.output {
        Output::Json => emit_json(&value.json()),
        Output::Table => emit(&format!("{}\n", value.pretty())),
    }
}

/// How `troupe tell` asks for its message to be delivered.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TellDelivery {
    /// Deliver the message this long from now ("90s", "2h", "P1D"): it is
    /// stored at once, waits as a reminder of the actor named `$tell:KEY`
    /// (`troupe reminders delete` cancels it), then is delivered as a
    /// durable tell.
    #[arg(long, value_name = "DURATION", value_parser = crate::duration::flag,
          conflicts_with = "best_effort")]
    pub delay: Option<Duration>,
    /// Deliver the message at this RFC 3339 time ("2026-12-01T09:00:00Z"),
    /// by the daemon's clock (its test clock under --test-clock); otherwise
    /// as --delay. A time already past delivers it at once.
    #[arg(long, value_name = "TIME", conflicts_with_all = ["best_effort", "delay"],
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub at: Option<String>,
    /// Store the message in the actor's inbox before answering: it is
    /// delivered at least once across crashes and restarts, its effects once
    /// (docs/delivery.md). Left out, the actor type's default.
    #[arg(long, conflicts_with = "best_effort")]
    pub durable: bool,
    /// Answer once the message is queued in memory: a crash before its turn
    /// loses it. Left out, the actor type's default.
    #[arg(long)]
    pub best_effort: bool,
}

impl TellDelivery {
    fn wire(&self) -> pb::Delivery {
        match (self.durable, self.best_effort) {
            (true, _) => pb::Delivery::Durable,
            (false, true) => pb::Delivery::BestEffort,
            (false, false) => pb::Delivery::Unspecified,
        }
    }
}

/// Sends a one-way message: the daemon answers once it has taken it, not
/// when the method has run, so nothing of the method's result is printed.
pub async fn tell(
    target: &Target,
    to: MethodRef,
    call: CallArgs,
    delivery: TellDelivery,
) -> anyhow::Result<()> {
    let Outgoing {
        payload,
        idempotency_key,
        key_retention_ms,
        metadata,
    } = call.outgoing()?;
    let TellDelivery { delay, at, .. } = &delivery;
    let delay_ms = delay.map_or(0, millis);
    let delivery = delivery.wire();
    let message = call.request(pb::TellRequest {
        delay_ms,
        deliver_at: at.clone().unwrap_or_default(),
        actor: to.actor(),
        method: to.method.clone(),
        payload,
        delivery: delivery as i32,
        idempotency_key,
        key_retention_ms,
        metadata,
        ..Default::default()
    })?;
    let daemon = connect(target).await?;
    let mut client = daemon.actor_client();
    let request = daemon
        .request(format!("tell {}", to.name()))
        .within(call.timeout);
    let answer = client
        .tell(message)
        .await
        .map_err(|s| request.failed(s))?
        .into_inner();
    let delayed = delay.is_some() || at.is_some();
    if delayed && answer.reminder.is_empty() {
        // A daemon from before delayed tells reads neither field.
        anyhow::bail!(
            "the daemon took the tell of {} but named no reminder for it: it is older than \
             this CLI and delivered the message at once; upgrade the daemon to delay tells",
            to.name()
        );
    }
    if delayed {
        // The daemon's time: what it will do, by its clock, and for a retry
        // the time of the tell that waits already.
        let when = render::time_cell(answer.due_unix_ms);
        return match target.output {
            Output::Json => {
                let mut said = json!({
                    "actor": { "type": to.actor_type, "id": to.id },
                    "method": to.method,
                    "delivery": "delayed",
                    "delay_ms": delay.map(millis),
                    "deliver_at": at,
                    "reminder": answer.reminder,
                });
                if let Some(object) = said.as_object_mut() {
                    render::time_json(object, "due", answer.due_unix_ms);
                }
                emit_json(&said)
            }
            Output::Table => emit(&format!(
                "scheduled {}: stored, delivered at {when} as a durable tell; it waits as reminder \
                 {} (troupe reminders delete {} {} {} cancels it)\n",
                to.name(),
                answer.reminder,
                quoted(&to.actor_type),
                quoted(&to.id),
                quoted(&answer.reminder),
            )),
        };
    }
    let (how, said) = match delivery {
        pb::Delivery::Durable => ("durable", "stored in its inbox"),
        pb::Delivery::BestEffort => ("best_effort", "queued in memory"),
        pb::Delivery::Unspecified => ("default", "taken, as its type delivers tells"),
    };
    match target.output {
        Output::Json => emit_json(&json!({
            "actor": { "type": to.actor_type, "id": to.id },
            "method": to.method,
            "delivery": how,
        })),
        Output::Table => emit(&format!("sent {}: {said}\n", to.name())),
    }
}
