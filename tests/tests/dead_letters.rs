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
    // The error, and under it where the actor raised.
    assert_eq!(
        letter["error"].as_str(),
        Some(
            "actor raised ValueError: flaky failed on purpose\nTraceback (most recent call last):\n  File \"log.py\", line 9, in flaky\nValueError: flaky failed on purpose"
        ),
        "{letter}"
    );
    let seq = letter["seq"]
        .as_u64()
        .context("the dead letter has no numeric seq")?
        .to_string();
    let table = cli(&daemon, &["dead-letters", "list", "--type", TY], 0).await?;
    assert!(table.starts_with("TYPE") && table.contains(&seq), "{table}");
    // The list has a line per letter; `get` shows the trace under the error.
    assert!(!table.contains("Traceback"), "{table}");
    let got = cli(&daemon, &["dead-letters", "get", TY, "d", &seq], 0).await?;
    assert!(
        got.contains(
            "\nerror     actor raised ValueError: flaky failed on purpose\n          Traceback (most recent call last):\n            File \"log.py\", line 9, in flaky\n"
        ),
        "{got}"
    );
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

/// How many dead letters the daemon lists.
async fn letters(daemon: &Daemon) -> anyhow::Result<usize> {
    let out = cli(daemon, &["dead-letters", "list", "-o", "json"], 0).await?;
    let letters: serde_json::Value = serde_json::from_str(&out)?;
    letters
        .as_array()
        .map(Vec::len)
        .context("dead-letters list -o json is not an array")
}

/// Waits until the daemon lists `n` dead letters.
async fn await_letters(daemon: &Daemon, n: usize) -> anyhow::Result<()> {
    poll_until(WAIT, &format!("{n} dead letters"), || async move {
        Ok((letters(daemon).await? == n).then_some(()))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn all_dead_letters_are_redriven_in_order_or_dropped_at_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (daemon, app) = start(dir.path(), &restart_args(&TestStore::Sled)).await?;
    let mut client = daemon.client().await?;
    app.set_failing(true);
    for (id, method, n) in [
        ("a", "flaky", 1),
        ("a", "flaky", 2),
        ("a", "flaky", 3),
        ("b", "flaky", 10),
        ("c", "slow_flaky", 20),
    ] {
        tell_durable(&mut client, TY, id, method, n).await?;
    }
    await_letters(&daemon, 5).await?;

    // Still failing: every letter listed at the start is re-driven once,
    // and the command ends even though they fail (and come back) again.
    let out = cli(
        &daemon,
        &["dead-letters", "redrive", "--all", "-o", "json"],
        0,
    )
    .await?;
    let out: serde_json::Value = serde_json::from_str(&out)?;
    assert_eq!(
        (&out["listed"], &out["redriven"], &out["gone"]),
        (&5.into(), &5.into(), &0.into()),
        "{out}"
    );
    await_letters(&daemon, 5).await?;

    // Mistakes cost nothing: a letter and --all, a filter without --all,
    // and drop --all without --yes are refused before anything changes.
    cli(
        &daemon,
        &["dead-letters", "redrive", "--all", TY, "a", "1"],
        2,
    )
    .await?;
    cli(&daemon, &["dead-letters", "redrive", "--type", TY], 2).await?;
    let (_, err) = cli_against(&daemon, &["dead-letters", "drop", "--all"], 2).await?;
    assert!(
        err.contains("--yes") && err.contains("every dead letter"),
        "{err}"
    );
    assert_eq!(letters(&daemon).await?, 5);

    // Fixed: the letters of one method are re-driven, each actor's in order.
    app.set_failing(false);
    let out = cli(
        &daemon,
        &["dead-letters", "redrive", "--all", "--method", "flaky"],
        0,
    )
    .await?;
    assert_eq!(out, "re-drove 4 of 4 dead letters of method flaky\n");
    assert_eq!(settled_log(&daemon, "a", 3).await?, [1, 2, 3]);
    assert_eq!(settled_log(&daemon, "b", 1).await?, [10]);
    assert_eq!(letters(&daemon).await?, 1);

    // The last one is dropped, never delivered.
    let out = cli(
        &daemon,
        &["dead-letters", "drop", "--all", "--type", TY, "--yes"],
        0,
    )
    .await?;
    assert_eq!(out, "dropped 1 of 1 dead letter of type log\n");
    assert_eq!(letters(&daemon).await?, 0);
    let (entries, _) = client.state(TY, "c").await?;
    assert!(entries.is_empty(), "{entries:?}");
    let out = cli(&daemon, &["dead-letters", "redrive", "--all"], 0).await?;
    assert_eq!(out, "no dead letters\n");
    Ok(())
}
