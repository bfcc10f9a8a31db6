//! Read-only commands against the shared daemon: `status`, `actors list|get`,
//! `state get`, and values that are not JSON.

use anyhow::Context;
use serde_json::{json, Value};

use super::{cli, Fixture};

pub(crate) async fn status(fx: &Fixture) -> anyhow::Result<()> {
    let s = fx.run(&["status", "-o", "json"]).await?.ok()?.json()?;
    assert_eq!(s["version"], env!("CARGO_PKG_VERSION"), "{s}");
    assert_eq!(s["listen"], fx.addr.as_str(), "{s}");
    assert!(s["node"].as_str().is_some_and(|n| !n.is_empty()), "{s}");
    assert!(
        s["store"].as_str().is_some_and(|n| n.starts_with("sled")),
        "{s}"
    );
    // sled tells its size on disk: at least the segment it writes to.
    assert!(s["store_bytes"].as_u64().is_some_and(|n| n > 0), "{s}");
    assert_eq!(s["active_actors"], 4, "{s}");
    assert_eq!(s["pending_calls"], 0, "{s}");
    assert_eq!(s["max_pending_calls"], 100_000, "{s}");
    assert_eq!(s["standalone"], true, "started without --placement: {s}");
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
    assert!(
        t.field("placement")
            .is_some_and(|p| p.starts_with("in-process: this daemon runs alone")),
        "{}",
        t.out
    );
    assert!(
        t.field("store")
            .is_some_and(|s| s.starts_with("sled") && s.ends_with(" on disk)")),
        "{}",
        t.out
    );
    assert!(t.out.contains("TYPE  "), "{}", t.out);
    let vault_row = t
        .out
        .lines()
        .find(|l| l.starts_with("vault "))
        .with_context(|| format!("no vault row:\n{}", t.out))?;
    for cell in ["DURABLE", "5m", "7", "rust-test-app"] {
        assert!(vault_row.contains(cell), "{cell} not in {vault_row:?}");
    }

    // A healthy daemon passes the check, and says so.
    fx.run(&["status", "--check"])
        .await?
        .ok()?
        .stdout_has(&["\nno problems found\n"])?;
    let checked = fx
        .run(&["status", "--check", "-o", "json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(checked["problems"], json!([]), "{checked}");

    // TROUPE_ADDR stands in for --addr.
    let s = cli(&["status", "-o", "json"], &[("TROUPE_ADDR", &fx.addr)])
        .await?
        .ok()?
        .json()?;
    assert_eq!(s["listen"], fx.addr.as_str());
    Ok(())
}

pub(crate) async fn actors_list(fx: &Fixture) -> anyhow::Result<()> {
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
    // A misspelt type reads as one with nothing active: say so, on stderr.
    assert_eq!(
        none.err,
        "note: no app attached to this daemon hosts actor type \"nosuch\" (its apps host counter, vault); check the type name\n"
    );
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

pub(crate) async fn actors_get(fx: &Fixture) -> anyhow::Result<()> {
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

pub(crate) async fn state_get(fx: &Fixture) -> anyhow::Result<()> {
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
    let none = json!({});
    assert_eq!(
        j,
        json!({"active": true, "state": {"count": 5}, "expires": none, "expires_unix_ms": none})
    );
    let j = fx
        .run(&["state", "get", "vault", "v1", "-o", "json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(
        j,
        json!({"active": true, "state": {"count": 7, "copy": 7}, "expires": none, "expires_unix_ms": none})
    );

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
    assert_eq!(ghost.err, "", "a hosted type gets no note");
    fx.run(&["state", "get", "counters", "c1"])
        .await?
        .ok()?
        .stdout_has(&["counters/c1 has no state"])?
        .stderr_has(&["hosts actor type \"counters\" (its apps host counter, vault)"])?;
    let ghost = fx
        .run(&["state", "get", "counter", "ghost", "-o", "json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(
        ghost,
        json!({"active": false, "state": {}, "expires": {}, "expires_unix_ms": {}})
    );
    Ok(())
}

pub(crate) async fn bytes_that_are_not_json(fx: &Fixture) -> anyhow::Result<()> {
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
