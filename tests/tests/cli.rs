//! The inspection CLI (`troupe status | actors | state | invoke | reminders`)
//! against a live daemon: table and JSON output, and the exit codes scripts
//! rely on (docs/cli.md). One daemon serves every case that needs one; the
//! cases run in order because `deactivate` changes what the others see.

use std::process::ExitStatus;

use anyhow::{bail, ensure, Context};
use serde_json::{json, Value};
use troupe_tests::pb;
use troupe_tests::{
    actor, daemon_with_app, poll_until, run_cli_env, type_spec, Client, Daemon, TestApp, WAIT,
};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_against_one_live_daemon() -> anyhow::Result<()> {
    let fx = Fixture::start().await?;
    status(&fx).await.context("status")?;
    actors_list(&fx).await.context("actors list")?;
    actors_get(&fx).await.context("actors get")?;
    state_get(&fx).await.context("state get")?;
    bytes_that_are_not_json(&fx).await.context("raw values")?;
    invoke(&fx).await.context("invoke")?;
    reminders_list(&fx).await.context("reminders list")?;
    deactivate(&fx).await.context("actors deactivate")?;
    app_away(&fx).await.context("an app that went away")?;
    Ok(())
}

async fn status(fx: &Fixture) -> anyhow::Result<()> {
    let s = fx.run(&["status", "-o", "json"]).await?.ok()?.json()?;
    assert_eq!(s["version"], env!("CARGO_PKG_VERSION"), "{s}");
    assert_eq!(s["listen"], fx.addr.as_str(), "{s}");
    assert!(s["node"].as_str().is_some_and(|n| !n.is_empty()), "{s}");
    assert!(
        s["store"].as_str().is_some_and(|n| n.starts_with("sled")),
        "{s}"
    );
    assert_eq!(s["active_actors"], 4, "{s}");
    assert_eq!(s["pending_calls"], 0, "{s}");
    assert_eq!(s["max_pending_calls"], 100_000, "{s}");
    assert!(s["uptime_ms"].is_u64(), "{s}");
    assert!(s["started_unix_ms"].as_u64().is_some_and(|t| t > 0), "{s}");
    assert!(
        s["started"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{s}"
    );
    let flush = &s["flush"];
    assert_eq!(flush["dirty_actors"], 3, "the three counters: {s}");
    assert!(flush["batches"].as_u64().is_some_and(|b| b >= 1), "{s}");
    assert!(flush["last_flush_unix_ms"].as_u64().is_some(), "{s}");
    assert_eq!(flush["failing"], false, "{s}");
    assert_eq!(flush["last_error"], Value::Null, "{s}");
    let ty = |name: &str| {
        s["types"]
            .as_array()
            .and_then(|ts| ts.iter().find(|t| t["name"] == name))
            .cloned()
            .with_context(|| format!("no type {name} in {s}"))
    };
    let counter = ty("counter")?;
    assert_eq!(counter["apps"], json!(["rust-test-app"]));
    assert_eq!(counter["active_actors"], 3);
    assert_eq!(counter["state_mode"], "WRITE_BEHIND");
    let vault = ty("vault")?;
    assert_eq!(vault["state_mode"], "DURABLE", "{vault}");
    assert_eq!(vault["idle_timeout_ms"], 300_000, "{vault}");
    assert_eq!(vault["max_mailbox"], 7, "{vault}");
    assert_eq!(vault["reentrant"], false, "{vault}");

    let t = fx.run(&["status"]).await?.ok()?;
    assert_eq!(t.field("listen"), Some(fx.addr.as_str()), "{}", t.out);
    assert_eq!(t.field("active actors"), Some("4"), "{}", t.out);
    assert!(t.field("store").is_some_and(|s| s.starts_with("sled")));
    assert!(t.out.contains("TYPE  "), "{}", t.out);
    let vault_row = t
        .out
        .lines()
        .find(|l| l.starts_with("vault "))
        .with_context(|| format!("no vault row:\n{}", t.out))?;
    for cell in ["DURABLE", "5m", "7", "rust-test-app"] {
        assert!(vault_row.contains(cell), "{cell} not in {vault_row:?}");
    }

    // TROUPE_ADDR stands in for --addr.
    let s = cli(&["status", "-o", "json"], &[("TROUPE_ADDR", &fx.addr)])
        .await?
        .ok()?
        .json()?;
    assert_eq!(s["listen"], fx.addr.as_str());
    Ok(())
}

async fn actors_list(fx: &Fixture) -> anyhow::Result<()> {
    let rows = fx
        .run(&["actors", "list", "-o", "json"])
        .await?
        .ok()?
        .json()?;
    let ids: Vec<(&str, &str)> = rows
        .as_array()
        .context("not an array")?
        .iter()
        .filter_map(|r| Some((r["type"].as_str()?, r["id"].as_str()?)))
        .collect();
    assert_eq!(
        ids,
        [
            ("counter", "c1"),
            ("counter", "c2"),
            ("counter", "r1"),
            ("vault", "v1")
        ]
    );
    let c1 = &rows[0];
    assert_eq!(c1["status"], "IDLE", "{c1}");
    assert_eq!(c1["turns"], 2, "{c1}");
    assert_eq!(c1["mailbox"], 0, "{c1}");
    assert_eq!(c1["dirty"], true, "{c1}");
    assert!(c1["idle_ms"].is_u64(), "{c1}");
    assert_eq!(rows[3]["dirty"], false, "durable state is stored: {rows}");

    let vaults = fx
        .run(&["actors", "list", "--type", "vault", "-o", "json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(vaults.as_array().map(Vec::len), Some(1), "{vaults}");

    let t = fx.run(&["actors", "list"]).await?.ok()?;
    let rows = t.rows();
    assert_eq!(
        rows[0],
        ["TYPE", "ID", "STATUS", "MAILBOX", "TURNS", "DIRTY", "IDLE"]
    );
    assert_eq!(rows.len(), 5, "{}", t.out);
    assert_eq!(rows[1][..6], ["counter", "c1", "IDLE", "0", "2", "yes"]);
    assert_eq!(rows[4][..6], ["vault", "v1", "IDLE", "0", "1", "no"]);

    let none = fx
        .run(&["actors", "list", "--type", "nosuch"])
        .await?
        .ok()?;
    assert_eq!(none.out, "no active actors of type nosuch\n");
    let none = fx
        .run(&["actors", "list", "--type", "nosuch", "-o", "json"])
        .await?
        .ok()?;
    assert_eq!(none.json()?, json!([]));

    // Stored state: the durable vault has it; the counters not yet.
    let stored = fx
        .run(&[
            "actors", "list", "--stored", "--type", "vault", "-o", "json",
        ])
        .await?
        .ok()?
        .json()?;
    assert_eq!(
        stored,
        json!([{"type": "vault", "id": "v1", "active": true}])
    );
    let t = fx
        .run(&["actors", "list", "--stored", "--type", "vault"])
        .await?
        .ok()?;
    assert_eq!(
        t.rows(),
        [vec!["TYPE", "ID", "ACTIVE"], vec!["vault", "v1", "yes"]]
    );
    let t = fx
        .run(&["actors", "list", "--stored", "--type", "counter"])
        .await?
        .ok()?;
    assert_eq!(t.out, "no stored actors of type counter\n");
    fx.run(&["actors", "list", "--stored"])
        .await?
        .exit(2)?
        .stderr_has(&["--type"])?;
    Ok(())
}

async fn actors_get(fx: &Fixture) -> anyhow::Result<()> {
    let d = fx
        .run(&["actors", "get", "counter", "c1", "-o", "json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!((&d["type"], &d["id"]), (&json!("counter"), &json!("c1")));
    assert_eq!(d["status"], "IDLE", "{d}");
    assert_eq!(d["app"], "rust-test-app", "{d}");
    assert!(d["node"].as_str().is_some_and(|n| !n.is_empty()), "{d}");
    assert!(
        d["activated_unix_ms"].as_u64().is_some_and(|t| t > 0),
        "{d}"
    );
    assert!(
        d["activated"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{d}"
    );
    assert!(d["last_active_unix_ms"].as_u64().is_some(), "{d}");
    assert_eq!(d["mailbox"], 0, "{d}");
    assert_eq!(d["turns"], 2, "{d}");
    assert_eq!(d["state"], json!({"count": 5}), "{d}");
    assert_eq!(d["dirty_keys"], json!(["count"]), "{d}");
    assert_eq!(d["dirty"], true, "{d}");
    assert_eq!(d["stored"], false, "never flushed yet: {d}");
    assert_eq!(d["state_mode"], "WRITE_BEHIND", "{d}");
    let reminders = d["reminders"].as_array().context("no reminders")?;
    assert_eq!(reminders.len(), 1, "{d}");
    assert_eq!(reminders[0]["name"], "tick");
    assert_eq!(reminders[0]["period_ms"], 600_000);
    assert_eq!(d["alarm"]["alarm"], true, "{d}");
    assert_eq!(d["alarm"]["name"], "(alarm)", "{d}");
    assert_eq!(d["timers"][0]["name"], "t1", "{d}");
    assert_eq!(d["timers"][0]["period_ms"], 0, "{d}");
    assert!(d["timers"][0]["next_due_unix_ms"].is_u64(), "{d}");

    let t = fx.run(&["actors", "get", "counter", "c1"]).await?.ok()?;
    assert_eq!(t.field("actor"), Some("counter/c1"), "{}", t.out);
    assert_eq!(t.field("status"), Some("IDLE"));
    assert_eq!(t.field("app"), Some("rust-test-app"));
    assert_eq!(t.field("turns"), Some("2"));
    assert_eq!(t.field("dirty"), Some("yes"));
    assert_eq!(t.field("stored"), Some("no"));
    assert_eq!(t.field("state mode"), Some("WRITE_BEHIND"));
    assert!(t.field("activated").is_some_and(|v| v.ends_with('Z')));
    let rows = t.rows();
    assert!(rows.contains(&vec!["count", "*", "5"]), "{}", t.out);
    let tick = t
        .out
        .lines()
        .find(|l| l.starts_with("tick "))
        .with_context(|| format!("no reminder row:\n{}", t.out))?;
    assert!(tick.contains("10m"), "{tick}");
    assert!(t.out.contains("(alarm) "), "{}", t.out);
    assert!(t.out.lines().any(|l| l.starts_with("t1 ")), "{}", t.out);

    // Durable: stored, nothing dirty.
    let v = fx
        .run(&["actors", "get", "vault", "v1", "-o", "json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(v["state"], json!({"count": 7, "copy": 7}), "{v}");
    assert_eq!(v["stored"], true, "{v}");
    assert_eq!(v["dirty_keys"], json!([]), "{v}");
    assert_eq!(v["state_mode"], "DURABLE", "{v}");
    assert_eq!(v["alarm"], Value::Null, "{v}");

    for output in ["table", "json"] {
        fx.run(&["actors", "get", "counter", "nosuch", "-o", output])
            .await?
            .exit(4)?
            .stderr_has(&["counter/nosuch"])?;
    }
    Ok(())
}

async fn state_get(fx: &Fixture) -> anyhow::Result<()> {
    let t = fx.run(&["state", "get", "counter", "c1"]).await?.ok()?;
    assert_eq!(t.rows(), [vec!["KEY", "VALUE"], vec!["count", "5"]]);
    let one = fx
        .run(&["state", "get", "counter", "c1", "count"])
        .await?
        .ok()?;
    assert_eq!(one.out, "5\n");
    let j = fx
        .run(&["state", "get", "counter", "c1", "count", "-o", "json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(j, json!({"active": true, "state": {"count": 5}}));
    let j = fx
        .run(&["state", "get", "vault", "v1", "-o", "json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(j, json!({"active": true, "state": {"count": 7, "copy": 7}}));

    for output in ["table", "json"] {
        let missing = fx
            .run(&["state", "get", "counter", "c1", "nope", "-o", output])
            .await?
            .exit(4)?
            .stderr_has(&["counter/c1", "\"nope\"", "its keys: count"])?;
        assert_eq!(missing.out, "", "nothing on stdout for a missing key");
    }

    // An actor with no state at all is not an error: virtual actors exist.
    let ghost = fx.run(&["state", "get", "counter", "ghost"]).await?.ok()?;
    assert_eq!(ghost.out, "counter/ghost has no state\n");
    let ghost = fx
        .run(&["state", "get", "counter", "ghost", "-o", "json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(ghost, json!({"active": false, "state": {}}));
    Ok(())
}

async fn bytes_that_are_not_json(fx: &Fixture) -> anyhow::Result<()> {
    // State: bytes ff 00 01 are base64 "/wAB".
    let d = fx
        .run(&["actors", "get", "counter", "r1", "-o", "json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(d["state"], json!({"raw": {"base64": "/wAB"}}), "{d}");
    let t = fx.run(&["actors", "get", "counter", "r1"]).await?.ok()?;
    assert!(
        t.rows().contains(&vec!["raw", "*", "base64:/wAB"]),
        "{}",
        t.out
    );
    let t = fx
        .run(&["state", "get", "counter", "r1", "raw"])
        .await?
        .ok()?;
    assert_eq!(t.out, "base64:/wAB\n");
    let j = fx
        .run(&["state", "get", "counter", "r1", "-o", "json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(j["state"], json!({"raw": {"base64": "/wAB"}}));

    // A result sent as BYTES is base64 even when the bytes are JSON
    // (--payload: these bytes exactly, no arguments around them).
    let data = r#""hi""#;
    let j = fx
        .run(&[
            "invoke",
            "counter",
            "r2",
            "put_raw",
            "--payload",
            data,
            "-o",
            "json",
        ])
        .await?
        .ok()?
        .json()?;
    assert_eq!(j, json!({"base64": "ImhpIg=="}));
    let t = fx
        .run(&["invoke", "counter", "r2", "put_raw", "--payload", data])
        .await?
        .ok()?;
    assert_eq!(t.out, "base64:ImhpIg==\n");
    // ... and the same bytes as state are JSON, so they show as JSON.
    let t = fx
        .run(&["state", "get", "counter", "r2", "raw"])
        .await?
        .ok()?;
    assert_eq!(t.out, "\"hi\"\n");
    Ok(())
}

async fn invoke(fx: &Fixture) -> anyhow::Result<()> {
    // An object is keyword arguments, as the Python client's `invoke` takes it.
    let by4 = r#"{"by": 4}"#;
    let t = fx
        .run(&["invoke", "counter", "c2", "incr", "--data", by4])
        .await?
        .ok()?;
    assert_eq!(t.out, "5\n");
    let j = fx
        .run(&[
            "invoke", "counter", "c2", "incr", "--data", by4, "-o", "json",
        ])
        .await?
        .ok()?;
    assert_eq!(j.json()?, json!(9));

    let kwargs = r#"{"sku": "x-1"}"#;
    for (data, flag) in [
        (kwargs, "--data"),
        (r#"["x-1"]"#, "--data"),
        (r#""x-1""#, "--data"),
    ]
    .into_iter()
    .chain([(r#"{"args": [], "kwargs": {"sku": "x-1"}}"#, "--payload")])
    {
        let t = fx
            .run(&["invoke", "counter", "k1", "add_item", flag, data])
            .await?
            .ok()?;
        assert_eq!(t.out, "\"x-1\"\n", "{flag} {data}");
    }
    // Arguments the method does not take are the caller's mistake: exit 2;
    // --data in the payload's shape gets pointed at --payload.
    let refused: [(&str, &str, &[&str]); 3] = [
        (
            "--data",
            r#"{"qty": 1}"#,
            &["refused the arguments", "TypeError", "'qty'"],
        ),
        (
            "--payload",
            "[1]",
            &["refused the arguments", "PayloadError"],
        ),
        (
            "--data",
            r#"{"kwargs": {"sku": "x"}}"#,
            &["'kwargs'", "--payload"],
        ),
    ];
    for (flag, data, says) in refused {
        let add = ["invoke", "counter", "k1", "add_item", flag, data];
        fx.run(&add).await?.exit(2)?.stderr_has(says)?;
    }
    fx.run(&["invoke", "counter", "c2", "fail"])
        .await?
        .exit(5)?
        .stderr_has(&["counter/c2.fail", "ValueError", "boom"])?;
    fx.run(&["invoke", "counter", "c2", "incr", "--data", "{nope"])
        .await?
        .exit(2)?
        .stderr_has(&["--data is not JSON", "--data '[5]'"])?;
    fx.run(&[
        "invoke",
        "counter",
        "c2",
        "incr",
        "--data",
        "{}",
        "--payload",
        "{}",
    ])
    .await?
    .exit(2)?;
    fx.run(&["invoke", "counter", "c2", ""])
        .await?
        .exit(2)?
        .stderr_has(&["refused", "method"])?;
    fx.run(&["invoke", "nosuch", "x", "incr"])
        .await?
        .exit(4)?
        .stderr_has(&["nosuch", "counter"])?;
    Ok(())
}

async fn reminders_list(fx: &Fixture) -> anyhow::Result<()> {
    let j = fx
        .run(&[
            "reminders",
            "list",
            "--type",
            "counter",
            "--id",
            "c1",
            "-o",
            "json",
        ])
        .await?
        .ok()?
        .json()?;
    let rows = j.as_array().context("not an array")?;
    assert_eq!(rows.len(), 2, "{j}");
    let tick = rows
        .iter()
        .find(|r| r["name"] == "tick")
        .context("no tick")?;
    assert_eq!(tick["alarm"], false);
    assert_eq!(tick["period_ms"], 600_000);
    assert_eq!(tick["attempts"], 0);
    assert_eq!(tick["fired"], 0);
    assert!(tick["next_due_unix_ms"].is_u64(), "{tick}");
    assert!(
        tick["next_due"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{tick}"
    );
    assert_eq!(tick["until"], Value::Null, "{tick}");
    assert!(rows
        .iter()
        .any(|r| r["alarm"] == true && r["name"] == "(alarm)"));

    let t = fx
        .run(&["reminders", "list", "--type", "counter"])
        .await?
        .ok()?;
    assert!(t.out.starts_with("TYPE "), "{}", t.out);
    assert!(t.out.contains("NEXT DUE"), "{}", t.out);
    let tick = t
        .rows()
        .into_iter()
        .find(|r| r.get(2) == Some(&"tick"))
        .with_context(|| format!("no tick row:\n{}", t.out))?;
    assert_eq!(tick[..2], ["counter", "c1"]);
    assert!(tick.contains(&"10m"), "{tick:?}");

    let none = fx
        .run(&["reminders", "list", "--type", "vault"])
        .await?
        .ok()?;
    assert_eq!(
        none.out,
        "no reminders or alarms for actors of type vault\n"
    );
    let none = fx
        .run(&["reminders", "list", "--type", "vault", "-o", "json"])
        .await?
        .ok()?;
    assert_eq!(none.json()?, json!([]));
    Ok(())
}

async fn deactivate(fx: &Fixture) -> anyhow::Result<()> {
    let t = fx
        .run(&["actors", "deactivate", "counter", "c1"])
        .await?
        .ok()?;
    assert!(t.out.starts_with("deactivated counter/c1"), "{}", t.out);
    fx.app
        .wait_for("the app to deactivate c1", WAIT, |e| {
            e.deactivations
                .iter()
                .any(|((ty, id), _)| ty == "counter" && id == "c1")
        })
        .await?;

    let rows = fx
        .run(&["actors", "list", "-o", "json"])
        .await?
        .ok()?
        .json()?;
    let listed = rows
        .as_array()
        .context("not an array")?
        .iter()
        .any(|r| r["id"] == "c1");
    assert!(!listed, "c1 still listed: {rows}");

    let d = fx
        .run(&["actors", "get", "counter", "c1", "-o", "json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(d["status"], "INACTIVE", "{d}");
    assert_eq!(d["stored"], true, "deactivation flushes: {d}");
    assert_eq!(d["dirty"], false, "{d}");
    assert_eq!(d["dirty_keys"], json!([]), "{d}");
    assert_eq!(d["state"], json!({"count": 5}), "{d}");
    assert_eq!(d["app"], Value::Null, "{d}");
    assert_eq!(d["activated_unix_ms"], Value::Null, "{d}");
    assert_eq!(
        d["timers"],
        json!([]),
        "timers die with the activation: {d}"
    );
    assert_eq!(
        d["reminders"].as_array().map(Vec::len),
        Some(1),
        "reminders stay: {d}"
    );
    let t = fx.run(&["actors", "get", "counter", "c1"]).await?.ok()?;
    assert_eq!(t.field("status"), Some("INACTIVE"), "{}", t.out);
    assert_eq!(t.field("stored"), Some("yes"));
    assert_eq!(t.field("app"), Some("-"));
    assert!(t.rows().contains(&vec!["count", "5"]), "{}", t.out);

    // Again: nothing to do, and still a success.
    let again = fx
        .run(&["actors", "deactivate", "counter", "c1", "-o", "json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(
        again,
        json!({"type": "counter", "id": "c1", "deactivated": false})
    );
    let again = fx
        .run(&["actors", "deactivate", "counter", "c1"])
        .await?
        .ok()?;
    assert_eq!(again.out, "counter/c1 was not active; nothing to do\n");

    let stored = fx
        .run(&[
            "actors", "list", "--stored", "--type", "counter", "-o", "json",
        ])
        .await?
        .ok()?
        .json()?;
    let stored = stored.as_array().context("not an array")?;
    assert!(
        stored.contains(&json!({"type": "counter", "id": "c1", "active": false})),
        "{stored:?}"
    );

    // The next call activates it again, with its state.
    let mut client = fx.client.clone();
    assert_eq!(client.incr("counter", "c1", 1).await?, 6);
    Ok(())
}

/// A type whose app went away: calls wait --host-wait, then UNAVAILABLE,
/// which is the "daemon refused" exit code.
async fn app_away(fx: &Fixture) -> anyhow::Result<()> {
    let app = TestApp::attach(fx.daemon.addr, vec![type_spec("gone")]).await?;
    app.detach();
    // Status keeps listing the type with no app: the runtime still knows
    // it, so calls wait for its app rather than calling it unknown.
    poll_until(WAIT, "the daemon to see the app leave", || async move {
        let s = fx.run(&["status", "-o", "json"]).await?.ok()?.json()?;
        let appless = s["types"].as_array().is_some_and(|ts| {
            ts.iter()
                .any(|t| t["name"] == "gone" && t["apps"].as_array().is_some_and(|a| a.is_empty()))
        });
        Ok(appless.then_some(()))
    })
    .await?;
    fx.run(&["status"])
        .await?
        .ok()?
        .stdout_has(&["gone", "(no app connected)"])?;
    fx.run(&["invoke", "gone", "x", "incr"])
        .await?
        .exit(6)?
        .stderr_has(&["UNAVAILABLE", "gone"])?;
    Ok(())
}

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
