//! Any payload the daemon accepts reaches the app that hosts the actor, and a
//! turn or an activation too large for an app fails that work, never the
//! app's stream: the real binary on 127.0.0.1, with the Rust bench app and
//! raw app streams.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use troupe_tests::*;

const MIB: usize = 1024 * 1024;

/// The daemon's `--max-payload-bytes` in these tests: 9 MiB, so that an
/// 8 MiB payload is accepted with room to spare.
const MAX_PAYLOAD: usize = 9 * MIB;

/// `bench_app` (this package's binary) attached to `addr`, killed when
/// dropped.
struct BenchApp {
    child: Child,
}

impl BenchApp {
    /// Starts it with `args` after the address and waits for its
    /// `registered` line.
    async fn start(addr: std::net::SocketAddr, args: &[&str]) -> anyhow::Result<BenchApp> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_bench_app"))
            .arg(addr.to_string())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("spawning bench_app")?;
        let stdout = child
            .stdout
            .take()
            .context("bench_app has no stdout pipe")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = within(WAIT, "bench_app to register", lines.next_line()).await??;
        if line.as_deref() != Some("registered") {
            let _ = child.start_kill();
            bail!("bench_app printed {line:?} instead of registered");
        }
        // Keep reading so that the app never writes into a closed pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(BenchApp { child })
    }

    /// Fails if the app has exited.
    fn still_running(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => bail!("bench_app exited: {status}"),
        }
    }
}

async fn daemon(dir: &tempfile::TempDir) -> anyhow::Result<Daemon> {
    Daemon::start(
        dir.path(),
        &["--max-payload-bytes", &MAX_PAYLOAD.to_string()],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_app_echoes_8_mib_and_the_daemons_largest_payload() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = daemon(&dir).await?;
    let mut app = BenchApp::start(daemon.addr, &[]).await?;
    let client = daemon.client().await?;

    // 8 MiB, and exactly --max-payload-bytes: the turn carrying it is a few
    // bytes larger still, and must reach the app all the same.
    for (id, len) in [("e8", 8 * MIB), ("emax", MAX_PAYLOAD)] {
        let payload = json_string(len);
        let reply = within(
            Duration::from_secs(60),
            "a large echo",
            client
                .clone()
                .invoke_raw("echo", id, "echo", payload.clone()),
        )
        .await?
        .map_err(|s| {
            anyhow::anyhow!(
                "echoing {len} bytes: {:?}: {} (the app's log is its stderr)",
                s.code(),
                s.message()
            )
        })?;
        assert!(reply == payload, "echo of {len} bytes came back different");
    }
    // Several at once, to several actors.
    let calls: Vec<_> = (0..3)
        .map(|i| {
            let mut caller = client.clone();
            tokio::spawn(async move {
                caller
                    .invoke_raw("echo", &format!("c{i}"), "echo", json_string(8 * MIB))
                    .await
            })
        })
        .collect();
    for call in calls {
        let reply = within(Duration::from_secs(60), "a concurrent echo", call).await???;
        assert_eq!(reply.len(), 8 * MIB);
    }

    app.still_running()?;
    assert_eq!(client.clone().invoke("echo", "e8", "echo", "1").await?, 1);
    Ok(())
}

/// RESOURCE_EXHAUSTED whose message names every one of `words`.
fn exhausted<T: std::fmt::Debug>(
    result: Result<T, tonic::Status>,
    words: &[&str],
) -> anyhow::Result<String> {
    let status = expect_code(result, tonic::Code::ResourceExhausted)?;
    // Too large stays too large: no retry pushback, so no SDK resends it.
    assert!(
        status.metadata().get("grpc-retry-pushback-ms").is_none(),
        "{status:?}"
    );
    let message = status.message().to_owned();
    for word in words {
        assert!(message.contains(word), "{word:?} not in: {message}");
    }
    Ok(message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_over_the_apps_declared_limit_fails_that_call_not_the_app() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = daemon(&dir).await?;
    let limit = MIB.to_string();
    let mut app = BenchApp::start(daemon.addr, &["--max-receive-bytes", &limit]).await?;
    let mut client = daemon.client().await?;

    assert_eq!(client.invoke("echo", "a", "echo", "1").await?, 1);
    // Accepted by the daemon (under --max-payload-bytes), too large for the
    // app: only this call fails, saying both sizes and what to do.
    let result = within(
        WAIT,
        "the oversize call",
        client.invoke_raw("echo", "a", "echo", json_string(2 * MIB)),
    )
    .await?;
    let message = exhausted(
        result,
        &[
            "echo/a",
            "bytes in one message",
            &limit,
            "bench-app",
            "max_receive_bytes",
        ],
    )?;
    assert!(message.contains("smaller payload"), "what to do: {message}");

    // The same app serves the same actor next, on the same stream.
    assert_eq!(client.invoke("echo", "a", "echo", "2").await?, 2);
    let just_fits = json_string(MIB - 1024);
    let reply = within(
        WAIT,
        "a call just under the limit",
        client.invoke_raw("echo", "a", "echo", just_fits.clone()),
    )
    .await??;
    assert!(reply == just_fits);
    app.still_running()?;
    let log = daemon.log();
    assert!(
        !log.contains("app detached") && !log.contains("app stream failed"),
        "{log}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_activation_too_large_to_send_fails_its_calls_not_the_stream() -> anyhow::Result<()> {
    // The app declares no limit, so the daemon's own applies: twice
    // --max-payload-bytes plus 64 KiB. Stored state has no such bound (each
    // value is under --max-payload-bytes, their number is not), so an
    // activation can outgrow it; sending it would end the stream.
    const VALUE: usize = 1000;
    const KEYS: usize = 100;
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &["--max-payload-bytes", "1024"]).await?;
    let (mut app, _) = RawApp::register(daemon.addr, vec![type_spec("big")]).await?;
    let client = daemon.client().await?;

    let mut caller = client.clone();
    let call = tokio::spawn(async move { caller.invoke_raw("big", "a", "fill", "{}").await });
    let turn = app.next_turn().await?;
    app.send(pb::AppMessage {
        kind: Some(pb::app_message::Kind::TurnResult(pb::TurnResult {
            call_id: turn.call_id,
            outcome: Some(pb::turn_result::Outcome::Reply(json_payload("null"))),
            changes: (0..KEYS)
                .map(|i| pb::StateChange {
                    ttl_ms: None,
                    key: format!("k{i}"),
                    op: Some(pb::state_change::Op::Set(vec![b'v'; VALUE].into())),
                })
                .collect(),
            ..Default::default()
        })),
    })?;
    within(WAIT, "the filling call", call).await???;

    let mut admin = daemon.admin().await?;
    let deactivate = tokio::spawn(async move {
        admin
            .deactivate_actor(pb::DeactivateActorRequest {
                actor: Some(actor("big", "a")),
            })
            .await
    });
    match app.recv().await?.and_then(|m| m.kind) {
        Some(pb::daemon_message::Kind::Deactivate(d)) => app.send(pb::AppMessage {
            kind: Some(pb::app_message::Kind::Deactivated(pb::DeactivateResult {
                call_id: d.call_id,
                changes: Vec::new(),
            })),
        })?,
        other => bail!("expected Deactivate, got {other:?}"),
    }
    within(WAIT, "the deactivation", deactivate).await???;

    // Activating it again would send all of its state in one message.
    let result = within(
        WAIT,
        "the call that needs the large activation",
        client.clone().invoke_raw("big", "a", "get", "{}"),
    )
    .await?;
    exhausted(result, &["activating big/a", "--max-payload-bytes"])?;

    // The stream goes on: another actor of the same app is served.
    let mut caller = client.clone();
    let call = tokio::spawn(async move { caller.invoke_raw("big", "b", "get", "{}").await });
    let turn = app.next_turn().await?;
    app.reply(turn.call_id, "7")?;
    let reply = within(WAIT, "the next call", call).await???;
    assert_eq!(reply, bytes::Bytes::from("7"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_to_an_app_stay_under_its_declared_limit() -> anyhow::Result<()> {
    use prost::Message as _;
    const LIMIT: usize = 128 * 1024;
    // Small enough to batch (under 64 KiB), together more than the app's
    // HTTP/2 stream window, so that turns queue while it does not read.
    const CALLS: usize = 150;
    const PAYLOAD: usize = 30 * 1024;
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &[]).await?;
    let mut register = register_message("limited-app", vec![type_spec("b")]);
    if let Some(pb::app_message::Kind::Register(r)) = register.kind.as_mut() {
        r.accepts_batches = true;
        r.max_receive_bytes = LIMIT as u64;
    }
    let mut app = RawApp::open(daemon.addr, register.encode_to_vec().into()).await?;
    let client = daemon.client().await?;
    let calls: Vec<_> = (0..CALLS)
        .map(|i| {
            let mut caller = client.clone();
            tokio::spawn(async move {
                caller
                    .invoke_raw("b", &i.to_string(), "echo", json_string(PAYLOAD))
                    .await
            })
        })
        .collect();

    let (mut activated, mut turns, mut largest, mut widest) = (0, Vec::new(), 0, 0);
    while turns.len() < CALLS {
        let Some(message) = app.recv().await? else {
            bail!("the daemon ended the stream");
        };
        largest = largest.max(message.encoded_len());
        let work = match message.kind {
            Some(pb::daemon_message::Kind::Batch(batch)) => batch.messages,
            Some(pb::daemon_message::Kind::Registered(_)) => continue,
            kind => vec![pb::DaemonMessage { kind }],
        };
        widest = widest.max(work.len());
        let mut answers = Vec::new();
        for m in work {
            match m.kind {
                Some(pb::daemon_message::Kind::Activate(a)) => {
                    activated += 1;
                    answers.push(pb::AppMessage {
                        kind: Some(pb::app_message::Kind::Activated(pb::ActivateResult {
                            call_id: a.call_id,
                            ..Default::default()
                        })),
                    });
                }
                Some(pb::daemon_message::Kind::Turn(t)) => turns.push(t.call_id),
                other => bail!("unexpected {other:?}"),
            }
        }
        for answer in answers {
            app.send(answer)?;
        }
        if activated == CALLS && turns.is_empty() {
            // Let the turns pile up behind the app's full stream window.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    assert!(largest <= LIMIT, "a message of {largest} bytes");
    assert!(
        widest > 1,
        "no batch was sent; the test did not test batching"
    );
    for call_id in turns {
        app.send(pb::AppMessage {
            kind: Some(pb::app_message::Kind::TurnResult(pb::TurnResult {
                call_id,
                outcome: Some(pb::turn_result::Outcome::Reply(json_payload("1"))),
                ..Default::default()
            })),
        })?;
    }
    for call in calls {
        within(WAIT, "a call", call).await???;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_limit_too_small_for_any_message_is_refused_at_registration() -> anyhow::Result<()>
{
    use prost::Message as _;
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &[]).await?;
    let mut register = register_message("tiny-app", vec![type_spec("t")]);
    if let Some(pb::app_message::Kind::Register(r)) = register.kind.as_mut() {
        r.max_receive_bytes = 1000;
    }
    let refused = RawApp::open(daemon.addr, register.encode_to_vec().into()).await;
    let status = expect_code(refused, tonic::Code::InvalidArgument)?;
    assert!(
        status.message().contains("max_receive_bytes") && status.message().contains("65536"),
        "{}",
        status.message()
    );
    Ok(())
}
