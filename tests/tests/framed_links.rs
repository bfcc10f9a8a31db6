//! Framed links (how daemons dial each other by default) are held to the
//! rules PeerLink calls are: a daemon that requires a token refuses a link
//! without one, saying why, and lets in one that presents it; under TLS
//! only a cluster member's certificate opens one (a client's certificate
//! of the same CA does not). Driven with the transport's own `Links`, as a
//! peer daemon would dial.

use std::time::Duration;

use anyhow::{bail, Context};
use troupe_tests::cluster_harness::{cluster_status, memory_member_args, placement_arg};
use troupe_tests::replicas::PlacementCluster;
use troupe_tests::scrape::{metrics_addr, scrape};
use troupe_tests::tls::TestCa;
use troupe_tests::*;
use troupe_tls::dev::Subject;
use troupe_tls::Connector;
use troupe_transport::link::{affinity, Authorization, LinkProtocol, Links, LinksConfig};
use troupe_transport::{MessageClass, TransportError};

fn links(authorization: Option<&str>, tls: Option<Connector>) -> anyhow::Result<Links> {
    Ok(Links::new(LinksConfig {
        node: "probe".into(),
        protocol: LinkProtocol::Framed,
        connect_timeout: Duration::from_secs(5),
        authorization: match authorization {
            Some(value) => Some(Authorization::fixed(value.parse()?)),
            None => None,
        },
        tls,
        ..LinksConfig::default()
    }))
}

/// A state read of an actor nobody hosts: any reply, even an error status,
/// means the link opened.
async fn read_state(links: &Links, address: &str) -> Result<pb::LinkReply, TransportError> {
    let request = pb::LinkRequest {
        hops: 1,
        timeout_ms: 5_000,
        call: Some(pb::link_request::Call::GetState(pb::GetStateRequest {
            actor: Some(pb::ActorRef {
                r#type: "nobody".into(),
                id: "1".into(),
            }),
            ..pb::GetStateRequest::default()
        })),
        ..pb::LinkRequest::default()
    };
    let affinity = affinity("nobody", "1", "");
    links
        .request(address, MessageClass::Small, affinity, request)
        .await
}

fn refused_because(answer: Result<pb::LinkReply, TransportError>) -> anyhow::Result<String> {
    match answer {
        Err(TransportError::Unreachable { reason, .. }) => Ok(reason),
        other => bail!("expected the link to be refused, got {other:?}"),
    }
}

/// A daemon in `dir`, member of a placement cluster of one replica (kept
/// alive by the caller), with `extra` arguments and `env`.
async fn member(
    dir: &std::path::Path,
    extra: Vec<String>,
    env: &[(&str, &str)],
) -> anyhow::Result<(PlacementCluster, Daemon)> {
    let replicas = PlacementCluster::start(1, &[]).await?;
    replicas.leader().await?;
    let args = memory_member_args(&placement_arg(&replicas), "d1", extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let daemon = Daemon::start_with_env(dir, &args, env).await?;
    // The daemon listens before its join reaches the table; `cluster
    // status` only asks the members the table names.
    poll_until(Duration::from_secs(15), "d1 in the table", || async {
        let Ok(status) = cluster_status(&replicas).await else {
            return Ok(None);
        };
        let table = status.table.unwrap_or_default();
        let mut members = table
            .current
            .iter()
            .chain(&table.next)
            .flat_map(|t| &t.members);
        Ok(members.any(|m| m.node == "d1").then_some(()))
    })
    .await?;
    Ok((replicas, daemon))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_framed_link_must_present_the_daemons_token() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (_replicas, daemon) = member(
        dir.path(),
        Vec::new(),
        &[("TROUPE_API_TOKEN", "link-secret")],
    )
    .await?;
    let address = daemon.addr.to_string();

    let reason = refused_because(read_state(&links(None, None)?, &address).await)?;
    assert!(reason.contains("requires"), "{reason}");
    let wrong = links(Some("Bearer not-it"), None)?;
    refused_because(read_state(&wrong, &address).await)?;

    let right = links(Some("Bearer link-secret"), None)?;
    read_state(&right, &address)
        .await
        .context("a link presenting the daemon's token")?;
    assert!(
        !daemon.log().contains("link-secret"),
        "the token was logged"
    );
    Ok(())
}

/// The streams other daemons opened show in `/metrics` and the Admin API's
/// status while they are served, and leave them when their dialler closes
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_links_peers_opened_show_in_metrics_and_status() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let metrics = vec!["--metrics-listen".to_owned(), "127.0.0.1:0".to_owned()];
    let (_replicas, daemon) = member(dir.path(), metrics, &[]).await?;
    let endpoint = metrics_addr(&daemon.log()).context("no metrics address logged")?;
    let streams = || async move {
        anyhow::Ok(
            scrape(endpoint)
                .await?
                .sum("troupe_peer_link_inbound_streams", &[]),
        )
    };
    assert_eq!(streams().await?, 0.0);

    let peer = links(None, None)?;
    read_state(&peer, &daemon.addr.to_string()).await?;
    assert!(streams().await? >= 1.0);
    // `troupe status` reads the same count from the Admin API.
    let status = daemon.status().await?;
    let inbound = status.inbound_links.context("no inbound_links in Status")?;
    assert!(inbound.streams >= 1, "{inbound:?}");
    assert_eq!(inbound.let_go, 0);
    drop(peer);
    // The dialler's connections close as its links drop; the daemon's serve
    // loops see the end and stop counting them.
    poll_until(
        Duration::from_secs(5),
        "no streams served after the peer closed",
        || async { Ok((streams().await? == 0.0).then_some(())) },
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_tls_only_a_members_certificate_opens_a_framed_link() -> anyhow::Result<()> {
    let ca = TestCa::new()?;
    let replicas = PlacementCluster::start_with_tls(1, &[], Some(ca.clone())).await?;
    replicas.leader().await?;
    let placement = placement_arg(&replicas);
    let dir = tempfile::tempdir()?;
    let args = memory_member_args(&placement, "d1", ca.member_args("d1")?);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let daemon = Daemon::start(dir.path(), &args).await?;
    let address = daemon.addr.to_string();

    let (cert, key) = ca.issue("app", &Subject::client("app"))?;
    let client = Connector::with_config(troupe_tls::client_config_for_server(
        ca.ca_path(),
        Some((cert.as_path(), key.as_path())),
    )?);
    let reason = refused_because(read_state(&links(None, Some(client))?, &address).await)?;
    assert!(reason.contains("cluster members"), "{reason}");

    let member = links(None, Some(ca.member_connector("d2")?))?;
    read_state(&member, &address)
        .await
        .context("a member's framed link")?;
    // Plaintext never reaches the link's hello.
    refused_because(read_state(&links(None, None)?, &address).await)?;
    Ok(())
}

/// A cluster's API token rotation ends once no daemon lets anything in with
/// the old token: `troupe cluster status` shows each token place over the
/// members, and names the daemon and the peer still presenting the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_status_names_who_still_presents_the_old_token() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let env = [("TROUPE_API_TOKEN", "link-new, link-old")];
    let (replicas, daemon) = member(dir.path(), Vec::new(), &env).await?;
    // A peer not moved over yet.
    let behind = links(Some("Bearer link-old"), None)?;
    read_state(&behind, &daemon.addr.to_string()).await?;

    let placement = placement_arg(&replicas);
    let status = ["cluster", "status", "--placement", &placement, "-o", "json"];
    let (ok, out, err) = run_cli_env(&status, &[("TROUPE_API_TOKEN", "link-new")]).await?;
    assert!(ok.success(), "{err}");
    let shown: serde_json::Value = serde_json::from_str(&out)?;
    let tokens = &shown["tokens"];
    // The CLI's own call to the member used the new token.
    assert_eq!(tokens[0]["position"], 1, "{tokens}");
    assert_eq!(tokens[0]["used_on"], 1, "{tokens}");
    let old = &tokens[1];
    assert_eq!(old["position"], 2, "{tokens}");
    assert_eq!(old["source_name"], "TROUPE_API_TOKEN", "{tokens}");
    assert_eq!((&old["daemons"], &old["used_on"]), (&1.into(), &1.into()));
    assert_eq!(old["last_node"], "d1", "{tokens}");
    let from = old["last_from"].as_str().unwrap_or_default();
    assert!(from.starts_with("127.0.0.1:"), "{tokens}");

    let table = ["cluster", "status", "--placement", &placement];
    let (ok, out, err) = run_cli_env(&table, &[("TROUPE_API_TOKEN", "link-new")]).await?;
    assert!(ok.success(), "{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("api token 2 of TROUPE_API_TOKEN"))
        .with_context(|| format!("no old token's line in {out}"))?;
    assert!(line.contains(" on d1"), "{line}");
    assert!(
        !out.contains("link-old") && !out.contains("link-new"),
        "{out}"
    );
    Ok(())
}
