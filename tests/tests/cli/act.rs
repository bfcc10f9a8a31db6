//! Commands that act on the shared daemon: `invoke`, `reminders list`,
//! `actors deactivate`, and a type whose app went away.

use anyhow::{ensure, Context};
use serde_json::{json, Value};
use troupe_tests::{poll_until, type_spec, TestApp, WAIT};

use super::Fixture;

pub(crate) async fn invoke(fx: &Fixture) -> anyhow::Result<()> {
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
    // Metadata reaches the actor's turn as sent, the last of a key twice.
    let sent = fx
        .run(&[
            "invoke",
            "counter",
            "m1",
            "metadata",
            "--metadata",
            "tenant=other",
            "--metadata",
            "tenant=acme",
            "--metadata",
            "request-id=",
            "-o",
            "json",
        ])
        .await?
        .ok()?;
    assert_eq!(sent.json()?, json!({"tenant": "acme", "request-id": ""}));
    fx.run(&[
        "invoke",
        "counter",
        "m1",
        "metadata",
        "--metadata",
        "tenant",
    ])
    .await?
    .exit(2)?
    .stderr_has(&["\"tenant\" is not KEY=VALUE", "--metadata tenant=acme"])?;
    // An id longer than any the daemon takes is shown cut, with its length,
    // in the CLI's words as in the daemon's: the line stays readable.
    let long_id = "i".repeat(5_000);
    let refused = fx
        .run(&["invoke", "counter", &long_id, "incr"])
        .await?
        .exit(2)?
        .stderr_has(&["call counter/iii", "(5000 bytes).incr:"])?;
    ensure!(
        refused.err.len() < 2_000,
        "the error repeats the long id:\n{}",
        refused.err
    );
    fx.run(&["invoke", "counter", "c2", "fail"])
        .await?
        .exit(5)?
        .stderr_has(&[
            "counter/c2.fail",
            "ValueError",
            "boom",
            // where it raised, one trace line per line
            "\n      File \"counter.py\", line 7, in fail\n",
            "ValueError: boom — 100%",
        ])?;
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
    // Whether the method ran decides, not the type's name: a TypeError the
    // method raised is the actor's (exit 5); a method the type lacks is not
    // found (exit 4). Only an app that does not say is judged by the name.
    fx.run(&["invoke", "counter", "c2", "fail_type"])
        .await?
        .exit(5)?
        .stderr_has(&["the actor raised TypeError", "unsupported operand"])?;
    fx.run(&["invoke", "counter", "c2", "fail_type_unsaid"])
        .await?
        .exit(2)?
        .stderr_has(&["refused the arguments", "TypeError"])?;
    fx.run(&["invoke", "counter", "c2", "no_such_method"])
        .await?
        .exit(4)?
        .stderr_has(&["counter/c2.no_such_method", "has no method"])?;
    fx.run(&["invoke", "counter", "c2", ""])
        .await?
        .exit(2)?
        .stderr_has(&["refused", "method"])?;
    fx.run(&["invoke", "nosuch", "x", "incr"])
        .await?
        .exit(4)?
        .stderr_has(&["nosuch", "counter"])?;
    invoke_with_a_key(fx).await
}

/// A script that runs `troupe invoke` again with its key (after a timeout,
/// say) runs the method once.
async fn invoke_with_a_key(fx: &Fixture) -> anyhow::Result<()> {
    let incr = ["invoke", "counter", "c2", "incr", "--data", r#"{"by": 1}"#];
    for (key, keep, count) in [("script-1", None, "10\n"), ("script-2", Some("2h"), "11\n")] {
        for run in ["first", "second"] {
            let mut args = [&incr[..], &["--idempotency-key", key]].concat();
            args.extend(
                keep.map(|k| ["--idempotency-retention", k])
                    .iter()
                    .flatten(),
            );
            let t = fx.run(&args).await?.ok()?;
            assert_eq!(
                t.out, count,
                "{key}, {run} run: the second is the first's answer"
            );
        }
    }
    let bad: [(&[&str], &[&str]); 4] = [
        (&["--idempotency-retention", "1h"], &["--idempotency-key"]),
        (
            &["--idempotency-key", "k", "--idempotency-retention", "0s"],
            &["--idempotency-retention is zero"],
        ),
        (&["--idempotency-key", ""], &["--idempotency-key is empty"]),
        (
            &["--idempotency-key", "a\tb"],
            &["idempotency key", "control"],
        ),
    ];
    for (flags, says) in bad {
        let args = [&incr[..], flags].concat();
        fx.run(&args).await?.exit(2)?.stderr_has(says)?;
    }
    Ok(())
}

pub(crate) async fn reminders_list(fx: &Fixture) -> anyhow::Result<()> {
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

pub(crate) async fn deactivate(fx: &Fixture) -> anyhow::Result<()> {
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
pub(crate) async fn app_away(fx: &Fixture) -> anyhow::Result<()> {
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
