//! Which token is in use: status and `/metrics` name each accepted token
//! by its place with its use, so a rotation sees who still sends the old
//! one; short tokens are called out.

use std::time::Duration;

use anyhow::Context;
use tonic::transport::Channel;
use troupe_tests::auth_call::{call, refused};
use troupe_tests::*;

const READ_TOKEN: &str = "reader";

/// A rotation ends by removing the old token, which locks out whoever still
/// sends it: status and `/metrics` show each accepted token by its place,
/// how often, when and from where it last let anyone in; a token keeps its
/// use when a reload moves it down the file.
#[tokio::test]
async fn each_token_shows_whether_anyone_still_sends_it() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let token_file = dir.path().join("api-token");
    std::fs::write(&token_file, "api-old\n")?;
    let file = token_file.to_str().context("temp path is not UTF-8")?;
    let daemon = Daemon::start_with_env(
        &dir.path().join("data"),
        &["--api-token-file", file, "--metrics-listen", "127.0.0.1:0"],
        &[("TROUPE_READ_TOKEN", READ_TOKEN)],
    )
    .await?;
    let channel = Channel::from_shared(daemon.url())?.connect().await?;
    let status = "/troupe.v1.Admin/Status";
    for _ in 0..3 {
        call(&channel, status, Some("api-old")).await??;
    }

    // Rotation: the new token first, renamed over the file as a mounted
    // secret changes; the daemon takes it within a second or so.
    let next = dir.path().join("api-token.next");
    std::fs::write(&next, "api-new\napi-old\n")?;
    std::fs::rename(&next, &token_file)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while call(&channel, status, Some("api-new")).await?.is_err() {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the new token was never accepted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The read-only token sent where it may not go lets nobody in: it
    // does not count as a use.
    let purge = "/troupe.v1.Admin/PurgeActor";
    let denied = call(&channel, purge, Some(READ_TOKEN)).await?;
    assert!(refused(&denied), "{denied:?}");

    let addr = daemon.addr.to_string();
    let reader = [("TROUPE_API_TOKEN", READ_TOKEN)];
    let (ok, out, err) = run_cli_env(&["status", "--addr", &addr, "-o", "json"], &reader).await?;
    assert!(ok.success(), "{err}");
    let shown: serde_json::Value = serde_json::from_str(&out)?;
    let tokens = shown["security"]["tokens"]
        .as_array()
        .with_context(|| format!("no tokens in {shown}"))?;
    let places: Vec<String> = tokens
        .iter()
        .map(|t| {
            let (credential, source) = (&t["credential"], &t["source"]);
            format!(
                "{credential} {source} {} {}",
                t["position"], t["source_name"]
            )
        })
        .collect();
    let quoted = serde_json::Value::from(file);
    assert_eq!(
        places,
        vec![
            format!(r#""api" "file" 1 {quoted}"#),
            format!(r#""api" "file" 2 {quoted}"#),
            r#""read" "env" 1 "TROUPE_READ_TOKEN""#.to_owned(),
        ],
        "{shown}"
    );
    // The new token let one call in; the old one's three moved with it.
    assert_eq!(tokens[0]["accepted"], 1, "{shown}");
    assert_eq!(tokens[1]["accepted"], 3, "{shown}");
    // The read-only token: the one status call above.
    assert_eq!(tokens[2]["accepted"], 1, "{shown}");
    for token in tokens {
        let from = token["last_from"].as_str().unwrap_or_default();
        assert!(from.starts_with("127.0.0.1:"), "{token}");
        assert!(token["last_accepted_unix_ms"].as_u64() > Some(0), "{token}");
    }

    // These tokens are words, too short to resist brute force: the daemon
    // says so at start and --check calls it a problem, naming each by its
    // place.
    assert!(tokens.iter().all(|t| t["short"] == true), "{shown}");
    let log = daemon.log();
    let warned = format!(r#"token="token 2 of {file}""#);
    assert!(
        log.contains("a token is too short to resist brute force") && log.contains(&warned),
        "{log}"
    );
    let (ok, table, err) = run_cli_env(&["status", "--addr", &addr, "--check"], &reader).await?;
    assert_eq!(ok.code(), Some(7), "{table}{err}");
    let line = format!(
        "api token 2 of {file} (SHORT: guessable, replace it): 3 requests since start, last "
    );
    assert!(table.contains(&line), "{line} in {table}");
    let problem = format!("  - api token 2 of {file} is too short to resist brute force\n");
    assert!(table.contains(&problem), "{problem} in {table}");

    let metrics = scrape::metrics_addr(&daemon.log()).context("no metrics address logged")?;
    let bearer = format!("Bearer {READ_TOKEN}");
    let scraped = scrape::http_get_with(metrics, "/metrics", &[("authorization", &bearer)]).await?;
    for position in ["1", "2"] {
        let series = format!(
            r#"troupe_auth_token_last_accepted_timestamp_seconds{{credential="api",source="file",position="{position}"}} "#
        );
        let value = scraped
            .body
            .lines()
            .find_map(|line| line.strip_prefix(&series))
            .with_context(|| format!("no {series} in {}", scraped.body))?;
        assert!(value.parse::<f64>()? > 1.7e9, "{series}{value}");
    }
    for token in ["api-old", "api-new", READ_TOKEN] {
        assert!(
            !out.contains(token) && !table.contains(token),
            "{token} shown"
        );
        assert!(!scraped.body.contains(token), "{token} on /metrics");
    }
    Ok(())
}
