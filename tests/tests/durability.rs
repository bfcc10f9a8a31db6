//! State reaches storage: on graceful shutdown and on idle deactivation.

use troupe_tests::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn state_survives_a_graceful_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    // A long flush interval: only the shutdown can have written the state.
    let args = ["--flush-interval", "1h", "--host-wait", "0s"];
    let mut daemon = Daemon::start(dir.path(), &args).await?;
    let app = TestApp::attach(daemon.addr, vec![type_spec("counter")]).await?;
    let mut client = daemon.client().await?;
    assert_eq!(client.incr("counter", "c1", 3).await?, 3);
    assert_eq!(client.incr("counter", "c1", 4).await?, 7);

    let stopping = std::time::Instant::now();
    let status = daemon.terminate().await?;
    assert!(
        status.success(),
        "graceful stop exited with {status}; log:\n{}",
        daemon.log()
    );
    // The daemon closes the app stream itself; it does not wait for the app
    // to hang up (its server-close timeout is 5 s).
    let took = stopping.elapsed();
    assert!(
        took < std::time::Duration::from_secs(4),
        "graceful stop took {took:?}; log:\n{}",
        daemon.log()
    );
    let events = app.events();
    assert!(
        events.deactivated("counter", "c1", Reason::Shutdown),
        "the app saw no Deactivate(SHUTDOWN) for c1: {:?}",
        events.deactivations
    );
    // The daemon ended the app's stream as it stopped.
    app.wait_for("the app stream to end", WAIT, |e| e.stream_end.is_some())
        .await?;
    drop(app);

    let daemon = Daemon::start(dir.path(), &args).await?;
    let mut client = daemon.client().await?;
    // Readable from storage before any activation.
    assert_eq!(client.stored_count("counter", "c1").await?, Some(7));
    let app = TestApp::attach(daemon.addr, vec![type_spec("counter")]).await?;
    assert_eq!(client.incr("counter", "c1", 1).await?, 8);
    assert_eq!(app.events().activations.len(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_deactivation_writes_state_to_disk() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let args = ["--flush-interval", "1h", "--host-wait", "0s"];
    let mut daemon = Daemon::start(dir.path(), &args).await?;
    let spec = pb::ActorTypeSpec {
        idle_timeout_ms: 200,
        ..type_spec("counter")
    };
    let app = TestApp::attach(daemon.addr, vec![spec]).await?;
    let mut client = daemon.client().await?;
    assert_eq!(client.incr("counter", "c1", 5).await?, 5);

    app.wait_for("Deactivate(IDLE) of c1", WAIT, |e| {
        e.deactivated("counter", "c1", Reason::Idle)
    })
    .await?;
    // The daemon drops the activation only after its state is written.
    poll_until(WAIT, "c1 leaves the daemon", || async {
        let gone = daemon.actors().await?.is_empty();
        Ok(gone.then_some(()))
    })
    .await?;

    daemon.kill9().await?;
    let daemon = Daemon::start(dir.path(), &args).await?;
    let mut client = daemon.client().await?;
    let (entries, active) = client.state("counter", "c1").await?;
    assert!(!active);
    assert_eq!(
        entries.get("count").map(|v| v.as_ref()),
        Some(&b"5"[..]),
        "state written at idle deactivation was lost by kill -9"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn status_counts_no_dirty_actors_after_a_deactivation_flush() -> anyhow::Result<()> {
    let args = ["--flush-interval", "1h"];
    let spec = pb::ActorTypeSpec {
        idle_timeout_ms: 200,
        ..type_spec("counter")
    };
    let (_dir, daemon, app, mut client) = daemon_with_app(&args, vec![spec]).await?;
    assert_eq!(client.incr("counter", "c1", 5).await?, 5);
    let mut admin = daemon.admin().await?;
    let status = admin.status(pb::StatusRequest {}).await?.into_inner();
    assert_eq!(
        status.dirty_actors, 1,
        "the turn's write is not flushed yet"
    );
    app.wait_for("Deactivate(IDLE) of c1", WAIT, |e| {
        e.deactivated("counter", "c1", Reason::Idle)
    })
    .await?;
    poll_until(WAIT, "c1 leaves the daemon", || async {
        Ok(daemon.actors().await?.is_empty().then_some(()))
    })
    .await?;
    // c1 is written and gone; nothing is dirty any more.
    let status = admin.status(pb::StatusRequest {}).await?.into_inner();
    assert_eq!(status.active_actors, 0);
    assert_eq!(status.dirty_actors, 0);
    Ok(())
}
