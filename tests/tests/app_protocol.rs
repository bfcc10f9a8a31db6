//! Broken app streams end with a clear status; the daemon keeps serving.

use bytes::Bytes;
use prost::Message as _;
use tonic::Code;
use troupe_tests::*;

/// Not a valid protobuf message: field 31 with wire type 7.
const GARBAGE: &[u8] = &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff];

async fn still_serves(daemon: &mut Daemon, id: &str) -> anyhow::Result<()> {
    assert!(daemon.is_running(), "daemon died; log:\n{}", daemon.log());
    let app = TestApp::attach(daemon.addr, vec![type_spec("counter")]).await?;
    let mut client = daemon.client().await?;
    assert_eq!(client.incr("counter", id, 1).await?, 1);
    drop(app);
    Ok(())
}

fn turn_result(call_id: u64) -> pb::AppMessage {
    pb::AppMessage {
        kind: Some(pb::app_message::Kind::TurnResult(pb::TurnResult {
            call_id,
            outcome: Some(pb::turn_result::Outcome::Reply(json_payload("1"))),
            changes: vec![],
            ..Default::default()
        })),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn first_message_must_be_register() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut daemon = Daemon::start(dir.path(), &[]).await?;
    let opened = RawApp::open(daemon.addr, turn_result(1).encode_to_vec().into()).await;
    let status = expect_code(opened, Code::FailedPrecondition)?;
    assert!(
        status.message().contains("Register"),
        "message: {}",
        status.message()
    );
    still_serves(&mut daemon, "a").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn register_with_a_bad_type_name_is_invalid_argument() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut daemon = Daemon::start(dir.path(), &[]).await?;
    for name in ["", "bad\u{7}name"] {
        let first = register_message("bad", vec![type_spec(name)])
            .encode_to_vec()
            .into();
        let status = expect_code(
            RawApp::open(daemon.addr, first).await,
            Code::InvalidArgument,
        )?;
        assert!(
            status.message().contains("actor type"),
            "message: {}",
            status.message()
        );
    }
    still_serves(&mut daemon, "a").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn answer_for_an_unknown_call_id_ends_the_stream() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut daemon = Daemon::start(dir.path(), &[]).await?;
    let (mut raw, _) = RawApp::register(daemon.addr, vec![type_spec("counter")]).await?;
    raw.send(turn_result(987_654))?;
    let status = raw.ended().await?;
    let status = expect_code(status.map_or(Ok(()), Err), Code::InvalidArgument)?;
    assert!(
        status.message().contains("987654"),
        "message: {}",
        status.message()
    );
    // The same for an ActivateResult nobody asked for.
    let (mut raw, _) = RawApp::register(daemon.addr, vec![type_spec("counter")]).await?;
    raw.send(pb::AppMessage {
        kind: Some(pb::app_message::Kind::Activated(pb::ActivateResult {
            call_id: 42,
            ..Default::default()
        })),
    })?;
    expect_code(
        raw.ended().await?.map_or(Ok(()), Err),
        Code::InvalidArgument,
    )?;
    drop(raw);
    still_serves(&mut daemon, "a").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn garbage_bytes_end_the_stream() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut daemon = Daemon::start(dir.path(), &[]).await?;
    // Garbage after a good Register.
    let (mut raw, _) = RawApp::register(daemon.addr, vec![type_spec("counter")]).await?;
    raw.send_bytes(Bytes::from_static(GARBAGE))?;
    let status = raw.ended().await?;
    assert!(status.is_some(), "the stream ended cleanly after garbage");
    drop(raw);
    still_serves(&mut daemon, "a").await?;

    // Garbage as the very first message.
    let opened = RawApp::open(daemon.addr, Bytes::from_static(GARBAGE)).await;
    match opened {
        Err(status) => assert_ne!(status.code(), Code::Ok),
        Ok(mut raw) => {
            let status = raw.ended().await?;
            assert!(status.is_some(), "the stream ended cleanly after garbage");
        }
    }
    still_serves(&mut daemon, "b").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn garbage_mid_call_fails_the_call_not_the_daemon() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut daemon = Daemon::start(dir.path(), &[]).await?;
    let (mut raw, _) = RawApp::register(daemon.addr, vec![type_spec("counter")]).await?;
    let mut client = daemon.client().await?;
    let call = tokio::spawn(async move { client.invoke_raw("counter", "c1", "incr", "{}").await });
    raw.next_turn().await?;
    raw.send_bytes(Bytes::from_static(GARBAGE))?;
    assert!(raw.ended().await?.is_some());
    expect_code(within(WAIT, "the call", call).await??, Code::Unavailable)?;
    drop(raw);
    still_serves(&mut daemon, "c1").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn registered_comes_first_even_when_calls_wait_for_the_type() -> anyhow::Result<()> {
    // A type registered once and then away: calls for it wait (--host-wait)
    // for an app to come back, and activate the moment one registers.
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &["--host-wait", "30s"]).await?;
    drop(RawApp::register(daemon.addr, vec![type_spec("counter")]).await?);
    let client = daemon.client().await?;
    let mut admin = daemon.admin().await?;
    let waiting: Vec<_> = (0..50)
        .map(|i| {
            let mut c = client.clone();
            tokio::spawn(
                async move { c.invoke_raw("counter", &format!("w{i}"), "get", "{}").await },
            )
        })
        .collect();
    poll_until(WAIT, "50 calls waiting for an app", || {
        let mut admin = admin.clone();
        async move {
            let status = admin.status(pb::StatusRequest {}).await?.into_inner();
            Ok((status.pending_calls == 50).then_some(()))
        }
    })
    .await?;
    // The daemon's first message on a stream is always its answer to
    // Register, however quickly waiting work is sent after it. (A race:
    // each round is one more chance to lose it.)
    for _ in 0..5 {
        let (mut app, _) = RawApp::register(daemon.addr, vec![type_spec("counter")]).await?;
        let next = app.recv().await?.and_then(|m| m.kind);
        assert!(
            matches!(next, Some(pb::daemon_message::Kind::Activate(_))),
            "{next:?}"
        );
    }
    drop(waiting);
    let _ = admin.status(pb::StatusRequest {}).await?;
    Ok(())
}

/// Opens an app stream whose Register says `api_version`.
async fn open_with_api_version(daemon: &Daemon, api_version: u32) -> Result<RawApp, tonic::Status> {
    let mut register = register_message("versioned", vec![type_spec("counter")]);
    if let Some(pb::app_message::Kind::Register(r)) = &mut register.kind {
        r.api_version = api_version;
    }
    RawApp::open(daemon.addr, register.encode_to_vec().into()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_app_of_another_api_version_is_refused_naming_both() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut daemon = Daemon::start(dir.path(), &[]).await?;
    let status = expect_code(
        open_with_api_version(&daemon, 2).await,
        Code::FailedPrecondition,
    )?;
    let message = status.message();
    // Both versions, the SDK that sent it and what to do about it.
    for part in [
        "app API version 2",
        "speaks version 1",
        "troupe-tests-raw",
        "install matching versions",
        "pip install troupe",
        "npm install @troupe/sdk",
    ] {
        assert!(message.contains(part), "{part:?} missing in: {message}");
    }
    // The daemon's version also travels on its own, for the SDKs' typed error.
    let trailer = status.metadata().get("troupe-api-version");
    assert_eq!(
        trailer.and_then(|v| v.to_str().ok()),
        Some("1"),
        "{status:?}"
    );
    still_serves(&mut daemon, "a").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn apps_of_this_api_version_and_from_before_it_are_answered_with_it() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut daemon = Daemon::start(dir.path(), &[]).await?;
    // 0: an SDK from before the field, which spoke version 1.
    for api_version in [1, 0] {
        let mut app = open_with_api_version(&daemon, api_version).await?;
        match app.recv().await?.and_then(|m| m.kind) {
            Some(pb::daemon_message::Kind::Registered(r)) => {
                assert_eq!(r.api_version, 1, "Registered of api_version {api_version}");
                assert_eq!(r.daemon_version, env!("CARGO_PKG_VERSION"));
            }
            other => anyhow::bail!("api_version {api_version}: expected Registered, got {other:?}"),
        }
    }
    still_serves(&mut daemon, "a").await
}

/// The app hears which turns no caller waits for, so it can log their
/// failures itself: a best-effort tell's, not an invoke's nor a durable
/// tell's (retried, then kept as a dead letter).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_turn_no_caller_waits_for_is_marked_unanswered() -> anyhow::Result<()> {
    use troupe_tests::log_app::tell_with;
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &[]).await?;
    let (mut app, _) = RawApp::register(daemon.addr, vec![type_spec("counter")]).await?;
    let mut client = daemon.client().await?;
    for (delivery, unanswered) in [
        (pb::Delivery::BestEffort, true),
        (pb::Delivery::Durable, false),
    ] {
        tell_with(&mut client, "counter", "c1", "incr", 1, delivery).await?;
        let turn = within(WAIT, "the tell's turn", app.next_turn()).await??;
        assert_eq!(turn.unanswered, unanswered, "{delivery:?}");
        app.reply(turn.call_id, "null")?;
    }
    let mut caller = client.clone();
    let call = tokio::spawn(async move { caller.invoke_raw("counter", "c1", "get", "{}").await });
    let turn = within(WAIT, "the invoke's turn", app.next_turn()).await??;
    assert!(!turn.unanswered);
    app.reply(turn.call_id, "1")?;
    within(WAIT, "the invoke's answer", call).await???;
    Ok(())
}
