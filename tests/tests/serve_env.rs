//! `troupe serve` configured through its environment alone, as in a
//! container or a unit file: TROUPE_* variables stand for the flags
//! (docs/cli.md), and TROUPE_LOG_FORMAT=json makes the log one JSON object
//! per line.

use anyhow::{ensure, Context};
use serde_json::Value;
use troupe_tests::{run_cli, type_spec, Daemon, TestApp};

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
