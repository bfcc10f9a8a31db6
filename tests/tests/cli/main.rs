//! The client CLI (`troupe status | actors | state | invoke | tell | reminders`)
//! against a live daemon: table and JSON output, and the exit codes scripts
//! rely on (docs/cli.md). One daemon serves every case that needs one; the
//! cases run in order because `deactivate` changes what the others see.
//!
//! `inspect.rs` has the read-only commands, `act.rs` the ones that change
//! things (`tell.rs` one-way messages and deadlines, `reminders_delete.rs`
//! deleting schedules, `reminders_set.rs` setting them on a daemon of its
//! own, on the test clock), `offline.rs` what needs no daemon (or an
//! unreachable one).

mod act;
mod inspect;
mod offline;
mod reminders_delete;
mod reminders_set;
mod tell;
mod unix_socket;

use std::process::ExitStatus;

use anyhow::{ensure, Context};
use serde_json::Value;
use troupe_tests::pb;
use troupe_tests::{actor, daemon_with_app, run_cli_env, type_spec, Client, Daemon, TestApp};

/// One run of the CLI.
#[derive(Debug)]
struct Run {
    args: String,
    status: ExitStatus,
    out: String,
    err: String,
}

impl Run {
    /// Fails unless the command exited with `code`.
    fn exit(self, code: i32) -> anyhow::Result<Run> {
        ensure!(
            self.status.code() == Some(code),
            "`troupe {}` exited {:?}, expected {code}\nstdout:\n{}\nstderr:\n{}",
            self.args,
            self.status.code(),
            self.out,
            self.err
        );
        Ok(self)
    }

    fn ok(self) -> anyhow::Result<Run> {
        self.exit(0)
    }

    fn json(&self) -> anyhow::Result<Value> {
        serde_json::from_str(&self.out)
            .with_context(|| format!("`troupe {}` printed no JSON:\n{}", self.args, self.out))
    }

    /// The table's lines split into cells (no cell here holds a space).
    fn rows(&self) -> Vec<Vec<&str>> {
        self.out
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect()
    }

    /// The value of a `label  value` line.
    fn field(&self, label: &str) -> Option<&str> {
        self.out.lines().find_map(|line| {
            let rest = line.strip_prefix(label)?;
            rest.starts_with("  ").then(|| rest.trim())
        })
    }

    fn stdout_has(self, parts: &[&str]) -> anyhow::Result<Run> {
        for part in parts {
            ensure!(
                self.out.contains(part),
                "`troupe {}`: stdout lacks {part:?}:\n{}",
                self.args,
                self.out
            );
        }
        Ok(self)
    }

    fn stderr_has(self, parts: &[&str]) -> anyhow::Result<Run> {
        for part in parts {
            ensure!(
                self.err.contains(part),
                "`troupe {}`: stderr lacks {part:?}:\n{}",
                self.args,
                self.err
            );
        }
        Ok(self)
    }
}

async fn cli(args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Run> {
    let (status, out, err) = run_cli_env(args, env).await?;
    Ok(Run {
        args: args.join(" "),
        status,
        out,
        err,
    })
}

/// The daemon every case inspects, with a known set of actors.
struct Fixture {
    _dir: tempfile::TempDir,
    daemon: Daemon,
    app: TestApp,
    client: Client,
    addr: String,
}

impl Fixture {
    /// Runs the CLI against the fixture's daemon.
    async fn run(&self, args: &[&str]) -> anyhow::Result<Run> {
        let mut all = args.to_vec();
        all.extend(["--addr", &self.addr]);
        cli(&all, &[]).await
    }

    /// counter/c1 (count 5 in two turns, a reminder, the alarm and a timer),
    /// counter/c2 (count 1), counter/r1 (key "raw": bytes that are not JSON)
    /// and vault/v1 (durable: count and copy 7). Write-behind never flushes
    /// on its own here, so the counters stay dirty until deactivated.
    async fn start() -> anyhow::Result<Fixture> {
        let vault = pb::ActorTypeSpec {
            name: "vault".into(),
            state_mode: pb::StateMode::Durable as i32,
            idle_timeout_ms: 300_000,
            max_mailbox: 7,
            ..Default::default()
        };
        let args = ["--flush-interval", "1h", "--host-wait", "500ms"];
        let (dir, daemon, app, mut client) =
            daemon_with_app(&args, vec![type_spec("counter"), vault]).await?;
        // The vault first: its group commit would also flush whatever is dirty.
        client
            .invoke("vault", "v1", "incr_pair", r#"{"kwargs": {"by": 7}}"#)
            .await?;
        client.incr("counter", "c1", 2).await?;
        client.incr("counter", "c1", 3).await?;
        client.incr("counter", "c2", 1).await?;
        client
            .0
            .invoke(pb::InvokeRequest {
                actor: Some(actor("counter", "r1")),
                method: "put_raw".into(),
                payload: Some(pb::Payload {
                    data: vec![0xff, 0x00, 0x01].into(),
                    content_type: pb::ContentType::Bytes as i32,
                }),
                ..Default::default()
            })
            .await?;
        client
            .0
            .set_reminder(pb::SetReminderRequest {
                actor: Some(actor("counter", "c1")),
                name: "tick".into(),
                due: "1h".into(),
                period: "PT10M".into(),
                ..Default::default()
            })
            .await?;
        client
            .0
            .set_alarm(pb::SetAlarmRequest {
                actor: Some(actor("counter", "c1")),
                at: "2h".into(),
                ..Default::default()
            })
            .await?;
        client
            .0
            .set_timer(pb::SetTimerRequest {
                actor: Some(actor("counter", "c1")),
                name: "t1".into(),
                due: "1h".into(),
                ..Default::default()
            })
            .await?;
        let addr = daemon.addr.to_string();
        Ok(Fixture {
            _dir: dir,
            daemon,
            app,
            client,
            addr,
        })
    }
}
use act::{app_away, deactivate, invoke, reminders_list};
use inspect::{actors_get, actors_list, bytes_that_are_not_json, state_get, status};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_against_one_live_daemon() -> anyhow::Result<()> {
    let fx = Fixture::start().await?;
    status(&fx).await.context("status")?;
    actors_list(&fx).await.context("actors list")?;
    actors_get(&fx).await.context("actors get")?;
    state_get(&fx).await.context("state get")?;
    bytes_that_are_not_json(&fx).await.context("raw values")?;
    invoke(&fx).await.context("invoke")?;
    tell::tell(&fx).await.context("tell")?;
    tell::timeout(&fx).await.context("invoke --timeout")?;
    reminders_list(&fx).await.context("reminders list")?;
    reminders_delete::reminders_delete(&fx)
        .await
        .context("reminders delete")?;
    deactivate(&fx).await.context("actors deactivate")?;
    app_away(&fx).await.context("an app that went away")?;
    Ok(())
}
