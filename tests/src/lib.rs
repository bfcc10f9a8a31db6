//! Harness for the end-to-end tests: runs the real `troupe` binary and talks
//! to it over gRPC, as an app (a Rust counter app, or a raw stream for tests
//! that must misbehave) and as a client.
//!
//! Every wait in here is bounded: nothing can hang a test run.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use bytes::{Buf, BufMut, Bytes};
use prost::Message as _;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{Status, Streaming};

pub use troupe_proto::v1 as pb;
pub use troupe_proto::v1::deactivate::Reason;

pub mod cluster;
pub mod placement;
pub mod scrape;
pub mod store;
pub use store::{PgDatabase, PgServer, TestStore, WriteLog, WriteStream};

/// The default bound for any single wait in a test.
pub const WAIT: Duration = Duration::from_secs(15);

/// Awaits `fut` for at most `limit`, naming `what` if it takes longer.
pub async fn within<T>(
    limit: Duration,
    what: &str,
    fut: impl Future<Output = T>,
) -> anyhow::Result<T> {
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| anyhow!("timed out after {limit:?} waiting for {what}"))
}

/// Polls `check` until it returns `Some`, at most `limit`. For conditions
/// that only the daemon knows (admin output, state), not for sleeping.
pub async fn poll_until<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("condition not reached within {limit:?}: {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---------------------------------------------------------------- binary

/// The `troupe` binary: `$TROUPE_BIN`, else `target/<profile>/troupe` next
/// to this test's `deps` directory.
pub fn troupe_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("TROUPE_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    for dir in exe.ancestors() {
        if dir.file_name().is_some_and(|n| n == "deps") {
            if let Some(profile) = dir.parent() {
                let bin = profile.join("troupe");
                if bin.is_file() {
                    return bin;
                }
            }
        }
    }
    panic!(
        "cannot find the troupe binary next to {} (looked for target/<profile>/troupe); \
         run `cargo build -p troupe` first, or set TROUPE_BIN",
        exe.display()
    );
}

// ---------------------------------------------------------------- daemon

/// Spawns `cmd` (a troupe server), its stderr into `log`, and waits for the
/// stdout line `announce` + ADDR that says it serves; keeps draining stdout
/// after it so the server never writes into a closed pipe.
pub async fn spawn_announced(
    mut cmd: Command,
    log: &tempfile::NamedTempFile,
    announce: &str,
) -> anyhow::Result<(Child, SocketAddr)> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log.reopen()?)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("spawning {:?}", cmd.as_std()))?;
    let stdout = child.stdout.take().context("no stdout pipe")?;
    let mut lines = BufReader::new(stdout);
    let mut line = String::new();
    let read = within(
        Duration::from_secs(20),
        "the server's listening line",
        lines.read_line(&mut line),
    )
    .await;
    let addr = match read {
        Ok(Ok(n)) if n > 0 => line
            .trim()
            .strip_prefix(announce)
            .and_then(|a| a.parse::<SocketAddr>().ok()),
        _ => None,
    };
    let Some(addr) = addr else {
        let _ = child.start_kill();
        let text = std::fs::read_to_string(log.path()).unwrap_or_default();
        bail!(
            "{:?} did not announce its address (got {line:?}); its log:\n{text}",
            cmd.as_std()
        );
    };
    tokio::spawn(async move {
        let mut sink = Vec::new();
        let _ = lines.read_to_end(&mut sink).await;
    });
    Ok((child, addr))
}

/// One running `troupe serve` process. Killed when dropped.
#[derive(Debug)]
pub struct Daemon {
    child: Child,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    log: tempfile::NamedTempFile,
}

impl Daemon {
    /// Starts `troupe serve --listen 127.0.0.1:0 --data-dir DIR ARGS...` and
    /// waits for its "troupe listening on ADDR" line.
    pub async fn start(data_dir: &Path, extra_args: &[&str]) -> anyhow::Result<Daemon> {
        Self::start_with_env(data_dir, extra_args, &[]).await
    }

    /// [`Daemon::start`] with environment variables set for the daemon
    /// (e.g. `OTEL_BSP_SCHEDULE_DELAY`).
    pub async fn start_with_env(
        data_dir: &Path,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Daemon> {
        let log = tempfile::Builder::new()
            .prefix("troupe-daemon-")
            .suffix(".log")
            .tempfile()?;
        let mut cmd = Command::new(troupe_bin());
        cmd.arg("serve")
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(extra_args)
            .envs(env.iter().copied());
        let (child, addr) = spawn_announced(cmd, &log, "troupe listening on ").await?;
        Ok(Daemon {
            child,
            addr,
            data_dir: data_dir.to_owned(),
            log,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The daemon's stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    pub fn pid(&self) -> anyhow::Result<u32> {
        self.child.id().context("the daemon has already exited")
    }

    /// SIGTERM, then waits (bounded) for the exit.
    pub async fn terminate(&mut self) -> anyhow::Result<ExitStatus> {
        let pid = self.pid()?;
        let status = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await?;
        if !status.success() {
            bail!("kill -TERM {pid} failed: {status}");
        }
        let waited = within(
            Duration::from_secs(30),
            "the daemon to exit after SIGTERM",
            self.child.wait(),
        )
        .await;
        match waited {
            Ok(status) => Ok(status?),
            Err(e) => {
                let _ = self.child.start_kill();
                Err(e.context(self.log()))
            }
        }
    }

    /// SIGKILL, then waits for the exit.
    pub async fn kill9(&mut self) -> anyhow::Result<()> {
        self.child.start_kill()?;
        within(WAIT, "the daemon to die", self.child.wait()).await??;
        Ok(())
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub async fn channel(&self) -> anyhow::Result<Channel> {
        Ok(Channel::from_shared(self.url())?.connect().await?)
    }

    pub async fn client(&self) -> anyhow::Result<Client> {
        Ok(Client(pb::actor_client_client::ActorClientClient::new(
            self.channel().await?,
        )))
    }

    pub async fn admin(&self) -> anyhow::Result<pb::admin_client::AdminClient<Channel>> {
        Ok(pb::admin_client::AdminClient::new(self.channel().await?))
    }

    /// Lists every active actor (all pages).
    pub async fn actors(&self) -> anyhow::Result<Vec<pb::ActorInfo>> {
        let mut admin = self.admin().await?;
        let mut all = Vec::new();
        let mut page_token = String::new();
        loop {
            let page = admin
                .list_actors(pb::ListActorsRequest {
                    r#type: String::new(),
                    page_size: 1000,
                    page_token,
                })
                .await?
                .into_inner();
            all.extend(page.actors);
            if page.next_page_token.is_empty() {
                return Ok(all);
            }
            page_token = page.next_page_token;
        }
    }
}

// ---------------------------------------------------------------- client

/// An `ActorClient` with JSON helpers. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Client(pub pb::actor_client_client::ActorClientClient<Channel>);

pub fn actor(ty: &str, id: &str) -> pb::ActorRef {
    pb::ActorRef {
        r#type: ty.to_owned(),
        id: id.to_owned(),
    }
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

// ---------------------------------------------------------------- test app

/// An actor type with the daemon's defaults except the name.
pub fn type_spec(name: &str) -> pb::ActorTypeSpec {
    pb::ActorTypeSpec {
        name: name.to_owned(),
        ..Default::default()
    }
}

pub type ActorKey = (String, String);

fn key_of(actor: &Option<pb::ActorRef>) -> ActorKey {
    actor
        .as_ref()
        .map(|a| (a.r#type.clone(), a.id.clone()))
        .unwrap_or_default()
}

/// What a [`TestApp`] has seen so far.
#[derive(Debug, Default, Clone)]
pub struct AppEvents {
    pub activations: Vec<ActorKey>,
    pub deactivations: Vec<(ActorKey, Reason)>,
    /// Turns answered.
    pub turns: u64,
    pub in_flight: HashMap<ActorKey, u32>,
    /// The most turns of one actor the app ever had in hand at once.
    pub max_concurrent: HashMap<ActorKey, u32>,
    /// Set when the daemon's stream ended: Ok(()) or the error status text.
    pub stream_end: Option<Result<(), String>>,
}

impl AppEvents {
    pub fn deactivated(&self, ty: &str, id: &str, reason: Reason) -> bool {
        self.deactivations
            .iter()
            .any(|((t, i), r)| t == ty && i == id && *r == reason)
    }
}

/// A well-behaved app hosting counters: state key "count" (a JSON number);
/// methods "incr" (`{"kwargs":{"by":N}}`, default 1; replies the new
/// count; an alarm firing runs it too), "incr_pair" (the same, and sets key
/// "copy" to the same value in the same turn), "get", "fail" (raises
/// ValueError("boom")), "sleep" (`{"kwargs":{"ms":N}}`: holds the turn open
/// that long, then replies null), and "put_raw" (stores the call's payload
/// bytes as they are under key "raw" and replies them with content type
/// BYTES: state and results that are not JSON).
///
/// Each turn runs in its own task that yields before it replies, so if the
/// daemon ever ran two turns of one actor at once, updates would be lost and
/// `max_concurrent` would show it.
#[derive(Debug)]
pub struct TestApp {
    events: Arc<watch::Sender<AppEvents>>,
    out: mpsc::UnboundedSender<pb::AppMessage>,
    task: JoinHandle<()>,
    pub registered: pb::Registered,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestApp {
    pub async fn attach(
        addr: SocketAddr,
        types: Vec<pb::ActorTypeSpec>,
    ) -> anyhow::Result<TestApp> {
        let channel = Channel::from_shared(format!("http://{addr}"))?
            .connect()
            .await?;
        let mut client = pb::app_host_client::AppHostClient::new(channel);
        let (out, rx) = mpsc::unbounded_channel();
        out.send(pb::AppMessage {
            kind: Some(pb::app_message::Kind::Register(pb::Register {
                app_name: "rust-test-app".into(),
                types,
                sdk: "troupe-tests".into(),
            })),
        })?;
        let mut inbound = within(
            WAIT,
            "Attach",
            client.attach(UnboundedReceiverStream::new(rx)),
        )
        .await??
        .into_inner();
        let registered = match within(WAIT, "Registered", inbound.message())
            .await??
            .and_then(|m| m.kind)
        {
            Some(pb::daemon_message::Kind::Registered(r)) => r,
            other => bail!("expected Registered, got {other:?}"),
        };
        let events = Arc::new(watch::Sender::new(AppEvents::default()));
        let task = tokio::spawn(serve_counter(inbound, out.clone(), events.clone()));
        Ok(TestApp {
            events,
            out,
            task,
            registered,
        })
    }

    /// A snapshot of the events.
    pub fn events(&self) -> AppEvents {
        self.events.borrow().clone()
    }

    /// Waits (bounded) until `pred` holds for the events.
    pub async fn wait_for(
        &self,
        what: &str,
        limit: Duration,
        pred: impl FnMut(&AppEvents) -> bool,
    ) -> anyhow::Result<AppEvents> {
        let mut rx = self.events.subscribe();
        let seen = within(limit, what, rx.wait_for(pred)).await?;
        let events = seen
            .map_err(|_| anyhow!("the app stopped while waiting for {what}"))?
            .clone();
        Ok(events)
    }

    /// Closes the stream from the app's side.
    pub fn detach(self) {
        drop(self)
    }

    /// Sends any message on the app's stream (for protocol tests).
    pub fn send(&self, message: pb::AppMessage) -> anyhow::Result<()> {
        self.out
            .send(message)
            .map_err(|_| anyhow!("app stream closed"))
    }
}

/// The integer keyword argument `name` of a JSON payload (`{"kwargs": {...}}`).
fn json_kwarg(payload: &Option<pb::Payload>, name: &str) -> Option<i64> {
    let data = payload.as_ref().map(|p| p.data.clone()).unwrap_or_default();
    serde_json::from_slice::<serde_json::Value>(&data)
        .ok()
        .and_then(|v| v.get("kwargs")?.get(name)?.as_i64())
}

fn parse_by(payload: &Option<pb::Payload>) -> i64 {
    json_kwarg(payload, "by").unwrap_or(1)
}

async fn serve_counter(
    mut inbound: Streaming<pb::DaemonMessage>,
    out: mpsc::UnboundedSender<pb::AppMessage>,
    events: Arc<watch::Sender<AppEvents>>,
) {
    use pb::daemon_message::Kind;
    let counts: Arc<Mutex<HashMap<ActorKey, i64>>> = Arc::default();
    let end = loop {
        let message = match inbound.message().await {
            Ok(Some(m)) => m,
            Ok(None) => break Ok(()),
            Err(status) => break Err(format!("{:?}: {}", status.code(), status.message())),
        };
        match message.kind {
            Some(Kind::Activate(a)) => {
                let key = key_of(&a.actor);
                let count = a
                    .state
                    .get("count")
                    .and_then(|v| serde_json::from_slice::<i64>(v).ok())
                    .unwrap_or(0);
                if let Ok(mut counts) = counts.lock() {
                    counts.insert(key.clone(), count);
                }
                events.send_modify(|e| e.activations.push(key));
                let _ = out.send(pb::AppMessage {
                    kind: Some(pb::app_message::Kind::Activated(pb::ActivateResult {
                        call_id: a.call_id,
                        error: None,
                        changes: Vec::new(),
                    })),
                });
            }
            Some(Kind::Deactivate(d)) => {
                let key = key_of(&d.actor);
                if let Ok(mut counts) = counts.lock() {
                    counts.remove(&key);
                }
                let reason = Reason::try_from(d.reason).unwrap_or(Reason::Unspecified);
                events.send_modify(|e| e.deactivations.push((key, reason)));
                let _ = out.send(pb::AppMessage {
                    kind: Some(pb::app_message::Kind::Deactivated(pb::DeactivateResult {
                        call_id: d.call_id,
                        changes: Vec::new(),
                    })),
                });
            }
            Some(Kind::Turn(t)) => {
                tokio::spawn(counter_turn(t, counts.clone(), out.clone(), events.clone()));
            }
            Some(Kind::Registered(_)) | None => {}
        }
    };
    events.send_modify(|e| e.stream_end = Some(end));
}

async fn counter_turn(
    turn: pb::Turn,
    counts: Arc<Mutex<HashMap<ActorKey, i64>>>,
    out: mpsc::UnboundedSender<pb::AppMessage>,
    events: Arc<watch::Sender<AppEvents>>,
) {
    let key = key_of(&turn.actor);
    events.send_modify(|e| {
        let n = e.in_flight.entry(key.clone()).or_default();
        *n += 1;
        let now = *n;
        let max = e.max_concurrent.entry(key.clone()).or_default();
        *max = (*max).max(now);
    });
    let read = || {
        counts
            .lock()
            .ok()
            .and_then(|c| c.get(&key).copied())
            .unwrap_or(0)
    };
    let current = read();
    // Give any overlapping turn of this actor the chance to interleave.
    for _ in 0..5 {
        tokio::task::yield_now().await;
    }
    let json = |v: i64| Some(pb::turn_result::Outcome::Reply(json_payload(v.to_string())));
    let (outcome, changes) = match turn.name.as_str() {
        "sleep" => {
            let ms = json_kwarg(&turn.payload, "ms").unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(u64::try_from(ms).unwrap_or(0))).await;
            (
                Some(pb::turn_result::Outcome::Reply(json_payload("null"))),
                Vec::new(),
            )
        }
        "incr" | "alarm" => {
            let new = current + parse_by(&turn.payload);
            if let Ok(mut c) = counts.lock() {
                c.insert(key.clone(), new);
            }
            let change = pb::StateChange {
                key: "count".into(),
                op: Some(pb::state_change::Op::Set(new.to_string().into())),
            };
            (json(new), vec![change])
        }
        "incr_pair" => {
            // Two keys per turn, always equal: a store that ever shows them
            // different has torn a turn apart.
            let new = current + parse_by(&turn.payload);
            if let Ok(mut c) = counts.lock() {
                c.insert(key.clone(), new);
            }
            let set = |k: &str| pb::StateChange {
                key: k.into(),
                op: Some(pb::state_change::Op::Set(new.to_string().into())),
            };
            (json(new), vec![set("count"), set("copy")])
        }
        "get" => (json(current), Vec::new()),
        "put_raw" => {
            let data = turn.payload.map(|p| p.data).unwrap_or_default();
            let change = pb::StateChange {
                key: "raw".into(),
                op: Some(pb::state_change::Op::Set(data.clone())),
            };
            let reply = pb::Payload {
                data,
                content_type: pb::ContentType::Bytes as i32,
            };
            (Some(pb::turn_result::Outcome::Reply(reply)), vec![change])
        }
        "fail" => (
            Some(pb::turn_result::Outcome::Error(pb::ActorFailure {
                r#type: "ValueError".into(),
                message: "boom".into(),
                details: String::new(),
            })),
            Vec::new(),
        ),
        other => (
            Some(pb::turn_result::Outcome::Error(pb::ActorFailure {
                r#type: "AttributeError".into(),
                message: format!("counter has no method {other:?}"),
                details: String::new(),
            })),
            Vec::new(),
        ),
    };
    // Leave the turn before answering: the daemon may send the next turn of
    // this actor as soon as it has the answer.
    events.send_modify(|e| {
        if let Some(n) = e.in_flight.get_mut(&key) {
            *n -= 1;
        }
        e.turns += 1;
    });
    let _ = out.send(pb::AppMessage {
        kind: Some(pb::app_message::Kind::TurnResult(pb::TurnResult {
            call_id: turn.call_id,
            outcome,
            changes,
        })),
    });
}

// ---------------------------------------------------------------- raw stream

/// A codec that moves message bytes as they are, so a test can put anything
/// on the app stream.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        let n = src.remaining();
        Ok(Some(src.copy_to_bytes(n)))
    }
}

pub fn register_message(app_name: &str, types: Vec<pb::ActorTypeSpec>) -> pb::AppMessage {
    pb::AppMessage {
        kind: Some(pb::app_message::Kind::Register(pb::Register {
            app_name: app_name.into(),
            types,
            sdk: "troupe-tests-raw".into(),
        })),
    }
}

/// The app stream at the message level: the test decides what to send and
/// when. Dropping it closes the stream.
#[derive(Debug)]
pub struct RawApp {
    tx: mpsc::UnboundedSender<Bytes>,
    rx: Streaming<Bytes>,
}

impl RawApp {
    /// Opens the stream with `first` as its first message and waits for the
    /// daemon's response headers (the daemon reads the first message first).
    pub async fn open(addr: SocketAddr, first: Bytes) -> Result<RawApp, Status> {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .map_err(|e| Status::internal(e.to_string()))?
            .connect()
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let mut grpc = tonic::client::Grpc::new(channel);
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(first);
        let opened = async {
            grpc.ready()
                .await
                .map_err(|e| Status::unavailable(e.to_string()))?;
            grpc.streaming(
                tonic::Request::new(UnboundedReceiverStream::new(rx)),
                PathAndQuery::from_static("/troupe.v1.AppHost/Attach"),
                RawCodec,
            )
            .await
        };
        let response = tokio::time::timeout(WAIT, opened)
            .await
            .map_err(|_| Status::deadline_exceeded("test: Attach did not answer"))??;
        Ok(RawApp {
            tx,
            rx: response.into_inner(),
        })
    }

    /// Opens the stream, registers `types` and returns the daemon's answer.
    pub async fn register(
        addr: SocketAddr,
        types: Vec<pb::ActorTypeSpec>,
    ) -> anyhow::Result<(RawApp, pb::Registered)> {
        let mut app = RawApp::open(
            addr,
            register_message("raw-test-app", types)
                .encode_to_vec()
                .into(),
        )
        .await?;
        match app.recv().await?.and_then(|m| m.kind) {
            Some(pb::daemon_message::Kind::Registered(r)) => Ok((app, r)),
            other => bail!("expected Registered, got {other:?}"),
        }
    }

    pub fn send(&self, message: pb::AppMessage) -> anyhow::Result<()> {
        self.send_bytes(message.encode_to_vec().into())
    }

    pub fn send_bytes(&self, bytes: Bytes) -> anyhow::Result<()> {
        self.tx
            .send(bytes)
            .map_err(|_| anyhow!("raw app stream closed"))
    }

    /// The next daemon message (bounded wait); `Ok(None)` when the stream
    /// ended cleanly; the status when it ended with an error.
    pub async fn recv(&mut self) -> anyhow::Result<Option<pb::DaemonMessage>> {
        match within(WAIT, "a daemon message", self.rx.message()).await? {
            Ok(Some(bytes)) => Ok(Some(pb::DaemonMessage::decode(bytes)?)),
            Ok(None) => Ok(None),
            Err(status) => Err(anyhow::Error::new(status)),
        }
    }

    /// Reads until the daemon ends the stream; returns its final status
    /// (None for a clean end). Fails if the stream stays open.
    pub async fn ended(&mut self) -> anyhow::Result<Option<Status>> {
        loop {
            match within(WAIT, "the daemon to end the app stream", self.rx.message()).await? {
                Ok(Some(_)) => continue,
                Ok(None) => return Ok(None),
                Err(status) => return Ok(Some(status)),
            }
        }
    }

    /// Answers activations (with no changes) until a turn arrives.
    pub async fn next_turn(&mut self) -> anyhow::Result<pb::Turn> {
        loop {
            match self.recv().await?.and_then(|m| m.kind) {
                Some(pb::daemon_message::Kind::Activate(a)) => self.send(pb::AppMessage {
                    kind: Some(pb::app_message::Kind::Activated(pb::ActivateResult {
                        call_id: a.call_id,
                        error: None,
                        changes: Vec::new(),
                    })),
                })?,
                Some(pb::daemon_message::Kind::Turn(t)) => return Ok(t),
                other => bail!("expected Activate or Turn, got {other:?}"),
            }
        }
    }

    /// Answers turn `call_id` with a JSON reply and no state changes.
    pub fn reply(&self, call_id: u64, json: &str) -> anyhow::Result<()> {
        self.send(pb::AppMessage {
            kind: Some(pb::app_message::Kind::TurnResult(pb::TurnResult {
                call_id,
                outcome: Some(pb::turn_result::Outcome::Reply(json_payload(
                    json.to_owned(),
                ))),
                changes: Vec::new(),
            })),
        })
    }
}

// ---------------------------------------------------------------- misc

/// Runs the troupe CLI with `args`, bounded; (exit status, stdout, stderr).
pub async fn run_cli(args: &[&str]) -> anyhow::Result<(ExitStatus, String, String)> {
    run_cli_env(args, &[]).await
}

/// [`run_cli`] with environment variables set (TROUPE_ADDR is unset unless
/// `env` sets it).
pub async fn run_cli_env(
    args: &[&str],
    env: &[(&str, &str)],
) -> anyhow::Result<(ExitStatus, String, String)> {
    let output = within(
        Duration::from_secs(30),
        "the troupe CLI",
        Command::new(troupe_bin())
            .args(args)
            .env_remove("TROUPE_ADDR")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await??;
    Ok((
        output.status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

/// Whether a status carries `code`, with a readable failure otherwise.
pub fn expect_code<T: std::fmt::Debug>(
    result: Result<T, Status>,
    code: tonic::Code,
) -> anyhow::Result<Status> {
    match result {
        Ok(v) => bail!("expected {code:?}, the call succeeded with {v:?}"),
        Err(status) if status.code() == code => Ok(status),
        Err(status) => bail!(
            "expected {code:?}, got {:?}: {}",
            status.code(),
            status.message()
        ),
    }
}

/// A fresh daemon on a temporary data dir with a [`TestApp`] hosting
/// `types` attached, and a client. Keep the `TempDir` alive for the test.
pub async fn daemon_with_app(
    extra_args: &[&str],
    types: Vec<pb::ActorTypeSpec>,
) -> anyhow::Result<(tempfile::TempDir, Daemon, TestApp, Client)> {
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), extra_args).await?;
    let app = TestApp::attach(daemon.addr, types).await?;
    let client = daemon.client().await?;
    Ok((dir, daemon, app, client))
}
