//! Health checks for Kubernetes probes: `--health-listen` answers
//! grpc.health.v1 in plaintext (kubelet's `grpc:` probes speak no TLS) while
//! the API listener has TLS, and serves nothing else; placement replicas
//! answer health on their main listener too, take every setting from the
//! environment, and start with peers whose names do not resolve yet.

use std::time::Duration;

use anyhow::{ensure, Context};
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use troupe_tests::cluster_harness::memory_member_args;
use troupe_tests::replicas::{free_port, join_request, PlacementReplica};
use troupe_tests::tls::TestCa;
use troupe_tests::{pb, poll_until, Daemon, WAIT};

/// The service readiness probes name.
const ACTOR_API: &str = "troupe.v1.ActorClient";

fn endpoint(addr: impl std::fmt::Display) -> anyhow::Result<Endpoint> {
    Ok(Channel::from_shared(format!("http://{addr}"))?.timeout(Duration::from_secs(5)))
}

/// The status of `service` ("" for the whole server), over plaintext.
async fn health(addr: impl std::fmt::Display, service: &str) -> anyhow::Result<ServingStatus> {
    let channel = endpoint(addr)?.connect().await?;
    let answer = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await?
        .into_inner();
    Ok(answer.status())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_with_tls_answers_plaintext_health_on_its_health_listener_only(
) -> anyhow::Result<()> {
    let ca = TestCa::new()?;
    let dir = tempfile::tempdir()?;
    let health_addr = format!("127.0.0.1:{}", free_port()?);
    let mut args = ca.member_args("d1")?;
    args.extend(["--health-listen".to_owned(), health_addr.clone()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let daemon = Daemon::start(dir.path(), &args).await?;

    assert_eq!(health(&health_addr, "").await?, ServingStatus::Serving);
    assert_eq!(
        health(&health_addr, ACTOR_API).await?,
        ServingStatus::Serving
    );
    // The actor API and admin are not there.
    let channel = endpoint(&health_addr)?.connect().await?;
    let status = pb::admin_client::AdminClient::new(channel)
        .status(pb::StatusRequest {})
        .await;
    ensure!(
        status
            .as_ref()
            .is_err_and(|s| s.code() == tonic::Code::Unimplemented),
        "Admin answered on the health listener: {status:?}"
    );
    // The API listener still refuses plaintext.
    ensure!(
        health(daemon.addr, "").await.is_err(),
        "the TLS listener answered plaintext"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_from_the_environment_answers_health_on_both_listeners() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let health_addr = format!("127.0.0.1:{}", free_port()?);
    let log = tempfile::NamedTempFile::new()?;
    let mut cmd = tokio::process::Command::new(troupe_tests::troupe_bin());
    cmd.args(["placement", "serve"])
        .env("TROUPE_PLACEMENT_ID", "1")
        .env("TROUPE_PLACEMENT_LISTEN", "127.0.0.1:0")
        .env("TROUPE_PLACEMENT_DATA_DIR", dir.path())
        .env("TROUPE_PLACEMENT_LEASE", "4s")
        .env("TROUPE_PLACEMENT_HEARTBEAT", "1s")
        .env("TROUPE_HEALTH_LISTEN", &health_addr)
        .env("TROUPE_LOG_FORMAT", "json");
    let (_child, addr) =
        troupe_tests::spawn_announced(cmd, &log, "troupe placement listening on ").await?;
    for at in [addr.to_string(), health_addr.clone()] {
        assert_eq!(health(&at, "").await?, ServingStatus::Serving, "{at}");
        assert_eq!(
            health(&at, "troupe.v1.Placement").await?,
            ServingStatus::Serving,
            "{at}"
        );
    }
    // The placement API is on the main listener only; the lease came from
    // the environment.
    let channel = endpoint(&health_addr)?.connect().await?;
    let join = pb::placement_client::PlacementClient::new(channel)
        .join(join_request("d", &["T"]))
        .await;
    ensure!(
        join.is_err_and(|s| s.code() == tonic::Code::Unimplemented),
        "Placement on the health listener"
    );
    let channel = endpoint(addr)?.connect().await?;
    let placement = pb::placement_client::PlacementClient::new(channel);
    let joined = poll_until(WAIT, "the replica to accept a join", || {
        let mut placement = placement.clone();
        async move { Ok(placement.join(join_request("d", &["T"])).await.ok()) }
    })
    .await?;
    assert_eq!(joined.into_inner().lease_ms, 4000);
    let text = std::fs::read_to_string(log.path())?;
    let first = text.lines().next().context("the replica logged nothing")?;
    ensure!(
        first.starts_with('{'),
        "TROUPE_LOG_FORMAT=json ignored: {first}"
    );
    Ok(())
}

/// In a StatefulSet the replicas' DNS names appear only as pods start: a
/// replica must start, and the others elect, with a peer that does not
/// resolve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_start_with_a_peer_whose_name_does_not_resolve() -> anyhow::Result<()> {
    let (p1, p2, p3) = (free_port()?, free_port()?, free_port()?);
    let peers = format!(
        "1=localhost:{p1},2=127.0.0.1:{p2},3=troupe-placement-2.troupe-placement.invalid:{p3}"
    );
    let dirs = [tempfile::tempdir()?, tempfile::tempdir()?];
    let r1 = PlacementReplica::start(
        1,
        &format!("127.0.0.1:{p1}"),
        dirs[0].path(),
        Some(&peers),
        &[],
    )
    .await?;
    let r2 = PlacementReplica::start(
        2,
        &format!("127.0.0.1:{p2}"),
        dirs[1].path(),
        Some(&peers),
        &[],
    )
    .await?;
    let client = r2.client().await?;
    poll_until(
        WAIT,
        "a join through replica 2 (two of three replicas up)",
        || {
            let mut client = client.clone();
            async move { Ok(client.join(join_request("d", &["T"])).await.ok()) }
        },
    )
    .await
    .with_context(|| format!("{}\n{}", r1.log(), r2.log()))?;
    let status = client
        .clone()
        .cluster_status(pb::ClusterStatusRequest {})
        .await?
        .into_inner();
    ensure!(!status.leader.is_empty(), "no leader: {status:?}");
    Ok(())
}

/// Readiness is the actor API's status: a cluster daemon is NOT_SERVING
/// until it holds a placement lease, SERVING while it does, and NOT_SERVING
/// again once cut off from placement past its lease (its actors may be
/// served elsewhere then). The overall status, for liveness, stays SERVING.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_daemon_is_ready_only_while_it_holds_a_placement_lease() -> anyhow::Result<()> {
    let placement = format!("127.0.0.1:{}", free_port()?);
    let dirs = [tempfile::tempdir()?, tempfile::tempdir()?];
    let args = memory_member_args(&placement, "d1", Vec::new());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let daemon = Daemon::start(dirs[0].path(), &args).await?;
    let ready = |want: ServingStatus, what: &'static str| {
        poll_until(WAIT, what, move || async move {
            let status = health(daemon.addr, ACTOR_API).await?;
            Ok((status == want).then_some(()))
        })
    };
    assert_eq!(health(daemon.addr, "").await?, ServingStatus::Serving);
    assert_eq!(
        health(daemon.addr, ACTOR_API).await?,
        ServingStatus::NotServing,
        "ready before any placement replica runs"
    );

    let mut replica = PlacementReplica::start(
        1,
        &placement,
        dirs[1].path(),
        None,
        &["--lease", "1s", "--heartbeat", "200ms"],
    )
    .await?;
    ready(ServingStatus::Serving, "ready once joined").await?;
    replica.kill9().await?;
    ready(ServingStatus::NotServing, "not ready once the lease lapsed").await?;
    assert_eq!(health(daemon.addr, "").await?, ServingStatus::Serving);
    Ok(())
}
