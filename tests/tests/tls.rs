//! TLS and mTLS end to end: a daemon's listener, daemon-to-daemon links and
//! placement refuse plaintext and certificates from another CA or without a
//! member identity, a certificate renewed on disk is what the next
//! connection gets, and `/metrics` is served over HTTPS, with client
//! certificates when the daemon requires them. (The cluster tests run with
//! mTLS on throughout: see `cluster_fixture`.)

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use tonic::transport::{Channel, Endpoint};
use tower_service::Service;
use troupe_tests::cluster_harness::{cluster_status, memory_member_args, placement_arg};
use troupe_tests::injector::{
    client_config, client_config_with_cert, https, https_with_headers, Http,
};
use troupe_tests::replicas::PlacementCluster;
use troupe_tests::scrape::{http_get, metrics_addr, scrape};
use troupe_tests::tls::{connect, TestCa};
use troupe_tests::*;
use troupe_tls::dev::Subject;
use troupe_tls::Connector;

fn endpoint(addr: impl std::fmt::Display) -> anyhow::Result<Endpoint> {
    Ok(Channel::from_shared(format!("http://{addr}"))?.timeout(Duration::from_secs(10)))
}

/// `--tls-*` flags with the certificate of `holder` but trusting `trusted`'s
/// CA: a process that knows the cluster's CA but holds no certificate of it.
fn foreign_args(holder: &TestCa, trusted: &TestCa, name: &str) -> anyhow::Result<Vec<String>> {
    let mut args = holder.member_args(name)?;
    args[5] = trusted.ca_path().display().to_string();
    Ok(args)
}

async fn peer_link_open(channel: Channel) -> Result<(), tonic::Status> {
    let mut client = pb::peer_link_client::PeerLinkClient::new(channel);
    client
        .open(tokio_stream::iter(Vec::<pb::LinkFrame>::new()))
        .await
        .map(|_| ())
}

/// A daemon with TLS on serves TLS clients only; plaintext never reaches a
/// service.
#[tokio::test]
async fn a_daemon_with_tls_refuses_plaintext_and_serves_tls_clients() -> anyhow::Result<()> {
    let ca = TestCa::new()?;
    let dir = tempfile::tempdir()?;
    let args = ca.member_args("d1")?;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let daemon = Daemon::start(dir.path(), &args).await?;

    let plain = endpoint(daemon.addr)?.connect().await;
    if let Ok(channel) = plain {
        let mut admin = pb::admin_client::AdminClient::new(channel);
        assert!(admin.status(pb::StatusRequest {}).await.is_err());
    }
    let channel = connect(endpoint(daemon.addr)?, Some(&ca.client_connector()?)).await?;
    let status = pb::admin_client::AdminClient::new(channel)
        .status(pb::StatusRequest {})
        .await?;
    assert_eq!(status.into_inner().listen, daemon.addr.to_string());

    // The CLI: plaintext is told what to do; with the CA it works.
    let addr = daemon.addr.to_string();
    let (code, _, err) = run_cli(&["status", "--addr", &addr]).await?;
    assert_eq!(code.code(), Some(3), "{err}");
    assert!(err.contains("TROUPE_TLS_CA"), "{err}");
    let ca_path = ca.ca_path().display().to_string();
    let (code, out, err) = run_cli_env(
        &["status", "--addr", &addr],
        &[("TROUPE_TLS_CA", ca_path.as_str())],
    )
    .await?;
    assert!(code.success(), "{err}");
    assert!(out.contains("d1") || out.contains(&addr), "{out}");
    Ok(())
}

#[tokio::test]
async fn status_tells_the_tls_and_tokens_in_use_and_what_was_refused() -> anyhow::Result<()> {
    // Long enough not to be a problem to --check, which this test counts.
    const API_TOKENS: &str = "status-api-token-1,status-api-token-2";
    const READ_TOKEN: &str = "status-reader-token";
    let ca = TestCa::new()?;
    let dir = tempfile::tempdir()?;
    let args = ca.member_args("d1")?;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let daemon = Daemon::start_with_env(
        dir.path(),
        &args,
        &[
            ("TROUPE_API_TOKEN", API_TOKENS),
            ("TROUPE_READ_TOKEN", READ_TOKEN),
        ],
    )
    .await?;
    let channel = connect(endpoint(daemon.addr)?, Some(&ca.client_connector()?)).await?;
    let anonymous = pb::admin_client::AdminClient::new(channel)
        .status(pb::StatusRequest {})
        .await;
    assert_eq!(
        anonymous.err().map(|s| s.code()),
        Some(tonic::Code::Unauthenticated)
    );

    // The read-only token is enough to see it.
    let addr = daemon.addr.to_string();
    let ca_path = ca.ca_path().display().to_string();
    let env = [
        ("TROUPE_TLS_CA", ca_path.as_str()),
        ("TROUPE_API_TOKEN", READ_TOKEN),
    ];
    let (code, out, err) = run_cli_env(&["status", "--addr", &addr, "-o", "json"], &env).await?;
    assert!(code.success(), "{err}");
    let status: serde_json::Value = serde_json::from_str(&out)?;
    let security = &status["security"];
    assert_eq!(security["api_tokens"], 2, "{security}");
    assert_eq!(security["read_tokens"], 1, "{security}");
    assert_eq!(security["app_tokens"], 0, "{security}");
    assert_eq!(
        security["refused"],
        serde_json::json!([{"service": "admin", "reason": "no_token", "count": 1}]),
        "{security}"
    );
    let tls = &security["tls"];
    assert_eq!(tls["client_certificates"], "optional", "{tls}");
    // The test CA issues for two days.
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as f64;
    for field in ["certificate_expires_unix_ms", "ca_expires_unix_ms"] {
        let at = tls[field]
            .as_f64()
            .with_context(|| format!("no {field} in {tls}"))?;
        let days = (at - now) / 86_400_000.0;
        assert!((1.9..=2.1).contains(&days), "{field}: {days} days");
    }

    let (code, table, err) = run_cli_env(&["status", "--addr", &addr], &env).await?;
    assert!(code.success(), "{err}");
    for shown in [
        "client API: 2 tokens (rotating); app: no token, open to anyone who reaches the port",
        "on; client certificates optional",
        "EXPIRES ",
        "1 request since start: admin no_token 1",
    ] {
        assert!(table.contains(shown), "no {shown:?} in\n{table}");
    }
    // The test CA's certificates end within a week: a problem to --check.
    let (code, checked, err) = run_cli_env(&["status", "--addr", &addr, "--check"], &env).await?;
    assert_eq!(code.code(), Some(7), "{checked}{err}");
    assert!(
        checked.contains("2 problems:\n  - its certificate expires at ")
            && checked.contains("within a week\n    renew it; the files of --tls-cert"),
        "{checked}"
    );
    assert!(err.contains("has 2 problems (listed above)"), "{err}");
    for token in ["status-api-token-1", "status-api-token-2", READ_TOKEN] {
        assert!(
            !out.contains(token) && !table.contains(token),
            "{token} shown"
        );
    }
    Ok(())
}

#[tokio::test]
async fn required_client_certificates_keep_out_clients_without_one() -> anyhow::Result<()> {
    let ca = TestCa::new()?;
    let dir = tempfile::tempdir()?;
    let mut args = ca.member_args("d1")?;
    args.extend(["--tls-client-certs".to_owned(), "required".to_owned()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let daemon = Daemon::start(dir.path(), &args).await?;

    let anonymous = connect(endpoint(daemon.addr)?, Some(&ca.client_connector()?)).await;
    let refused = match anonymous {
        Err(_) => true,
        Ok(channel) => pb::admin_client::AdminClient::new(channel)
            .status(pb::StatusRequest {})
            .await
            .is_err(),
    };
    assert!(refused, "a client without a certificate was served");

    let (cert, key) = ca.issue("app", &Subject::client("app"))?;
    let with_cert = Connector::with_config(troupe_tls::client_config_for_server(
        ca.ca_path(),
        Some((cert.as_path(), key.as_path())),
    )?);
    let channel = connect(endpoint(daemon.addr)?, Some(&with_cert)).await?;
    pb::admin_client::AdminClient::new(channel)
        .status(pb::StatusRequest {})
        .await?;

    Ok(())
}

/// Every path into a cluster refuses a certificate from another CA: a
/// daemon joining placement, a link to a daemon, a replica's Raft rpc; and
/// a daemon refuses a placement replica it cannot verify.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn certificates_from_another_ca_are_refused_on_every_cluster_path() -> anyhow::Result<()> {
    let ca = TestCa::new()?;
    let other = TestCa::new()?;
    let replicas = PlacementCluster::start_with_tls(1, &[], Some(ca.clone())).await?;
    replicas.leader().await?;
    let placement = placement_arg(&replicas);

    let d1_dir = tempfile::tempdir()?;
    let d1_args = memory_member_args(&placement, "d1", ca.member_args("d1")?);
    let d1_args: Vec<&str> = d1_args.iter().map(String::as_str).collect();
    let d1 = Daemon::start(d1_dir.path(), &d1_args).await?;
    poll_until(WAIT, "d1 in the placement table", || async {
        let status = cluster_status(&replicas).await?;
        Ok(format!("{status:?}").contains("\"d1\"").then_some(()))
    })
    .await?;

    // Daemon -> placement: a node that trusts the cluster's CA but holds a
    // certificate of another cannot join.
    let rogue_dir = tempfile::tempdir()?;
    let rogue_args = memory_member_args(&placement, "rogue", foreign_args(&other, &ca, "rogue")?);
    let rogue_args: Vec<&str> = rogue_args.iter().map(String::as_str).collect();
    let rogue = Daemon::start(rogue_dir.path(), &rogue_args).await?;
    poll_until(WAIT, "placement refusing the rogue's handshake", || async {
        Ok(replicas
            .logs()
            .contains("TLS handshake refused")
            .then_some(()))
    })
    .await?;
    let status = cluster_status(&replicas).await?;
    assert!(!format!("{status:?}").contains("rogue"), "{status:?}");
    drop(rogue);

    // Placement -> daemon: a daemon of the cluster refuses a replica whose
    // certificate comes from another CA (it never joins through it).
    let fake = PlacementCluster::start_with_tls(1, &[], Some(other.clone())).await?;
    let d2_dir = tempfile::tempdir()?;
    let d2_args = memory_member_args(&placement_arg(&fake), "d2", ca.member_args("d2")?);
    let d2_args: Vec<&str> = d2_args.iter().map(String::as_str).collect();
    let d2 = Daemon::start(d2_dir.path(), &d2_args).await?;
    poll_until(WAIT, "d2 refusing the fake replica", || async {
        Ok(d2.log().contains("invalid peer certificate").then_some(()))
    })
    .await?;

    // Daemon -> daemon: a link from a stranger is refused in the handshake;
    // plaintext gets nowhere.
    let stranger = other.member_connector("stranger")?;
    let refused = match connect(endpoint(d1.addr)?, Some(&stranger)).await {
        Err(_) => true,
        Ok(channel) => peer_link_open(channel).await.is_err(),
    };
    assert!(refused, "a stranger opened a link");
    if let Ok(channel) = endpoint(d1.addr)?.connect().await {
        assert!(peer_link_open(channel).await.is_err());
    }
    // A certificate of the cluster's CA that names no member (a client's)
    // does not open a link either.
    let (cert, key) = ca.issue("app", &Subject::client("app"))?;
    let client_cert = Connector::with_config(troupe_tls::client_config_for_server(
        ca.ca_path(),
        Some((cert.as_path(), key.as_path())),
    )?);
    let channel = connect(endpoint(d1.addr)?, Some(&client_cert)).await?;
    let status = peer_link_open(channel)
        .await
        .err()
        .context("a client opened a link")?;
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    assert!(status.message().contains("cluster members"), "{status:?}");
    // ...while a member's link is let in.
    let member = connect(endpoint(d1.addr)?, Some(&ca.member_connector("d3")?)).await?;
    let opened = peer_link_open(member).await;
    assert!(
        !matches!(&opened, Err(s) if s.code() == tonic::Code::Unauthenticated),
        "{opened:?}"
    );

    // Replica <-> replica: another CA's member cannot send Raft messages.
    let replica = replicas.replicas.values().next().context("a replica")?;
    let refused = match connect(endpoint(replica.addr)?, Some(&stranger)).await {
        Err(_) => true,
        Ok(channel) => pb::placement_client::PlacementClient::new(channel)
            .raft(pb::RaftMessage::default())
            .await
            .is_err(),
    };
    assert!(refused, "a stranger reached the Raft rpc");
    drop(d1);
    Ok(())
}

/// Reads the certificate a daemon shows a new connection.
async fn served_names(addr: std::net::SocketAddr, ca: &Path) -> anyhow::Result<Vec<String>> {
    let mut connector = Connector::with_config(troupe_tls::client_config_for_server(ca, None)?);
    let io = connector
        .call(format!("http://{addr}").parse()?)
        .await?
        .into_inner();
    let (_, session) = io.get_ref();
    let leaf = session
        .peer_certificates()
        .and_then(|c| c.first())
        .context("no certificate")?;
    Ok(troupe_tls::identities_of(leaf))
}

#[tokio::test]
async fn a_certificate_renewed_on_disk_is_used_without_a_restart() -> anyhow::Result<()> {
    let ca = TestCa::new()?;
    let dir = tempfile::tempdir()?;
    let args = ca.member_args("d1")?;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let daemon = Daemon::start(dir.path(), &args).await?;
    let before = served_names(daemon.addr, ca.ca_path()).await?;
    assert!(!before.contains(&"renewed.example".to_owned()));

    // A connection made before the renewal keeps working after it.
    let kept = connect(endpoint(daemon.addr)?, Some(&ca.client_connector()?)).await?;
    ca.issue(
        "d1",
        &Subject {
            hosts: vec!["renewed.example".into(), "127.0.0.1".into()],
            ..Subject::member("d1")
        },
    )?;
    let after = served_names(daemon.addr, ca.ca_path()).await?;
    assert!(after.contains(&"renewed.example".to_owned()), "{after:?}");
    pb::admin_client::AdminClient::new(kept)
        .status(pb::StatusRequest {})
        .await?;
    assert!(daemon.log().contains("TLS certificate files changed"));
    Ok(())
}

/// With a certificate the daemon serves `/metrics` over HTTPS, so that a
/// scraper's token never crosses the network in the clear: plain HTTP gets
/// no metrics. `--metrics-plain-http` opts out.
#[tokio::test]
async fn metrics_are_served_over_https_when_the_daemon_has_a_certificate() -> anyhow::Result<()> {
    let ca = TestCa::new()?;
    let metrics_args = |extra: &[&str]| -> anyhow::Result<Vec<String>> {
        let mut args = ca.member_args("d1")?;
        args.extend(["--metrics-listen", "127.0.0.1:0"].map(String::from));
        args.extend(extra.iter().map(|a| a.to_string()));
        Ok(args)
    };
    let dir = tempfile::tempdir()?;
    let args = metrics_args(&[])?;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let daemon = Daemon::start(dir.path(), &args).await?;
    let addr = metrics_addr(&daemon.log()).context("no metrics address logged")?;
    for http in [Http::One, Http::Two] {
        let tls = client_config(ca.ca_path(), http)?;
        let (status, body) = https(addr, tls, http, "GET", "/metrics", Vec::new()).await?;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("troupe_build_info"), "{body}");
        // The test CA issues for two days: the gauge says when, and the
        // daemon warned of it when it loaded the files.
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64();
        for certificate in ["own", "ca"] {
            let name = format!(
                r#"troupe_tls_certificate_expiry_timestamp_seconds{{certificate="{certificate}"}} "#
            );
            let at: f64 = body
                .lines()
                .find_map(|line| line.strip_prefix(name.as_str()))
                .with_context(|| format!("no {name} in {body}"))?
                .parse()?;
            let days = (at - now) / 86_400.0;
            assert!((1.9..=2.1).contains(&days), "{certificate}: {days} days");
        }
    }
    assert!(
        daemon.log().contains("expires within a week"),
        "{}",
        daemon.log()
    );
    let plain = http_get(addr, "/metrics").await;
    assert!(
        !plain.as_ref().is_ok_and(|r| r.status == 200),
        "plain HTTP got the metrics: {plain:?}"
    );
    drop(daemon);

    let dir = tempfile::tempdir()?;
    let args = metrics_args(&["--metrics-plain-http"])?;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let daemon = Daemon::start(dir.path(), &args).await?;
    let addr = metrics_addr(&daemon.log()).context("no metrics address logged")?;
    let scraped = scrape(addr).await?;
    assert!(
        scraped.text.contains("troupe_build_info"),
        "{}",
        scraped.text
    );
    Ok(())
}

/// A scrape of `addr` over HTTPS trusting `ca`, presenting `cert` if
/// given; the status and body, or why it failed.
async fn scrape_https(
    addr: std::net::SocketAddr,
    ca: &Path,
    cert: Option<&(std::path::PathBuf, std::path::PathBuf)>,
    http: Http,
    headers: &[(&str, &str)],
) -> anyhow::Result<(u16, String)> {
    let cert = cert.map(|(cert, key)| (cert.as_path(), key.as_path()));
    let tls = client_config_with_cert(ca, cert, http)?;
    https_with_headers(addr, tls, http, "GET", "/metrics", headers, Vec::new()).await
}

#[tokio::test]
async fn a_placement_replica_with_tls_serves_metrics_to_scrapers_with_a_certificate(
) -> anyhow::Result<()> {
    let ca = TestCa::new()?;
    let scraper = ca.issue("scraper", &Subject::client("scraper"))?;
    let replicas =
        PlacementCluster::start_with_tls(1, &["--metrics-listen", "127.0.0.1:0"], Some(ca.clone()))
            .await?;
    let replica = replicas.replicas.get(&1).context("no replica")?;
    let addr = metrics_addr(&replica.log()).context("no metrics address logged")?;
    let (status, body) = scrape_https(addr, ca.ca_path(), Some(&scraper), Http::One, &[]).await?;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("troupe_placement_raft_term"), "{body}");
    // Placement has no API token: without the read-only token, the
    // certificate is what proves a scraper.
    let anonymous = scrape_https(addr, ca.ca_path(), None, Http::One, &[]).await;
    assert!(
        anonymous.is_err(),
        "served without a certificate: {anonymous:?}"
    );
    let plain = http_get(addr, "/metrics").await;
    assert!(
        !plain.as_ref().is_ok_and(|r| r.status == 200),
        "plain HTTP got the metrics: {plain:?}"
    );
    Ok(())
}

/// How often the daemon has logged a refused handshake.
fn refusals(daemon: &Daemon) -> usize {
    daemon.log().matches("TLS handshake refused").count()
}

/// A daemon that requires client certificates requires them of scrapers
/// too (the handshake of one without, or with another CA's, is refused),
/// re-reading the CA when it changes; the API token, when configured, is
/// still wanted of a scraper with a certificate.
#[tokio::test]
async fn metrics_require_a_client_certificate_when_the_daemon_does() -> anyhow::Result<()> {
    let ca = TestCa::new()?;
    let other = TestCa::new()?;
    let scraper = ca.issue("scraper", &Subject::client("scraper"))?;
    let stranger = other.issue("stranger", &Subject::client("stranger"))?;
    let mut args = ca.member_args("d1")?;
    args.extend(
        [
            "--tls-client-certs",
            "required",
            "--metrics-listen",
            "127.0.0.1:0",
        ]
        .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start_with_env(dir.path(), &args, &[("TROUPE_API_TOKEN", "")]).await?;
    let addr = metrics_addr(&daemon.log()).context("no metrics address logged")?;
    for http in [Http::One, Http::Two] {
        let (status, body) = scrape_https(addr, ca.ca_path(), Some(&scraper), http, &[]).await?;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("troupe_build_info"), "{body}");
    }

    let anonymous = scrape_https(addr, ca.ca_path(), None, Http::One, &[]).await;
    assert!(
        anonymous.is_err(),
        "served without a certificate: {anonymous:?}"
    );
    poll_until(WAIT, "the daemon refusing the handshake", || async {
        Ok((refusals(&daemon) >= 1).then_some(()))
    })
    .await?;
    let foreign = scrape_https(addr, ca.ca_path(), Some(&stranger), Http::One, &[]).await;
    assert!(
        foreign.is_err(),
        "served another CA's certificate: {foreign:?}"
    );
    poll_until(WAIT, "the daemon refusing the handshake", || async {
        Ok((refusals(&daemon) >= 2).then_some(()))
    })
    .await?;

    // The CA is read again when it changes (renamed into place): trusting
    // the other CA too lets its certificates in.
    let both = format!(
        "{}{}",
        std::fs::read_to_string(ca.ca_path())?,
        std::fs::read_to_string(other.ca_path())?
    );
    let staged = dir.path().join("ca.pem.new");
    std::fs::write(&staged, both)?;
    std::fs::rename(&staged, ca.ca_path())?;
    let (status, body) = scrape_https(addr, ca.ca_path(), Some(&stranger), Http::One, &[]).await?;
    assert_eq!(status, 200, "{body}");
    drop(daemon);

    // With the API token, the certificate only lets the scraper connect.
    let dir = tempfile::tempdir()?;
    let daemon =
        Daemon::start_with_env(dir.path(), &args, &[("TROUPE_API_TOKEN", "scrape-token")]).await?;
    let addr = metrics_addr(&daemon.log()).context("no metrics address logged")?;
    let (status, body) = scrape_https(addr, ca.ca_path(), Some(&scraper), Http::One, &[]).await?;
    assert_eq!(status, 401, "{body}");
    let bearer = [("authorization", "Bearer scrape-token")];
    let (status, body) =
        scrape_https(addr, ca.ca_path(), Some(&scraper), Http::One, &bearer).await?;
    assert_eq!(status, 200, "{body}");
    let anonymous = scrape_https(addr, ca.ca_path(), None, Http::One, &bearer).await;
    assert!(
        anonymous.is_err(),
        "served without a certificate: {anonymous:?}"
    );
    Ok(())
}

/// Required client certificates stand in for the API token on a metrics
/// listener beyond loopback, as they do on `--listen`; plain HTTP checks
/// no certificate, so `--metrics-plain-http` there still needs the token
/// or `--insecure`.
#[tokio::test]
async fn metrics_beyond_loopback_need_no_token_when_client_certificates_are_required(
) -> anyhow::Result<()> {
    let ca = TestCa::new()?;
    let scraper = ca.issue("scraper", &Subject::client("scraper"))?;
    let mut args = ca.member_args("d1")?;
    args.extend(
        [
            "--tls-client-certs",
            "required",
            "--metrics-listen",
            "0.0.0.0:0",
        ]
        .map(String::from),
    );
    let no_tokens = [("TROUPE_API_TOKEN", ""), ("TROUPE_APP_TOKEN", "")];

    let dir = tempfile::tempdir()?;
    let serve: Vec<&str> = args.iter().map(String::as_str).collect();
    let daemon = Daemon::start_with_env(dir.path(), &serve, &no_tokens).await?;
    let bound = metrics_addr(&daemon.log()).context("no metrics address logged")?;
    // Bound on every interface; scraped on loopback only.
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], bound.port()));
    let (status, body) = scrape_https(addr, ca.ca_path(), Some(&scraper), Http::One, &[]).await?;
    assert_eq!(status, 200, "{body}");
    let anonymous = scrape_https(addr, ca.ca_path(), None, Http::One, &[]).await;
    assert!(
        anonymous.is_err(),
        "served without a certificate: {anonymous:?}"
    );
    drop(daemon);

    let data = dir.path().to_str().context("temp path is not UTF-8")?;
    let mut plain = vec!["serve", "--listen", "127.0.0.1:0", "--data-dir", data];
    plain.extend(serve.iter().copied());
    plain.push("--metrics-plain-http");
    let (status, _, stderr) = run_cli_env(&plain, &no_tokens).await?;
    assert!(
        !status.success(),
        "plain-HTTP metrics started on 0.0.0.0 without a token"
    );
    assert!(stderr.contains("--metrics-plain-http"), "{stderr}");
    Ok(())
}
