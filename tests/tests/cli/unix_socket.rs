//! The CLI on a daemon's Unix socket (`troupe serve --listen-unix`,
//! `--addr unix:PATH`).

use super::cli;
use troupe_tests::Daemon;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_over_the_daemons_unix_socket() -> anyhow::Result<()> {
    // tempfile's default dir keeps the path under the 108 bytes a socket takes.
    let dir = tempfile::tempdir()?;
    let sock = dir.path().join("troupe.sock");
    let sock_text = sock.display().to_string();
    let mut daemon =
        Daemon::start(&dir.path().join("data"), &["--listen-unix", &sock_text]).await?;
    let addr = format!("unix:{sock_text}");
    let run = cli(&["status", "-o", "json", "--addr", &addr], &[])
        .await?
        .ok()?;
    run.json()?;
    // TLS options make no sense there: said, not attempted.
    cli(
        &["status", "--addr", &addr],
        &[("TROUPE_TLS_CA", "/nonexistent/ca.pem")],
    )
    .await?
    .exit(2)?
    .stderr_has(&["Unix socket", "serves without TLS"])?;
    daemon.terminate().await?;
    // Nothing answers there now: unreachable, with the fix.
    cli(&["status", "--addr", &addr], &[])
        .await?
        .exit(3)?
        .stderr_has(&["cannot reach the troupe daemon at unix:", "--listen-unix"])?;
    Ok(())
}
