//! A lapsed lease loses no acknowledged write-behind change that nobody
//! else could have taken: the placement service stops answering for longer
//! than the lease (a paused replica, as a slow election under load), the
//! daemon fences itself, writes what it held under its epochs, joins again
//! and serves its actors with their state intact.

use anyhow::Context;
use troupe_tests::cluster_harness::signal;
use troupe_tests::replicas::PlacementCluster;
use troupe_tests::scrape::{metrics_addr, scrape};
use troupe_tests::{poll_until, run_cli, type_spec, Daemon, TestApp, WAIT};

#[tokio::test]
async fn a_lease_lapse_nobody_took_over_keeps_the_changes_not_yet_flushed() -> anyhow::Result<()> {
    let cluster = PlacementCluster::start(1, &["--lease", "1s", "--heartbeat", "200ms"]).await?;
    let leader = cluster.leader().await.context(cluster.logs())?;
    let dir = tempfile::tempdir()?;
    // No periodic flush within the test: only the fence can write.
    let args = [
        "--placement",
        &cluster.peers[&leader],
        "--node",
        "d1",
        "--store",
        "memory",
        "--flush-interval",
        "1h",
        "--metrics-listen",
        "127.0.0.1:0",
    ];
    let daemon = Daemon::start(dir.path(), &args).await?;
    let _app = TestApp::attach(daemon.addr, vec![type_spec("counter")]).await?;
    let client = daemon.client().await?;
    let first = poll_until(WAIT, "the daemon to serve", || {
        let mut client = client.clone();
        async move { Ok(client.incr("counter", "c1", 1).await.ok()) }
    })
    .await
    .with_context(|| daemon.log())?;
    assert_eq!(first, 1);
    let mut c = client.clone();
    assert_eq!(c.incr("counter", "c1", 1).await?, 2);
    assert_eq!(c.incr("counter", "c1", 1).await?, 3);

    let replica = cluster.replicas[&leader].pid()?;
    signal(replica, "STOP").await?;
    let lapsed = poll_until(WAIT, "the daemon to fence itself", || {
        let log = daemon.log();
        async move { Ok(log.contains("placement lease lost").then_some(())) }
    })
    .await;
    // Placement is still stopped: the daemon cannot have rejoined yet.
    let addr = daemon.addr.to_string();
    let metrics = metrics_addr(&daemon.log()).context("no metrics address logged")?;
    let status_while_lapsed = match &lapsed {
        Ok(()) => Some((
            run_cli(&["status", "--addr", &addr]).await,
            scrape(metrics).await,
        )),
        Err(_) => None,
    };
    signal(replica, "CONT").await?;
    lapsed.with_context(|| daemon.log())?;
    let (status, scraped) = status_while_lapsed.context("no status was asked")?;
    assert_eq!(scraped?.sum("troupe_serving", &[]), 0.0);
    let (code, out, err) = status?;
    assert!(code.success(), "{err}");
    assert!(
        out.contains("NOT SERVING: its placement lease lapsed"),
        "{out}"
    );

    let after = poll_until(WAIT, "the daemon to serve again", || {
        let mut client = client.clone();
        async move { Ok(client.incr("counter", "c1", 1).await.ok()) }
    })
    .await
    .with_context(|| daemon.log())?;
    let (code, out, err) = run_cli(&["status", "--addr", &addr, "-o", "json"]).await?;
    assert!(code.success(), "{err}");
    let status: serde_json::Value = serde_json::from_str(&out)?;
    assert_eq!(status["serving"], true, "{status}");
    assert_eq!(status["standalone"], false, "a cluster member: {status}");
    assert_eq!(scrape(metrics).await?.sum("troupe_serving", &[]), 1.0);
    assert_eq!(
        after,
        4,
        "the three increments acknowledged before the lapse were kept\n{}",
        daemon.log()
    );
    Ok(())
}
