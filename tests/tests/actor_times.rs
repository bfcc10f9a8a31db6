//! `actors get` and `actors list` show when an actor was activated and
//! last active as the wall clock had it, not as a coarse clock that only
//! the idle sweeper moves (every 30 s with the default idle timeout).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{ensure, Context};
use serde_json::Value;
use troupe_tests::{daemon_with_app, run_cli, type_spec};

fn wall_ms() -> anyhow::Result<u64> {
    Ok(u64::try_from(
        SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis(),
    )?)
}

async fn json(args: &[&str]) -> anyhow::Result<Value> {
    let (status, out, err) = run_cli(args).await?;
    ensure!(status.success(), "troupe {args:?} failed: {err}");
    serde_json::from_str(&out).with_context(|| format!("troupe {args:?} printed no JSON: {out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_actor_shows_the_wall_clock_time_it_was_activated() -> anyhow::Result<()> {
    let (_dir, daemon, _app, mut client) = daemon_with_app(&[], vec![type_spec("counter")]).await?;
    // Let a clock that only moves at the start and at sweeps fall behind:
    // not a measurement, only a gap the old clock could not hide.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = wall_ms()?;
    client.incr("counter", "c1", 1).await?;
    let after = wall_ms()?;

    let addr = daemon.addr.to_string();
    let d = json(&[
        "actors", "get", "counter", "c1", "-o", "json", "--addr", &addr,
    ])
    .await?;
    let near = |field: &str| -> anyhow::Result<()> {
        let at = d[field]
            .as_u64()
            .with_context(|| format!("no {field}: {d}"))?;
        ensure!(
            at + 1000 >= before && at <= after + 1000,
            "{field} {at} is not within 1 s of the call ({before}..{after}): {d}"
        );
        Ok(())
    };
    near("activated_unix_ms")?;
    near("last_active_unix_ms")?;

    let list = json(&["actors", "list", "-o", "json", "--addr", &addr]).await?;
    let c1 = list
        .as_array()
        .and_then(|a| a.iter().find(|a| a["id"] == "c1"))
        .with_context(|| format!("c1 not listed: {list}"))?;
    let idle = c1["idle_ms"].as_u64().with_context(|| format!("{c1}"))?;
    let since_call = wall_ms()?.saturating_sub(before);
    ensure!(
        idle <= since_call + 1000,
        "idle {idle} ms, yet the call was {since_call} ms ago: {c1}"
    );
    Ok(())
}
