//! gRPC health and reflection (the CLI has its own tests in cli.rs).

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
