//! `troupe tell`, and the deadline `--timeout` sends with `invoke`.

use serde_json::json;
use troupe_tests::{poll_until, WAIT};

use super::Fixture;

/// The count of a counter, read through the CLI.
async fn count(fx: &Fixture, id: &str) -> anyhow::Result<i64> {
    Ok(fx
        .run(&["invoke", "counter", id, "get", "-o", "json"])
        .await?
        .ok()?
        .json()?
        .as_i64()
        .unwrap_or(-1))
}

/// The daemon answers a tell once it has the message; the method runs after
/// it, and a durable tell sent again with its key runs once.
pub(crate) async fn tell(fx: &Fixture) -> anyhow::Result<()> {
    let by = |n: i64| format!(r#"{{"by": {n}}}"#);
    // Queued before the answer, so a call after it runs after it.
    let t = fx
        .run(&[
            "tell",
            "counter",
            "t1",
            "incr",
            "--data",
            &by(3),
            "--best-effort",
        ])
        .await?
        .ok()?;
    assert_eq!(t.out, "sent counter/t1.incr: queued in memory\n");
    assert_eq!(count(fx, "t1").await?, 3);
    let t = fx
        .run(&["tell", "counter", "t1", "incr", "--data", &by(4)])
        .await?
        .ok()?;
    assert_eq!(
        t.out,
        "sent counter/t1.incr: taken, as its type delivers tells\n"
    );
    assert_eq!(count(fx, "t1").await?, 7);

    let durable = [
        "tell",
        "counter",
        "t2",
        "incr",
        "--data",
        r#"{"by": 5}"#,
        "--durable",
        "--idempotency-key",
        "tell-1",
        "-o",
        "json",
    ];
    for run in ["first", "second"] {
        let j = fx.run(&durable).await?.ok()?.json()?;
        assert_eq!(
            j,
            json!({"actor": {"type": "counter", "id": "t2"}, "method": "incr", "delivery": "durable"}),
            "{run} run"
        );
    }
    // Delivered from the inbox in the order stored: had the second run
    // stored its copy, it would run before this one.
    fx.run(&["tell", "counter", "t2", "incr", "--durable"])
        .await?
        .ok()?
        .stdout_has(&["stored in its inbox"])?;
    let settled = poll_until(WAIT, "the durable tells to run", || async {
        let n = count(fx, "t2").await?;
        Ok((n >= 6).then_some(n))
    })
    .await?;
    assert_eq!(settled, 6, "5 once, then 1");

    fx.run(&[
        "tell",
        "counter",
        "t1",
        "incr",
        "--durable",
        "--best-effort",
    ])
    .await?
    .exit(2)?
    .stderr_has(&["--durable", "--best-effort"])?;
    fx.run(&["tell", "counter", "t1", "incr", "--data", "{nope"])
        .await?
        .exit(2)?
        .stderr_has(&["--data is not JSON"])?;
    fx.run(&["tell", "counter", "t1", ""])
        .await?
        .exit(2)?
        .stderr_has(&["tell counter/t1", "method"])?;
    Ok(())
}

/// `--timeout` is the call's deadline: past it the command says so, and
/// what makes running it again safe.
pub(crate) async fn timeout(fx: &Fixture) -> anyhow::Result<()> {
    let sleep = |ms: u64, timeout: &'static str| {
        let data = format!(r#"{{"ms": {ms}}}"#);
        async move {
            fx.run(&[
                "invoke",
                "counter",
                "s1",
                "sleep",
                "--data",
                &data,
                "--timeout",
                timeout,
            ])
            .await
        }
    };
    sleep(0, "10s").await?.ok()?;
    sleep(2_000, "300ms").await?.exit(6)?.stderr_has(&[
        "call counter/s1.sleep: no answer within --timeout 300ms",
        "DEADLINE_EXCEEDED",
        "--idempotency-key",
    ])?;
    sleep(0, "0s")
        .await?
        .exit(2)?
        .stderr_has(&["--timeout is zero"])?;
    Ok(())
}
