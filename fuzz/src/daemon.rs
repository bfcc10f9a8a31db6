//! A daemon's runtime for the harnesses: the real [`Runtime`] on the
//! in-memory stores, with an in-process host for a few actor types, on
//! one single-threaded tokio runtime per process.
//!
//! Each input gets a fresh runtime, stopped at its end, so an input's
//! outcome depends on the input alone (libFuzzer keeps inputs for the
//! coverage they reach; state left by earlier inputs would make that
//! coverage a matter of luck). Memory still grows by about 230 bytes per
//! input: the runtime keeps its pending-call counters (one per daemon, one
//! per type name) for the life of the process, by design, since one daemon
//! is one process. `bench/fuzz.sh` sets the RSS limit with that in mind.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use troupe_placement::SingleNode;
use troupe_runtime::{
    ActorFailure, ActorId, Payload, Runtime, RuntimeConfig, StateChange, StateMode, TurnOutcome,
    TurnRequest, TypeSpec,
};
use troupe_storage::{MemoryReminders, MemoryStore};

/// The longest any one step of a harness may take before it counts as a
/// hang (a crash, with the step named). Every call is bounded by the
/// runtime's `call_timeout` (1 s here), so this is far past any honest wait.
const HANG: Duration = Duration::from_secs(20);

fn tokio() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        // Single-threaded: the harness's steps and the runtime's tasks take
        // turns on one thread, which keeps runs repeatable and cheap.
        match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => panic!("cannot start tokio: {e}"),
        }
    })
}

/// Runs `f` to completion on the harness's tokio runtime.
pub fn block_on<F: Future>(f: F) -> F::Output {
    tokio().block_on(f)
}

/// `f`, which must finish within [`HANG`]; a hang is reported as a crash.
pub async fn bounded<F: Future>(what: impl std::fmt::Debug, f: F) -> F::Output {
    match tokio::time::timeout(HANG, f).await {
        Ok(out) => out,
        Err(_) => panic!("{what:?} did not finish within {HANG:?}: a hang"),
    }
}

/// The daemon's settings, with every wait short: nothing waits for an app
/// that will not come (`host_wait` 0) and no call outlives a second.
pub fn config() -> RuntimeConfig {
    RuntimeConfig {
        workers: 1,
        // Small, so inputs of a few hundred bytes reach the size limits.
        max_payload_bytes: 512,
        max_pending_calls: 64,
        default_max_mailbox: 8,
        default_idle_timeout: Duration::from_millis(50),
        call_timeout: Duration::from_secs(1),
        host_wait: Duration::ZERO,
        flush_interval: Duration::from_millis(5),
        flush_max_dirty_bytes: 4096,
        shutdown_grace: Duration::from_secs(1),
        shutdown_flush_timeout: Duration::from_secs(1),
        default_turn_timeout: Duration::from_secs(1),
        ..RuntimeConfig::default()
    }
}

/// The in-process types: `counter` (write-behind), `ledger` (durable, with
/// a read-only `get`), `nest` (re-entrant, a short idle timeout, a tiny
/// mailbox).
pub const TYPES: [&str; 3] = ["counter", "ledger", "nest"];

fn type_specs() -> Vec<TypeSpec> {
    vec![
        TypeSpec {
            name: TYPES[0].into(),
            ..TypeSpec::default()
        },
        TypeSpec {
            name: TYPES[1].into(),
            state_mode: Some(StateMode::Durable),
            readonly_methods: vec!["get".into()],
            ..TypeSpec::default()
        },
        TypeSpec {
            name: TYPES[2].into(),
            reentrant: true,
            idle_timeout: Some(Duration::from_millis(10)),
            max_mailbox: Some(2),
            ..TypeSpec::default()
        },
    ]
}

/// One turn of the in-process host: `set` stores the payload under "v",
/// `put` under the payload itself as key, `del` deletes "v", `get` answers
/// "v", `boom` raises, anything else echoes the payload.
fn turn(_actor: &ActorId, request: TurnRequest) -> TurnOutcome {
    let ok = |payload: Payload, changes| TurnOutcome {
        result: Ok(payload),
        changes,
    };
    let data = request.payload.data.clone();
    match &*request.name {
        "set" => ok(Payload::json("null"), vec![StateChange::set("v", data)]),
        "put" => {
            let key = String::from_utf8_lossy(&data).into_owned();
            ok(Payload::json("null"), vec![StateChange::set(key, data)])
        }
        "del" => ok(Payload::json("null"), vec![StateChange::delete("v")]),
        "get" => {
            let value = request.state.get("v").cloned().unwrap_or_else(Bytes::new);
            ok(Payload::json(value), Vec::new())
        }
        "boom" => TurnOutcome {
            result: Err(ActorFailure {
                ty: "ValueError".into(),
                message: String::from_utf8_lossy(&data).into_owned(),
                details: String::new(),
                ..Default::default()
            }),
            changes: Vec::new(),
        },
        _ => ok(request.payload, Vec::new()),
    }
}

/// A started runtime on fresh in-memory stores; with `host`, the
/// in-process host serves [`TYPES`]. Call inside [`block_on`].
pub fn start(host: bool) -> Runtime {
    let runtime = match Runtime::create(
        config(),
        Arc::new(MemoryStore::new()),
        Arc::new(MemoryReminders::new()),
        Arc::new(SingleNode),
    ) {
        Ok(rt) => rt,
        Err(e) => panic!("the harness's runtime config was refused: {e}"),
    };
    runtime.start();
    if host {
        let host = troupe_runtime::FnHost::new("fuzz-host", turn);
        if let Err(e) = runtime.register_host(Arc::new(host), type_specs()) {
            panic!("the harness's types were refused: {e}");
        }
    }
    runtime
}

/// Stops `runtime` as SIGTERM would; it must stop within [`HANG`].
pub async fn stop(runtime: Runtime) {
    // In-memory stores confirm every write; nothing to report.
    let _report = bounded("runtime shutdown", runtime.shutdown()).await;
}
