//! Each failure gets its gRPC status, and the daemon keeps serving after it.

use tonic::Code;
use troupe_tests::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn app_disconnect_mid_call_is_unavailable() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut daemon = Daemon::start(dir.path(), &[]).await?;
    let (mut raw, _) = RawApp::register(daemon.addr, vec![type_spec("counter")]).await?;
    let client = daemon.client().await?;
    let call = tokio::spawn({
        let mut client = client.clone();
        async move { client.invoke_raw("counter", "c1", "incr", "{}").await }
    });
    // The call is in its turn at the app; the app goes away.
    let turn = raw.next_turn().await?;
    assert_eq!(turn.name, "incr");
    drop(raw);
    let status = expect_code(
        within(WAIT, "the orphaned call", call).await??,
        Code::Unavailable,
    )?;
    assert!(!status.message().is_empty());

    // The daemon still serves: a new app takes over the type.
    assert!(daemon.is_running());
    let _app = TestApp::attach(daemon.addr, vec![type_spec("counter")]).await?;
    let mut client = client;
    assert_eq!(client.incr("counter", "c1", 1).await?, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn full_mailbox_is_resource_exhausted() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &[]).await?;
    let spec = pb::ActorTypeSpec {
        max_mailbox: 2,
        ..type_spec("counter")
    };
    let (mut raw, registered) = RawApp::register(daemon.addr, vec![spec]).await?;
    assert_eq!(registered.types[0].max_mailbox, 2);
    let client = daemon.client().await?;
    let spawn_call = |n: u32| {
        let mut client = client.clone();
        tokio::spawn(async move {
            client
                .invoke_raw("counter", "c1", "incr", n.to_string())
                .await
        })
    };
    // The first call is held in its turn by the app...
    let first = spawn_call(1);
    let held = raw.next_turn().await?;
    // ...two more fill the mailbox (one after the other, to know their order).
    let mut queued = Vec::new();
    for n in [2, 3] {
        queued.push(spawn_call(n));
        poll_until(WAIT, "the call queued in c1's mailbox", || async {
            let actors = daemon.actors().await?;
            Ok(actors
                .iter()
                .any(|a| a.mailbox_depth == u64::from(n - 1))
                .then_some(()))
        })
        .await?;
    }
    let mut c = client.clone();
    let status = expect_code(
        c.invoke_raw("counter", "c1", "incr", "4").await,
        Code::ResourceExhausted,
    )?;
    assert!(
        status.message().contains("mailbox"),
        "message: {}",
        status.message()
    );
    // It ran nothing, so the daemon says when to resend: gRPC's retry
    // pushback, which the SDKs honour.
    assert_eq!(
        status
            .metadata()
            .get("grpc-retry-pushback-ms")
            .and_then(|v| v.to_str().ok()),
        Some("100")
    );

    // Releasing the held turn lets the queued calls run in order.
    raw.reply(held.call_id, "\"first\"")?;
    for expected in ["2", "3"] {
        let turn = raw.next_turn().await?;
        let data = turn.payload.map(|p| p.data).unwrap_or_default();
        assert_eq!(data.as_ref(), expected.as_bytes());
        raw.reply(turn.call_id, expected)?;
    }
    assert_eq!(
        within(WAIT, "the first call", first)
            .await??
            .map_err(anyhow::Error::new)?
            .as_ref(),
        b"\"first\""
    );
    for call in queued {
        within(WAIT, "a queued call", call)
            .await??
            .map_err(anyhow::Error::new)?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input_is_invalid_argument() -> anyhow::Result<()> {
    let (_dir, mut daemon, _app, mut client) =
        daemon_with_app(&["--max-payload-bytes", "1024"], vec![type_spec("counter")]).await?;

    let big = vec![b' '; 2048];
    let status = expect_code(
        client.invoke_raw("counter", "c1", "incr", big).await,
        Code::InvalidArgument,
    )?;
    assert!(
        status.message().contains("1024"),
        "message: {}",
        status.message()
    );
    // At the limit is fine (JSON with padding).
    let mut ok = b"{}".to_vec();
    ok.resize(1024, b' ');
    client.invoke_raw("counter", "c1", "incr", ok).await?;

    let long_type = "t".repeat(300);
    let cases = [
        ("counter", "", "incr", "actor id"),
        (long_type.as_str(), "c1", "incr", "actor type"),
        ("counter", "c1", "in\ncr", "method"),
    ];
    for (ty, id, method, what) in cases {
        let status = expect_code(
            client.invoke_raw(ty, id, method, "{}").await,
            Code::InvalidArgument,
        )?;
        assert!(
            status.message().contains(what),
            "message for {what}: {}",
            status.message()
        );
    }
    // GetState checks names too.
    let r = client
        .0
        .get_state(pb::GetStateRequest {
            actor: Some(actor("counter", "")),
            keys: vec![],
        })
        .await;
    expect_code(r, Code::InvalidArgument)?;

    assert!(daemon.is_running());
    assert_eq!(client.incr("counter", "c1", 1).await?, 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unknown_type_is_not_found_naming_registered_types() -> anyhow::Result<()> {
    let (_dir, _daemon, _app, mut client) =
        daemon_with_app(&["--host-wait", "0s"], vec![type_spec("counter")]).await?;
    let status = expect_code(
        client.invoke_raw("nosuch", "x", "incr", "{}").await,
        Code::NotFound,
    )?;
    assert!(
        status.message().contains("nosuch"),
        "message: {}",
        status.message()
    );
    assert!(
        status.message().contains("counter"),
        "message: {}",
        status.message()
    );
    assert_eq!(client.incr("counter", "c1", 1).await?, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn actor_exception_is_unknown_with_its_type() -> anyhow::Result<()> {
    let (_dir, _daemon, _app, mut client) =
        daemon_with_app(&[], vec![type_spec("counter")]).await?;
    assert_eq!(client.incr("counter", "c1", 2).await?, 2);
    let status = expect_code(
        client.invoke_raw("counter", "c1", "fail", "{}").await,
        Code::Unknown,
    )?;
    assert_eq!(status.message(), "boom");
    let ty = status
        .metadata()
        .get("troupe-error-type")
        .map(|v| v.to_str().unwrap_or_default());
    assert_eq!(ty, Some("ValueError"));
    // Where it raised travels too: the trace the app sent, percent-encoded.
    let trace = status
        .metadata()
        .get("troupe-error-details")
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            percent_encoding::percent_decode_str(v)
                .decode_utf8_lossy()
                .into_owned()
        });
    assert_eq!(trace.as_deref(), Some(troupe_tests::FAIL_TRACE));
    // The failed turn changed nothing; the actor keeps working.
    assert_eq!(client.incr("counter", "c1", 1).await?, 3);
    Ok(())
}
