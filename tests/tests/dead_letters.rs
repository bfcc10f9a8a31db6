//! Dead letters through the CLI against the real binary: a durable tell
//! that fails every attempt is listed, shown, re-driven (delivered once the
//! app is fixed) and then gone (docs/cli.md, docs/delivery.md).

use anyhow::Context;
use troupe_tests::log_app::{restart_args, settled_log, start, tell_durable, LOG_TYPE};
use troupe_tests::*;

const TY: &str = LOG_TYPE;

/// Runs the CLI against `daemon`; its output, unless it exits otherwise than `code`.
async fn cli(daemon: &Daemon, args: &[&str], code: i32) -> anyhow::Result<String> {
    Ok(cli_against(daemon, args, code).await?.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_tells_become_dead_letters_the_cli_lists_and_redrives() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (daemon, app) = start(dir.path(), &restart_args(&TestStore::Sled)).await?;
    let mut client = daemon.client().await?;
    app.set_failing(true);
    tell_durable(&mut client, TY, "d", "flaky", 42).await?;
    // Three attempts with backoff, then a dead letter, stored with the flush.
    let letters = poll_until(WAIT, "a dead letter", || {
        let daemon = &daemon;
        async move {
            let out = cli(daemon, &["dead-letters", "list", "-o", "json"], 0).await?;
            let letters: serde_json::Value = serde_json::from_str(&out)?;
            let found = letters.as_array().is_some_and(|l| !l.is_empty());
            Ok(found.then_some(letters))
        }
    })
    .await?;
    let letter = &letters[0];
    assert_eq!(
        (
            &letter["type"],
            &letter["id"],
            &letter["method"],
            &letter["attempts"]
        ),
        (&"log".into(), &"d".into(), &"flaky".into(), &3.into()),
        "{letters}"
    );
    assert!(
        letter["error"]
            .as_str()
            .is_some_and(|e| e.contains("flaky failed on purpose")),
        "{letter}"
    );
    let seq = letter["seq"]
        .as_u64()
        .context("the dead letter has no numeric seq")?
        .to_string();
    let table = cli(&daemon, &["dead-letters", "list", "--type", TY], 0).await?;
    assert!(table.starts_with("TYPE") && table.contains(&seq), "{table}");
    let shown = cli(
        &daemon,
        &["dead-letters", "get", TY, "d", &seq, "-o", "json"],
        0,
    )
    .await?;
    let shown: serde_json::Value = serde_json::from_str(&shown)?;
    assert_eq!(shown["payload"]["kwargs"]["n"], 42, "{shown}");
    let described = cli(&daemon, &["actors", "get", TY, "d", "-o", "json"], 0).await?;
    let described: serde_json::Value = serde_json::from_str(&described)?;
    assert_eq!(described["dead_letters"], 1, "{described}");

    // Fixed, re-driven: delivered (once), and the letter is gone.
    app.set_failing(false);
    let out = cli(&daemon, &["dead-letters", "redrive", TY, "d", &seq], 0).await?;
    assert!(out.starts_with("re-drove dead letter"), "{out}");
    assert_eq!(settled_log(&daemon, "d", 1).await?, [42]);
    let left = cli(&daemon, &["dead-letters", "list", "-o", "json"], 0).await?;
    assert_eq!(left.trim(), "[]");
    // Gone: not found (exit 4), for get, redrive and drop alike.
    for verb in ["get", "redrive", "drop"] {
        cli(&daemon, &["dead-letters", verb, TY, "d", &seq], 4).await?;
    }
    Ok(())
}
