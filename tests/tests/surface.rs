//! gRPC health and reflection, and the CLI against a live daemon.

use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use troupe_tests::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn health_and_reflection() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start(dir.path(), &[]).await?;
    let mut health = HealthClient::new(daemon.channel().await?);
    for service in ["", "troupe.v1.ActorClient"] {
        let reply = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await?
            .into_inner();
        assert_eq!(
            reply.status,
            ServingStatus::Serving as i32,
            "service {service:?}"
        );
    }

    let mut reflection = ServerReflectionClient::new(daemon.channel().await?);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut replies = within(
        WAIT,
        "reflection",
        reflection.server_reflection_info(tokio_stream::iter([request])),
    )
    .await??
    .into_inner();
    let reply = within(WAIT, "a reflection reply", replies.message()).await??;
    let names: Vec<String> = match reply.and_then(|r| r.message_response) {
        Some(MessageResponse::ListServicesResponse(l)) => {
            l.service.into_iter().map(|s| s.name).collect()
        }
        other => anyhow::bail!("unexpected reflection reply {other:?}"),
    };
    for wanted in [
        "troupe.v1.ActorClient",
        "troupe.v1.AppHost",
        "troupe.v1.Admin",
    ] {
        assert!(
            names.iter().any(|n| n == wanted),
            "{wanted} not in {names:?}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cli_against_a_live_daemon() -> anyhow::Result<()> {
    let (_dir, daemon, _app, _client) = daemon_with_app(&[], vec![type_spec("counter")]).await?;
    let addr = daemon.addr.to_string();

    let (status, out, err) = run_cli(&["status", "--addr", &addr, "-o", "json"]).await?;
    assert!(status.success(), "status failed: {err}");
    let json: serde_json::Value = serde_json::from_str(&out)?;
    assert_eq!(
        json["store"].as_str().map(|s| !s.is_empty()),
        Some(true),
        "{json}"
    );
    let types = json["types"].as_array().cloned().unwrap_or_default();
    assert!(types.iter().any(|t| t["name"] == "counter"), "{json}");

    let (status, out, err) = run_cli(&[
        "invoke", "counter", "c1", "incr", "--data", "{}", "--addr", &addr,
    ])
    .await?;
    assert!(status.success(), "invoke failed: {err}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out)?,
        serde_json::json!(1)
    );
    let data = r#"{"kwargs": {"by": 4}}"#;
    let (status, out, err) = run_cli(&[
        "invoke", "counter", "c1", "incr", "--data", data, "--addr", &addr,
    ])
    .await?;
    assert!(status.success(), "invoke failed: {err}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out)?,
        serde_json::json!(5)
    );

    let (status, out, err) = run_cli(&[
        "state", "get", "counter", "c1", "--addr", &addr, "-o", "json",
    ])
    .await?;
    assert!(status.success(), "state get failed: {err}");
    let json: serde_json::Value = serde_json::from_str(&out)?;
    assert_eq!(
        json,
        serde_json::json!({"active": true, "state": {"count": 5}})
    );

    let (status, out, err) = run_cli(&["actors", "list", "--addr", &addr, "-o", "json"]).await?;
    assert!(status.success(), "actors list failed: {err}");
    let json: serde_json::Value = serde_json::from_str(&out)?;
    let rows = json.as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), 1, "{json}");
    assert_eq!(rows[0]["type"], "counter");
    assert_eq!(rows[0]["id"], "c1");
    assert_eq!(rows[0]["turns"], 2);

    // An actor exception reaches the CLI user with its type.
    let (status, _, err) = run_cli(&["invoke", "counter", "c1", "fail", "--addr", &addr]).await?;
    assert!(!status.success());
    assert!(
        err.contains("ValueError") && err.contains("boom"),
        "stderr: {err}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cli_against_an_unreachable_address() -> anyhow::Result<()> {
    // A port nothing listens on: bind one, then free it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?.to_string();
    drop(listener);
    for args in [
        vec!["status", "--addr", &addr],
        vec![
            "invoke", "counter", "c1", "incr", "--data", "{}", "--addr", &addr,
        ],
        vec![
            "state", "get", "counter", "c1", "--addr", &addr, "-o", "json",
        ],
        vec!["actors", "list", "--addr", &addr],
    ] {
        let (status, _, err) = run_cli(&args).await?;
        assert!(!status.success(), "{args:?} succeeded");
        assert!(err.contains("cannot reach"), "{args:?} stderr: {err}");
    }
    Ok(())
}
