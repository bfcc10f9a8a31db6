//! Load generator for `bench/transport.sh` and `bench/forward_cpu.sh`:
//! closed-loop callers that enter one daemon (`--via`) and call `echo`
//! actors owned by a chosen daemon (`--owner`; the same one for local calls).
//!
//! ```text
//! transport_load wait --placement ADDR --daemons ADDR,ADDR [--type echo] [--seconds 60]
//!     until placement's table is settled with exactly those daemons, each
//!     hosting the type, and both route by it; prints the table version
//! transport_load run --via ADDR --owner ADDR --pairs N --payload BYTES
//!     [--messages 10000] [--seconds 60] [--connections 4] [--call-timeout 60]
//!     [--probe-pairs K --probe-payload BYTES --probe-after SECS --probe-connection shared|own]
//!     [--probe-type TYPE]
//!     [--cpu-pids PID,PID] [--type echo] [--warmup SECS]
//! ```
//!
//! `run` first finds `N` (and `K`) actors that the owner hosts: it calls
//! candidate ids through `--via` once each (which activates them where
//! placement puts them) and keeps those the owner's `ListActors` shows. Then
//! each of the `N` callers sends one message to its own actor and waits for
//! the reply before sending the next, until `--messages` calls were started
//! in all or `--seconds` passed, whichever comes first: every loop ends by
//! itself. Probe callers (small calls beside the main load) start
//! `--probe-after` seconds in and stop when the main callers stop. They
//! share the main callers' client connections to `--via` unless
//! `--probe-connection own` gives them one of their own, which takes the
//! client's hop out of what the probes measure and leaves the daemons' link.
//! `--probe-type` (default: `--type`) can put the probes' actors on an app
//! stream of their own.
//!
//! Prints one JSON object per group (`main`, `probe`) on stdout: calls
//! answered, errors with a sample, elapsed seconds, p50/p99 in ms, and with
//! `--cpu-pids` the processes' CPU ticks (utime + stime) over the timed
//! phase only, and the machine's busy cores over it (without `nice`d work).
//! With `--warmup`, also the main callers' steady state: the calls answered
//! from that many seconds after the first call until the first caller
//! stopped starting calls, and that window's length. The whole-run rate
//! includes the ramp (a large echo's reply only starts once its request has
//! crossed) and the drain (the last replies cross an otherwise idle link),
//! which a longer run dilutes but a link's capacity does not include.
//! A caller answered RESOURCE_EXHAUSTED (a full queue shed its call) backs
//! off, jittered, from 50 ms doubling to 2 s, as the error asks.
//! Setup failures exit non-zero with the reason on stderr.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use futures::StreamExt;
use tonic::transport::{Channel, Endpoint};
use troupe_proto::v1 as pb;

mod measure;
mod wait;

use measure::{cpu_ticks, host_ticks, report};
use wait::wait;

type ActorClient = pb::actor_client_client::ActorClientClient<Channel>;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = dispatch(&args).await {
        eprintln!("transport_load: {e:#}");
        std::process::exit(1);
    }
}

async fn dispatch(args: &[String]) -> anyhow::Result<()> {
    let usage = "usage: transport_load wait|run --flag value ... (see the module doc)";
    match args.split_first() {
        Some((cmd, rest)) if cmd == "wait" => wait(&Flags::parse(rest)?).await,
        Some((cmd, rest)) if cmd == "run" => run(&Flags::parse(rest)?).await,
        _ => bail!(usage),
    }
}

// === flags ===

#[derive(Debug, Clone)]
struct Flags(HashMap<String, String>);

impl Flags {
    fn parse(args: &[String]) -> anyhow::Result<Flags> {
        let mut map = HashMap::new();
        let mut it = args.iter();
        while let Some(key) = it.next() {
            let name = key
                .strip_prefix("--")
                .with_context(|| format!("expected --flag, got {key:?}"))?;
            let value = it
                .next()
                .with_context(|| format!("--{name} needs a value"))?;
            map.insert(name.to_owned(), value.clone());
        }
        Ok(Flags(map))
    }

    fn str(&self, name: &str) -> anyhow::Result<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .with_context(|| format!("--{name} is required"))
    }

    fn str_or<'a>(&'a self, name: &str, default: &'a str) -> &'a str {
        self.0.get(name).map_or(default, String::as_str)
    }

    fn num<T: std::str::FromStr>(&self, name: &str, default: Option<T>) -> anyhow::Result<T>
    where
        T::Err: std::fmt::Display,
    {
        match (self.0.get(name), default) {
            (Some(v), _) => v
                .parse()
                .map_err(|e| anyhow!("--{name} {v:?} is not a number: {e}")),
            (None, Some(d)) => Ok(d),
            (None, None) => bail!("--{name} is required"),
        }
    }

    fn list(&self, name: &str) -> Vec<String> {
        self.0
            .get(name)
            .map(|v| {
                v.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }
}

async fn channel(addr: &str) -> anyhow::Result<Channel> {
    Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .with_context(|| format!("connecting to {addr}"))
}

async fn admin(addr: &str) -> anyhow::Result<pb::admin_client::AdminClient<Channel>> {
    Ok(pb::admin_client::AdminClient::new(channel(addr).await?))
}

// === run ===

/// What one group of callers does.
#[derive(Debug, Clone)]
struct Group {
    name: &'static str,
    actors: Vec<String>,
    payload: Bytes,
    /// Calls started by this group, across its callers.
    started: Arc<AtomicU64>,
    messages: u64,
    /// When the first of its callers stopped starting calls (the deadline
    /// or the message budget): where the steady state ends.
    stopped_starting: Arc<OnceLock<Instant>>,
}

/// What one group measured.
#[derive(Debug, Default)]
struct Measured {
    latencies_us: Vec<u64>,
    errors: u64,
    /// Error counts by code, and the first message seen for each.
    error_codes: BTreeMap<String, (u64, String)>,
    first_start: Option<Instant>,
    last_end: Option<Instant>,
    /// When each answered call ended, for the steady-state window.
    answered_at: Vec<Instant>,
}

impl Measured {
    fn merge(&mut self, other: Measured) {
        self.latencies_us.extend(other.latencies_us);
        self.answered_at.extend(other.answered_at);
        self.errors += other.errors;
        for (code, (n, msg)) in other.error_codes {
            let entry = self.error_codes.entry(code).or_insert((0, msg));
            entry.0 += n;
        }
        self.first_start = match (self.first_start, other.first_start) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_end = match (self.last_end, other.last_end) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
}

async fn run(flags: &Flags) -> anyhow::Result<()> {
    let via = flags.str("via")?;
    let owner = flags.str("owner")?;
    let ty = flags.str_or("type", "echo").to_owned();
    let probe_ty = flags.str_or("probe-type", &ty).to_owned();
    let pairs: usize = flags.num("pairs", None)?;
    let payload: usize = flags.num("payload", None)?;
    let messages: u64 = flags.num("messages", Some(10_000))?;
    let seconds: f64 = flags.num("seconds", Some(60.0))?;
    let warmup = Duration::from_secs_f64(flags.num("warmup", Some(0.0))?);
    let connections: usize = flags.num("connections", Some(4))?;
    let call_timeout = Duration::from_secs_f64(flags.num("call-timeout", Some(60.0))?);
    let probe_pairs: usize = flags.num("probe-pairs", Some(0))?;
    let probe_payload: usize = flags.num("probe-payload", Some(1024))?;
    let probe_after = Duration::from_secs_f64(flags.num("probe-after", Some(2.0))?);
    let own_probe_connection = match flags.str_or("probe-connection", "shared") {
        "shared" => false,
        "own" => true,
        other => bail!("--probe-connection {other:?}: expected shared or own"),
    };
    let cpu_pids: Vec<u32> = flags
        .list("cpu-pids")
        .iter()
        .map(|p| p.parse().map_err(|e| anyhow!("--cpu-pids {p:?}: {e}")))
        .collect::<anyhow::Result<_>>()?;

    // Room for the largest message either way, plus the envelope.
    let max_message = payload.max(probe_payload) + 64 * 1024;
    let client = || async {
        anyhow::Ok(
            ActorClient::new(channel(via).await?)
                .max_decoding_message_size(max_message)
                .max_encoding_message_size(max_message),
        )
    };
    let mut clients = Vec::new();
    for _ in 0..connections.max(1) {
        clients.push(client().await?);
    }
    let probe_clients = if own_probe_connection {
        vec![client().await?]
    } else {
        clients.clone()
    };

    // The owner's actors: main callers first, then probes, disjoint ids.
    let main_actors = owned_actors(&clients[0], owner, &ty, "pair", pairs).await?;
    let probe_actors = owned_actors(&clients[0], owner, &probe_ty, "probe", probe_pairs).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let bound = Duration::from_secs_f64(seconds);
    let cpu_before = cpu_ticks(&cpu_pids)?;
    let host_before = host_ticks()?;
    let started_at = Instant::now();
    let main = Group {
        name: "main",
        actors: main_actors,
        payload: fill(payload),
        started: Arc::new(AtomicU64::new(0)),
        messages,
        stopped_starting: Arc::new(OnceLock::new()),
    };
    let probe = Group {
        name: "probe",
        actors: probe_actors,
        payload: fill(probe_payload),
        started: Arc::new(AtomicU64::new(0)),
        messages: u64::MAX,
        stopped_starting: Arc::new(OnceLock::new()),
    };
    let deadline = started_at + bound;
    let main_task = {
        let (clients, ty, stop) = (clients.clone(), ty.clone(), stop.clone());
        let main = main.clone();
        tokio::spawn(async move {
            let measured =
                run_group(&main, &clients, &ty, deadline, call_timeout, false, &stop).await;
            // Probes are measured while the main load runs, not after.
            stop.store(true, Ordering::Relaxed);
            measured
        })
    };
    let probe_task = {
        let (clients, ty, stop) = (probe_clients, probe_ty, stop.clone());
        let probe = probe.clone();
        tokio::spawn(async move {
            tokio::time::sleep(probe_after).await;
            if stop.load(Ordering::Relaxed) {
                return Measured::default();
            }
            run_group(&probe, &clients, &ty, deadline, call_timeout, true, &stop).await
        })
    };
    // Every call is bounded by its timeout and no call starts after the
    // deadline; this outer bound only guards against a bug here.
    let outer = bound + call_timeout + Duration::from_secs(30);
    let (main_measured, probe_measured) =
        tokio::time::timeout(outer, async { tokio::join!(main_task, probe_task) })
            .await
            .map_err(|_| anyhow!("the run did not end within {outer:?}"))?;
    let main_measured = main_measured?;
    let probe_measured = probe_measured?;
    let cpu_after = cpu_ticks(&cpu_pids)?;
    let cpu = cpu_after.zip(cpu_before).map(|(a, b)| a.saturating_sub(b));
    let host = host_ticks()?;
    let (busy, all) = (
        host.0.saturating_sub(host_before.0),
        host.1.saturating_sub(host_before.1),
    );
    let host_busy = (all > 0).then(|| busy as f64 / all as f64 * host.2 as f64);

    report(&main, pairs, payload, main_measured, cpu, host_busy, warmup);
    if probe_pairs > 0 {
        report(
            &probe,
            probe_pairs,
            probe_payload,
            probe_measured,
            None,
            None,
            Duration::ZERO,
        );
    }
    Ok(())
}

/// Runs one closed-loop caller per actor of `group`; `probe` callers also
/// stop when `stop` is set (the main load ended).
async fn run_group(
    group: &Group,
    clients: &[ActorClient],
    ty: &str,
    deadline: Instant,
    call_timeout: Duration,
    probe: bool,
    stop: &Arc<AtomicBool>,
) -> Measured {
    let mut callers = tokio::task::JoinSet::new();
    for (i, id) in group.actors.iter().enumerate() {
        let mut client = clients[i % clients.len()].clone();
        let (id, ty, group, stop) = (id.clone(), ty.to_owned(), group.clone(), stop.clone());
        callers.spawn(async move {
            let mut m = Measured::default();
            let mut backoff = SHED_BACKOFF_MIN;
            loop {
                if Instant::now() >= deadline
                    || (probe && stop.load(Ordering::Relaxed))
                    || group.started.fetch_add(1, Ordering::Relaxed) >= group.messages
                {
                    group.stopped_starting.get_or_init(Instant::now);
                    break;
                }
                let begin = Instant::now();
                m.first_start.get_or_insert(begin);
                let result = call(&mut client, &ty, &id, group.payload.clone(), call_timeout).await;
                let end = Instant::now();
                m.last_end = Some(end);
                match result {
                    Ok(len) if len == group.payload.len() => {
                        m.latencies_us.push((end - begin).as_micros() as u64);
                        m.answered_at.push(end);
                        backoff = SHED_BACKOFF_MIN;
                    }
                    Ok(len) => note_error(
                        &mut m,
                        "WrongReply",
                        format!("echo of {} bytes answered {len}", group.payload.len()),
                    ),
                    Err(status) => {
                        note_error(
                            &mut m,
                            &format!("{:?}", status.code()),
                            status.message().to_owned(),
                        );
                        if status.code() == tonic::Code::ResourceExhausted {
                            // Shed by a full queue: back off as the error
                            // asks, as a well-behaved client does, rather
                            // than resend 8 MiB at once into the same queue.
                            tokio::time::sleep(jittered(backoff)).await;
                            backoff = (backoff * 2).min(SHED_BACKOFF_MAX);
                        } else {
                            // A failing cell should fail quickly, not spin.
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    }
                }
            }
            m
        });
    }
    let mut all = Measured::default();
    while let Some(done) = callers.join_next().await {
        match done {
            Ok(m) => all.merge(m),
            Err(e) => note_error(&mut all, "Panic", e.to_string()),
        }
    }
    all
}

/// The backoff after RESOURCE_EXHAUSTED: doubling from the least to the
/// most, reset by a call that succeeds.
const SHED_BACKOFF_MIN: Duration = Duration::from_millis(50);
const SHED_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Between half and all of `backoff`, so that callers shed together do not
/// come back together.
fn jittered(backoff: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let share = 0.5 + (random % 1000) as f64 / 2000.0;
    backoff.mul_f64(share)
}

fn note_error(m: &mut Measured, code: &str, message: String) {
    m.errors += 1;
    let mut message = message;
    message.truncate(300);
    m.error_codes
        .entry(code.to_owned())
        .or_insert((0, message))
        .0 += 1;
}

/// One echo call; the reply's length.
async fn call(
    client: &mut ActorClient,
    ty: &str,
    id: &str,
    data: Bytes,
    timeout: Duration,
) -> Result<usize, tonic::Status> {
    let mut request = tonic::Request::new(pb::InvokeRequest {
        actor: Some(pb::ActorRef {
            r#type: ty.to_owned(),
            id: id.to_owned(),
        }),
        method: "echo".into(),
        payload: Some(pb::Payload {
            data,
            content_type: pb::ContentType::Bytes as i32,
        }),
        ..Default::default()
    });
    request.set_timeout(timeout);
    let reply = client.invoke(request).await?.into_inner();
    Ok(reply.payload.map_or(0, |p| p.data.len()))
}

fn fill(len: usize) -> Bytes {
    Bytes::from((0..len).map(|i| (i % 251) as u8).collect::<Vec<u8>>())
}

/// Finds `want` actors with ids `PREFIX-N` that the daemon at `owner`
/// hosts, activating candidates through `client` (which routes each to its
/// owner) and keeping those the owner lists as live.
async fn owned_actors(
    client: &ActorClient,
    owner: &str,
    ty: &str,
    prefix: &str,
    want: usize,
) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    if want == 0 {
        return Ok(found);
    }
    let mut owner_admin = admin(owner).await?;
    let mut next = 0usize;
    // Two daemons split the ids about evenly; 20 rounds of 2 × want
    // candidates cannot all miss unless the owner hosts none.
    for _ in 0..20 {
        let batch: Vec<String> = (next..next + 2 * want)
            .map(|i| format!("{prefix}-{i}"))
            .collect();
        next += batch.len();
        let failures: Vec<String> = futures::stream::iter(batch.clone())
            .map(|id| {
                let mut client = client.clone();
                async move {
                    call(
                        &mut client,
                        ty,
                        &id,
                        Bytes::from_static(b"x"),
                        Duration::from_secs(20),
                    )
                    .await
                    .err()
                    .map(|s| format!("{id}: {:?} {}", s.code(), s.message()))
                }
            })
            .buffer_unordered(32)
            .filter_map(|e| async move { e })
            .collect()
            .await;
        if let Some(first) = failures.first() {
            bail!(
                "{} of {} warm-up calls failed, e.g. {first}",
                failures.len(),
                batch.len()
            );
        }
        let live = live_ids(&mut owner_admin, ty).await?;
        found.extend(batch.into_iter().filter(|id| live.contains(id)));
        if found.len() >= want {
            found.truncate(want);
            return Ok(found);
        }
    }
    bail!(
        "the daemon at {owner} hosts only {} of the {want} {ty} actors wanted (is it in the cluster?)",
        found.len()
    )
}

async fn live_ids(
    admin: &mut pb::admin_client::AdminClient<Channel>,
    ty: &str,
) -> anyhow::Result<HashSet<String>> {
    let mut ids = HashSet::new();
    let mut page_token = String::new();
    loop {
        let page = admin
            .list_actors(pb::ListActorsRequest {
                r#type: ty.to_owned(),
                page_size: 1000,
                page_token,
            })
            .await?
            .into_inner();
        ids.extend(
            page.actors
                .into_iter()
                .filter_map(|a| a.actor.map(|r| r.id)),
        );
        if page.next_page_token.is_empty() {
            return Ok(ids);
        }
        page_token = page.next_page_token;
    }
}
