//! A minimal Rust app for benchmarks: hosts `echo` (stateless: returns its
//! payload), `counter` (stateful: reads and writes key `count`, write-behind)
//! and `counter_durable` (the same in `durable` state mode) over the real app
//! stream, answering each turn as soon as it arrives. It takes the daemon's
//! batches and large messages in pieces, and its answers go out through the
//! SDKs' own writer (`troupe_sdk_core::batch`): batched, small ones ahead of
//! large ones and between their pieces.
//!
//! `bench_app [ADDR] [--max-receive-bytes N] [--types NAME,...]
//! [--exit-after-register CODE]` — dials ADDR, else `TROUPE_ADDR` (as the
//! SDKs do), else 127.0.0.1:7420; prints `registered` once the daemon
//! accepted it, and with `--exit-after-register` then exits with CODE (an
//! app that fails, for `troupe dev`'s restarts). `--types` hosts other names
//! instead (a name starting with `counter` counts, `counter_durable` in
//! durable mode; any other echoes), so a benchmark can give some actors an
//! app stream of their own. It receives messages of any size unless
//! `--max-receive-bytes` sets a limit, which it then declares to the daemon
//! (`Register.max_receive_bytes`), so that turns too large for it fail
//! their callers instead of its stream. It sends the first token of
//! `TROUPE_APP_TOKEN`, if set, to a daemon that requires one, and dials
//! over TLS when `TROUPE_TLS_CA` names the CA of a daemon with TLS on.

use std::collections::HashMap;
use std::sync::Arc;

use prost::Message;
use tokio::sync::mpsc;
use troupe_proto::parts::Reassembly;
use troupe_proto::v1 as pb;
use troupe_sdk_core::batch::{Batcher, DaemonReads};

/// The command line.
struct Args {
    addr: String,
    /// 0: no limit.
    max_receive_bytes: u64,
    types: Vec<String>,
    exit_after_register: Option<i32>,
}

fn parse_args() -> Result<Args, String> {
    const USAGE: &str = "usage: bench_app [ADDR] [--max-receive-bytes N] [--types NAME,...] \
                         [--exit-after-register CODE]";
    let mut args = Args {
        addr: std::env::var("TROUPE_ADDR").unwrap_or_else(|_| "127.0.0.1:7420".into()),
        exit_after_register: None,
        max_receive_bytes: 0,
        types: ["echo", "counter", "counter_durable"]
            .map(String::from)
            .to_vec(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        if arg == "--max-receive-bytes" {
            let value = it
                .next()
                .ok_or_else(|| format!("--max-receive-bytes needs a value; {USAGE}"))?;
            args.max_receive_bytes = value.parse().map_err(|_| {
                format!("--max-receive-bytes {value:?} is not a number of bytes; {USAGE}")
            })?;
        } else if arg == "--types" {
            let value = it
                .next()
                .ok_or_else(|| format!("--types needs a comma-separated list; {USAGE}"))?;
            args.types = value.split(',').map(str::to_owned).collect();
        } else if arg == "--exit-after-register" {
            let value = it
                .next()
                .ok_or_else(|| format!("--exit-after-register needs an exit code; {USAGE}"))?;
            let code = value
                .parse()
                .map_err(|_| format!("--exit-after-register {value:?} is not an exit code"))?;
            args.exit_after_register = Some(code);
        } else if arg.starts_with('-') {
            return Err(format!("unknown option {arg:?}; {USAGE}"));
        } else {
            args.addr = arg;
        }
    }
    Ok(args)
}

// One thread: `#[tokio::main]`'s default runs this loop on the main thread
// and the connection on the workers, so every turn and answer crossed
// threads (70 µs of the app's CPU per sequential call against 30 here).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Args {
        addr,
        max_receive_bytes,
        types,
        exit_after_register,
    } = parse_args()?;
    // tonic's default (4 MiB) is less than a turn carrying the daemon's
    // default largest payload; take what the daemon sends unless told
    // otherwise.
    let receive_limit = match max_receive_bytes {
        0 => usize::MAX,
        n => usize::try_from(n).unwrap_or(usize::MAX),
    };
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?;
    // A daemon with TLS on: its CA in TROUPE_TLS_CA, as for the CLI.
    let tls = match std::env::var_os("TROUPE_TLS_CA") {
        Some(ca) => Some(troupe_tls::Connector::with_config(
            troupe_tls::client_config_for_server(std::path::Path::new(&ca), None)?,
        )),
        None => None,
    };
    let channel = troupe_tests::tls::connect(endpoint, tls.as_ref()).await?;
    let mut client = pb::app_host_client::AppHostClient::new(channel)
        .max_decoding_message_size(receive_limit)
        .max_encoding_message_size(usize::MAX);
    let (tx, rx) = mpsc::unbounded_channel();
    let spec = |name: &str| pb::ActorTypeSpec {
        name: name.into(),
        max_mailbox: 10_000,
        state_mode: if name == "counter_durable" {
            pb::StateMode::Durable as i32
        } else {
            pb::StateMode::Unspecified as i32
        },
        ..Default::default()
    };
    tx.send(pb::AppMessage {
        kind: Some(pb::app_message::Kind::Register(pb::Register {
            app_name: "bench-app".into(),
            types: types.iter().map(|name| spec(name)).collect(),
            sdk: "rust-bench".into(),
            accepts_batches: true,
            max_receive_bytes,
            api_version: pb::API_VERSION,
            accepts_parts: true,
            accepts_cancel: false,
        })),
    })?;
    let daemon = Arc::new(DaemonReads::default());
    let mut attach = tonic::Request::new(Batcher::new(rx, daemon.clone()).into_stream());
    // A daemon that requires the app token gets the first one listed.
    if let Some(token) = std::env::var("TROUPE_APP_TOKEN").ok().and_then(|t| {
        t.split([',', '\n'])
            .map(str::trim)
            .find(|t| !t.is_empty())
            .map(str::to_owned)
    }) {
        attach
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse()?);
    }
    let mut inbound = client.attach(attach).await?.into_inner();
    // Instance state per actor, as an SDK keeps it.
    let mut counts: HashMap<(String, String), u64> = HashMap::new();
    let mut pieces = Reassembly::new(receive_limit);
    while let Some(message) = inbound.message().await? {
        use pb::daemon_message::Kind;
        let message = match message.kind {
            Some(Kind::Part(part)) => match pieces.push(part)? {
                Some(whole) => pb::DaemonMessage::decode(whole)?,
                None => continue,
            },
            _ => message,
        };
        let work = match message.kind {
            Some(Kind::Registered(registered)) => {
                daemon.learn(&registered);
                println!("registered");
                if let Some(code) = exit_after_register {
                    std::process::exit(code);
                }
                continue;
            }
            Some(Kind::Batch(batch)) => batch.messages,
            kind => vec![pb::DaemonMessage { kind }],
        };
        for reply in work
            .into_iter()
            .filter_map(|m| answer(&mut counts, m.kind?))
        {
            tx.send(pb::AppMessage { kind: Some(reply) })?;
        }
    }
    Ok(())
}

/// The answer to one piece of work; `None` for messages that need none.
fn answer(
    counts: &mut HashMap<(String, String), u64>,
    work: pb::daemon_message::Kind,
) -> Option<pb::app_message::Kind> {
    use pb::daemon_message::Kind;
    Some(match work {
        Kind::Activate(a) => {
            let actor = a.actor.unwrap_or_default();
            let count = a
                .state
                .get("count")
                .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
                .unwrap_or(0);
            counts.insert((actor.r#type, actor.id), count);
            pb::app_message::Kind::Activated(pb::ActivateResult {
                call_id: a.call_id,
                ..Default::default()
            })
        }
        Kind::Turn(t) => {
            let actor = t.actor.unwrap_or_default();
            if actor.r#type.starts_with("counter") {
                let count = counts.entry((actor.r#type, actor.id)).or_default();
                *count += 1;
                let value = count.to_string();
                pb::app_message::Kind::TurnResult(pb::TurnResult {
                    call_id: t.call_id,
                    outcome: Some(pb::turn_result::Outcome::Reply(pb::Payload {
                        data: value.clone().into_bytes().into(),
                        content_type: pb::ContentType::Json as i32,
                    })),
                    changes: vec![pb::StateChange {
                        ttl_ms: None,
                        key: "count".into(),
                        op: Some(pb::state_change::Op::Set(value.into_bytes().into())),
                    }],
                    ..Default::default()
                })
            } else {
                pb::app_message::Kind::TurnResult(pb::TurnResult {
                    call_id: t.call_id,
                    outcome: Some(pb::turn_result::Outcome::Reply(
                        t.payload.unwrap_or_default(),
                    )),
                    changes: Vec::new(),
                    ..Default::default()
                })
            }
        }
        Kind::Deactivate(d) => {
            let actor = d.actor.unwrap_or_default();
            counts.remove(&(actor.r#type, actor.id));
            pb::app_message::Kind::Deactivated(pb::DeactivateResult {
                call_id: d.call_id,
                changes: Vec::new(),
            })
        }
        Kind::Registered(_) | Kind::Batch(_) | Kind::Part(_) | Kind::Cancel(_) => return None,
    })
}
