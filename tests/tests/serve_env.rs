//! `troupe serve` configured through its environment alone, as in a
//! container or a unit file: TROUPE_* variables stand for the flags
//! (docs/cli.md), TROUPE_LOG_FORMAT=json makes the log one JSON object per
//! line, the memory bounds' defaults follow the memory limit of the
//! daemon's cgroup, and near that limit the daemon sheds load.

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context};
use serde_json::Value;
use troupe_tests::scrape::{metrics_addr, scrape};
use troupe_tests::{poll_until, run_cli, type_spec, Daemon, TestApp};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_come_from_troupe_variables_and_logs_can_be_json() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let env = [
        ("TROUPE_MAX_PENDING_CALLS", "1234"),
        // The one duration grammar holds in the environment too.
        ("TROUPE_IDLE_TIMEOUT", "PT7M"),
        ("TROUPE_LOG_FORMAT", "json"),
        ("TROUPE_THREADS", "3"),
    ];
    let daemon = Daemon::start_with_env(dir.path(), &[], &env).await?;
    let _app = TestApp::attach(daemon.addr, vec![type_spec("counter")]).await?;

    let addr = daemon.addr.to_string();
    let (status, out, err) = run_cli(&["status", "-o", "json", "--addr", &addr]).await?;
    ensure!(status.success(), "troupe status failed: {err}");
    let s: Value = serde_json::from_str(&out).context("status printed no JSON")?;
    assert_eq!(s["max_pending_calls"], 1234, "{s}");
    let counter = s["types"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["name"] == "counter"))
        .with_context(|| format!("no counter type: {s}"))?;
    assert_eq!(counter["idle_timeout_ms"], 420_000, "{s}");

    let log = daemon.log();
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    ensure!(!lines.is_empty(), "the daemon logged nothing");
    for line in &lines {
        let event: Value = serde_json::from_str(line)
            .with_context(|| format!("a log line that is not JSON: {line}\nlog:\n{log}"))?;
        ensure!(event["level"].is_string(), "no level: {line}");
        ensure!(event["timestamp"].is_string(), "no timestamp: {line}");
    }
    // The start line says how many threads run the daemon: by default the
    // CPUs its cgroup allows, so an operator sees what a CPU limit gave it.
    let started = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["fields"]["message"] == "troupe daemon listening")
        .with_context(|| format!("no start message:\n{log}"))?;
    assert_eq!(started["fields"]["threads"], 3, "{started}");
    Ok(())
}

/// A memory cgroup of the test's own (`name` tells the tests apart) at the root of the memory hierarchy
/// (cgroup v1's memory mount, or v2's root, which may hold processes),
/// removed when dropped (once the daemon in it has exited).
struct MemoryCgroup {
    dir: PathBuf,
}

impl MemoryCgroup {
    fn create(name: &str, limit: u64) -> std::io::Result<MemoryCgroup> {
        let name = format!("troupe-e2e-{}-{name}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let (dir, limit_file) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(&name), "memory.limit_in_bytes")
        } else {
            (Path::new("/sys/fs/cgroup").join(&name), "memory.max")
        };
        std::fs::create_dir(&dir)?;
        let group = MemoryCgroup { dir };
        std::fs::write(group.dir.join(limit_file), limit.to_string())?;
        Ok(group)
    }

    fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // A daemon killed on a failed assertion leaves the cgroup once it
        // has exited, a moment after its kill: bounded retries, no hang.
        for _ in 0..200 {
            match std::fs::remove_dir(&self.dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                _ => return,
            }
        }
    }
}

/// In a cgroup limited to 256 MiB (a container's or a unit's limit), sled's
/// cache and the idempotency records' bound each default to an eighth of
/// it, where a host's defaults (256 and 64 MiB) would take a small
/// sidecar past its limit. Needs root; skipped without, unless
/// TROUPE_REQUIRE_CGROUP=1 (as `.ci/run` sets).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_bounds_default_to_shares_of_the_cgroup_limit() -> anyhow::Result<()> {
    const LIMIT: u64 = 256 << 20;
    let Some(group) = cgroup_or_skip("bounds", LIMIT)? else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let mut daemon = Daemon::start_in_cgroup(dir.path(), &[], &group.procs()).await?;
    let addr = daemon.addr.to_string();
    let (status, out, err) = run_cli(&["status", "-o", "json", "--addr", &addr]).await?;
    ensure!(status.success(), "troupe status failed: {err}");
    let s: Value = serde_json::from_str(&out).context("status printed no JSON")?;
    assert_eq!(s["memory"]["call_records_limit_bytes"], LIMIT / 8, "{s}");
    assert_eq!(s["memory"]["memory_limit_bytes"], LIMIT, "{s}");
    let resident = s["memory"]["resident_bytes"].as_u64().unwrap_or(0);
    ensure!(resident > 0 && resident < LIMIT, "{s}");
    assert_eq!(s["memory"]["shed_percent"], 80, "{s}");
    assert_eq!(s["memory"]["resume_percent"], 75, "{s}");
    assert_eq!(s["memory"]["shedding"], false, "{s}");
    let log = daemon.log();
    for field in [
        format!("memory_limit={LIMIT}"),
        format!("sled_cache_bytes={}", LIMIT / 8),
        format!("idempotency_memory_bytes={}", LIMIT / 8),
        "memory_shed_percent=80".to_owned(),
    ] {
        ensure!(log.contains(&field), "no {field} in the start line:\n{log}");
    }
    ensure!(
        !log.contains("leaves less room than the daemon takes idle"),
        "80% of 256 MiB is room enough, yet the daemon warned:\n{log}"
    );
    daemon.terminate().await?;
    Ok(())
}

/// A memory cgroup, or `None` (the test skipped) where one cannot be made
/// and TROUPE_REQUIRE_CGROUP=1 (as `.ci/run` sets) does not ask for it.
fn cgroup_or_skip(name: &str, limit: u64) -> anyhow::Result<Option<MemoryCgroup>> {
    match MemoryCgroup::create(name, limit) {
        Ok(group) => Ok(Some(group)),
        Err(e) if std::env::var("TROUPE_REQUIRE_CGROUP").is_ok_and(|v| v == "1") => {
            Err(e).context("creating a memory cgroup (TROUPE_REQUIRE_CGROUP=1)")
        }
        Err(e) => {
            eprintln!("skipped: cannot create a memory cgroup ({e}); run as root");
            Ok(None)
        }
    }
}

/// Near its memory limit the daemon refuses new calls with
/// RESOURCE_EXHAUSTED, saying why and what to do, and shows it in status,
/// /metrics and its log, while reads and apps attaching go on. The
/// threshold is set to 1% of the limit so that the daemon is past it from
/// the start; what work still runs while shedding is the runtime's test
/// (crates/runtime/tests/memory_shedding.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_its_memory_limit_the_daemon_refuses_new_calls() -> anyhow::Result<()> {
    let Some(group) = cgroup_or_skip("shed", 256 << 20)? else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let args = [
        "--memory-shed-percent",
        "1",
        "--metrics-listen",
        "127.0.0.1:0",
    ];
    let mut daemon = Daemon::start_in_cgroup(dir.path(), &args, &group.procs()).await?;
    let addr = daemon.addr.to_string();
    let _app = TestApp::attach(daemon.addr, vec![type_spec("counter")]).await?;
    poll_until(
        std::time::Duration::from_secs(10),
        "status says the daemon sheds load",
        || async {
            let (status, out, err) = run_cli(&["status", "-o", "json", "--addr", &addr]).await?;
            ensure!(status.success(), "troupe status failed: {err}");
            let s: Value = serde_json::from_str(&out).context("status printed no JSON")?;
            Ok((s["memory"]["shedding"] == true).then_some(()))
        },
    )
    .await?;

    let mut client = daemon.client().await?;
    let refused = client.invoke_raw("counter", "a", "incr", "{}").await;
    let Err(status) = refused else {
        anyhow::bail!("a call was answered while shedding: {refused:?}");
    };
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    let pushback = status.metadata().get("grpc-retry-pushback-ms");
    ensure!(
        pushback.and_then(|v| v.to_str().ok()) == Some("500"),
        "no retry pushback of 500 ms on the refusal: {status:?}"
    );
    for said in [
        "shedding load",
        "1% of its memory limit (256.0 MiB)",
        "--memory-shed-percent",
    ] {
        ensure!(status.message().contains(said), "no {said:?} in {status:?}");
    }
    // Reads are answered.
    client.state("counter", "a").await?;

    let (status, out, err) = run_cli(&["status", "--addr", &addr]).await?;
    ensure!(status.success(), "troupe status failed: {err}");
    ensure!(out.contains("REFUSING new calls"), "{out}");
    let log = daemon.log();
    let metrics = metrics_addr(&log).context("no metrics address in the log")?;
    let scraped = scrape(metrics).await?;
    assert_eq!(scraped.sum("troupe_memory_shedding", &[]), 1.0);
    ensure!(
        scraped.sum("troupe_memory_shed_requests_total", &[]) >= 1.0,
        "{}",
        scraped.text
    );
    ensure!(
        log.contains("resident memory reached the shedding threshold"),
        "the log does not say shedding began:\n{log}"
    );
    // A threshold below what the daemon takes idle is told at start.
    for said in [
        "leaves less room than the daemon takes idle",
        "from 2.6 MiB resident (1% of its 256.0 MiB limit)",
        "--memory-shed-percent",
    ] {
        ensure!(log.contains(said), "no {said:?} in the log:\n{log}");
    }
    daemon.terminate().await?;
    Ok(())
}
