//! What needs no live daemon: an unreachable address, bad input and help,
//! shell completion.

use anyhow::{bail, ensure};

use super::cli;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_daemon_exits_3_naming_the_address_and_the_fix() -> anyhow::Result<()> {
    // A port nothing listens on: bind one, then free it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?.to_string();
    drop(listener);
    let wanted = format!("cannot reach the troupe daemon at {addr}");
    let commands: [&[&str]; 8] = [
        &["status"],
        &["actors", "list"],
        &["actors", "list", "--stored", "--type", "counter"],
        &["actors", "get", "counter", "c1"],
        &["actors", "deactivate", "counter", "c1"],
        &["state", "get", "counter", "c1", "-o", "json"],
        &["invoke", "counter", "c1", "incr", "--data", "{}"],
        &["reminders", "list"],
    ];
    for args in commands {
        let mut all = args.to_vec();
        all.extend(["--addr", &addr]);
        let run = cli(&all, &[]).await?.exit(3)?;
        assert_eq!(run.out, "", "nothing on stdout");
        run.stderr_has(&[&wanted, "troupe serve", "TROUPE_ADDR"])?;
    }
    cli(&["status"], &[("TROUPE_ADDR", &addr)])
        .await?
        .exit(3)?
        .stderr_has(&[&wanted])?;
    // No port: the URL default (80) was dialled, so the hint is the port.
    cli(&["status", "--addr", "localhost"], &[])
        .await?
        .exit(3)?
        .stderr_has(&[
            "has no port",
            "--addr localhost:7420",
            "TROUPE_ADDR=localhost:7420",
        ])?;
    cli(&["actors", "list"], &[("TROUPE_ADDR", "http://localhost")])
        .await?
        .exit(3)?
        .stderr_has(&["--addr localhost:7420", "--listen 127.0.0.1:7420"])?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_placement_service_exits_3_pointing_a_lone_daemon_to_status(
) -> anyhow::Result<()> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?.to_string();
    drop(listener);
    // A newcomer's daemon runs alone (placement in-process): `cluster status`
    // asks a placement service there is none of, so the answer must say where
    // that daemon's own view is.
    let run = cli(&["cluster", "status", "--placement", &addr], &[])
        .await?
        .exit(3)?;
    assert_eq!(run.out, "", "nothing on stdout");
    run.stderr_has(&[
        &format!("cannot reach the placement service ({addr}"),
        "troupe placement serve",
        "runs alone",
        "`troupe status`",
    ])?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_exits_2_and_help_lists_the_exit_codes() -> anyhow::Result<()> {
    let help = cli(&["--help"], &[]).await?.ok()?;
    for line in [
        "Exit codes:",
        "0  success",
        "2  bad input",
        "3  the daemon is unreachable",
        "4  not found",
        "5  the actor raised an error",
        "6  the daemon refused",
        "7  status --check or cluster status --check found a problem",
    ] {
        assert!(
            help.out.contains(line),
            "{line:?} not in --help:\n{}",
            help.out
        );
    }
    // Refused before any connection: no daemon needed.
    let bad: [&[&str]; 4] = [
        &["actors", "list", "--stored"],
        &["status", "-o", "yaml"],
        &["invoke", "counter", "c1", "incr", "--data", "{x"],
        &["status", "--addr", "not an address"],
    ];
    for args in bad {
        let run = cli(args, &[]).await?.exit(2)?;
        if run.err.is_empty() {
            bail!("`troupe {}` exited 2 without saying why", run.args);
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_scripts_for_each_shell() -> anyhow::Result<()> {
    for shell in ["bash", "zsh", "fish"] {
        let run = cli(&["completion", shell], &[]).await?.ok()?;
        ensure!(
            run.out.len() > 1000,
            "{shell}: a short script:\n{}",
            run.out
        );
        run.stdout_has(&["serve", "invoke", "addr"])?;
    }
    cli(&["completion", "powershell7"], &[]).await?.exit(2)?;
    Ok(())
}
