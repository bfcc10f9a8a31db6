//! Tokens (issue 16): every RPC the daemon serves, without a token, with a
//! wrong one, with the other credential's and with the right ones; several
//! tokens at once, and a token file replaced while the daemon runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use prost::Message as _;
use tonic::transport::Channel;
use tonic::Code;
use troupe_tests::auth_call::{call, refused};
use troupe_tests::*;

const API_TOKENS: &str = "api-old, api-new";
const FIRST_API_TOKEN: &str = "api-old";
const APP_TOKEN: &str = "app-first";
const READ_TOKEN: &str = "reader";

/// What the read-only token may call: inspection, and nothing that changes
/// state, runs actor code or copies the store. Stated here apart from the
/// daemon's own list, so that a change to either shows.
const READ_ONLY: &[&str] = &[
    "/troupe.v1.Admin/Status",
    "/troupe.v1.Admin/ListActors",
    "/troupe.v1.Admin/DescribeActor",
    "/troupe.v1.Admin/ListStoredActors",
    "/troupe.v1.Admin/ListDeadLetters",
    "/troupe.v1.Admin/GetDeadLetter",
    "/troupe.v1.ActorClient/GetState",
    "/troupe.v1.ActorClient/GetReminder",
    "/troupe.v1.ActorClient/ListReminders",
    "/troupe.v1.ActorClient/GetAlarm",
    "/troupe.v1.ActorClient/Watch",
    "/troupe.v1.ActorClient/WatchType",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
];

/// Which tokens a service takes: `None` is open.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Wants {
    Open,
    Api,
    App,
    /// ActorClient: the API token, or an app's own token for its actors' calls.
    ApiOrApp,
}

/// Every method of every service in the API's descriptors, so that a service
/// added later is checked here too (or fails this test until it is placed).
fn all_methods() -> anyhow::Result<BTreeMap<String, Wants>> {
    let set = prost_types::FileDescriptorSet::decode(troupe_proto::v1::FILE_DESCRIPTOR_SET)?;
    let mut methods = BTreeMap::new();
    for file in &set.file {
        for service in &file.service {
            let name = format!("{}.{}", file.package(), service.name());
            let wants = match name.as_str() {
                "troupe.v1.ActorClient" => Wants::ApiOrApp,
                "troupe.v1.Admin" => Wants::Api,
                "troupe.v1.AppHost" => Wants::App,
                // Served by placement replicas and by daemons of a cluster only.
                "troupe.v1.Placement" | "troupe.v1.PeerLink" => continue,
                other => {
                    bail!("service {other} is not placed in this test: which token guards it?")
                }
            };
            for method in &service.method {
                methods.insert(format!("/{name}/{}", method.name()), wants);
            }
        }
    }
    methods.insert(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo".into(),
        Wants::Api,
    );
    methods.insert("/grpc.health.v1.Health/Check".into(), Wants::Open);
    Ok(methods)
}

/// A daemon under `dir` that takes the API and read-only tokens from its
/// environment and the app token from a file holding `app_tokens` (the
/// file's path, to change it).
async fn daemon_with_tokens(dir: &Path, app_tokens: &str) -> anyhow::Result<(Daemon, PathBuf)> {
    let token_file = dir.join("app-token");
    std::fs::write(&token_file, app_tokens)?;
    let file = token_file.to_str().context("temp path is not UTF-8")?;
    let daemon = Daemon::start_with_env(
        &dir.join("data"),
        &["--app-token-file", file],
        &[
            ("TROUPE_API_TOKEN", API_TOKENS),
            ("TROUPE_READ_TOKEN", READ_TOKEN),
        ],
    )
    .await?;
    Ok((daemon, token_file))
}

/// A daemon under `dir` with the API and read-only tokens and metrics on.
async fn daemon_with_metrics(dir: &Path) -> anyhow::Result<Daemon> {
    Daemon::start_with_env(
        dir,
        &["--metrics-listen", "127.0.0.1:0"],
        &[
            ("TROUPE_API_TOKEN", API_TOKENS),
            ("TROUPE_READ_TOKEN", READ_TOKEN),
        ],
    )
    .await
}

#[tokio::test]
async fn every_rpc_wants_its_own_token() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (daemon, _) =
        daemon_with_tokens(dir.path(), &format!("# the app token\n{APP_TOKEN}\n")).await?;
    let channel = Channel::from_shared(daemon.url())?.connect().await?;

    let methods = all_methods()?;
    assert!(methods.len() >= 20, "only {} methods found", methods.len());
    for (path, wants) in &methods {
        for (token, accepted) in [
            (None, *wants == Wants::Open),
            (Some("nope"), *wants == Wants::Open),
            (
                Some("api-old"),
                matches!(wants, Wants::Open | Wants::Api | Wants::ApiOrApp),
            ),
            (
                Some("api-new"),
                matches!(wants, Wants::Open | Wants::Api | Wants::ApiOrApp),
            ),
            (
                Some(APP_TOKEN),
                matches!(wants, Wants::Open | Wants::App | Wants::ApiOrApp),
            ),
            (
                Some(READ_TOKEN),
                *wants == Wants::Open || READ_ONLY.contains(&path.as_str()),
            ),
        ] {
            let answer = call(&channel, path, token).await?;
            assert_eq!(
                !refused(&answer),
                accepted,
                "{path} with token {token:?} ({wants:?}): {answer:?}"
            );
            // A known token used beyond its reach is told so, by name.
            let denied = matches!(&answer, Err(s) if s.code() == Code::PermissionDenied);
            let beyond_reach = token == Some(READ_TOKEN)
                && !accepted
                && matches!(wants, Wants::Api | Wants::ApiOrApp);
            assert_eq!(denied, beyond_reach, "{path} with {token:?}: {answer:?}");
            if let Err(status) = &answer {
                for secret in ["api-old", "api-new", APP_TOKEN, READ_TOKEN] {
                    assert!(!status.message().contains(secret), "{path}: {status:?}");
                }
            }
        }
    }
    for secret in ["api-old", "api-new", APP_TOKEN, READ_TOKEN] {
        assert!(
            !daemon.log().contains(secret),
            "a token in the daemon's log"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_token_file_replaced_on_disk_is_used_without_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (daemon, token_file) = daemon_with_tokens(dir.path(), &format!("{APP_TOKEN}\n")).await?;
    let channel = Channel::from_shared(daemon.url())?.connect().await?;
    let attach = "/troupe.v1.AppHost/Attach";
    assert!(!refused(&call(&channel, attach, Some(APP_TOKEN)).await?));

    // As a mounted secret is updated: a new file renamed over the old one.
    let next = dir.path().join("app-token.next");
    std::fs::write(&next, "app-second\n")?;
    std::fs::rename(&next, &token_file)?;
    poll_until(
        Duration::from_secs(15),
        "the new app token accepted",
        || async {
            Ok((!refused(&call(&channel, attach, Some("app-second")).await?)).then_some(()))
        },
    )
    .await?;
    assert!(refused(&call(&channel, attach, Some(APP_TOKEN)).await?));

    // A file emptied mid-rotation keeps the tokens it had.
    std::fs::write(&token_file, "")?;
    poll_until(
        Duration::from_secs(15),
        "the daemon saw the empty file",
        || async {
            Ok(daemon
                .log()
                .contains("keeping the tokens it held before")
                .then_some(()))
        },
    )
    .await?;
    assert!(!refused(&call(&channel, attach, Some("app-second")).await?));
    Ok(())
}

#[tokio::test]
async fn the_cli_sends_the_token_from_the_environment() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (daemon, _) = daemon_with_tokens(dir.path(), &format!("{APP_TOKEN}\n")).await?;
    let addr = daemon.addr.to_string();
    let args = ["status", "--addr", addr.as_str()];

    let (status, _, stderr) = run_cli(&args).await?;
    assert!(!status.success());
    assert!(stderr.contains("UNAUTHENTICATED"), "{stderr}");
    assert!(
        stderr.contains("TROUPE_API_TOKEN"),
        "says where the token goes: {stderr}"
    );

    let (status, stdout, stderr) = run_cli_env(&args, &[("TROUPE_API_TOKEN", "api-new")]).await?;
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains(&addr), "{stdout}");

    // The read-only token inspects from the CLI, and is told what it may
    // not do rather than that it is unknown.
    let reader = [("TROUPE_API_TOKEN", READ_TOKEN)];
    let (status, stdout, stderr) = run_cli_env(&args, &reader).await?;
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains(&addr), "{stdout}");
    let invoke = ["invoke", "counter", "c1", "incr", "--addr", addr.as_str()];
    let (status, _, stderr) = run_cli_env(&invoke, &reader).await?;
    assert!(!status.success());
    assert!(
        stderr.contains("PERMISSION_DENIED") && stderr.contains("read-only token"),
        "{stderr}"
    );
    assert!(
        !stderr.contains(READ_TOKEN),
        "the token in the error: {stderr}"
    );
    Ok(())
}

#[tokio::test]
async fn nothing_listens_beyond_loopback_unprotected_unless_told() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().to_str().context("temp path is not UTF-8")?;
    let serve = ["serve", "--listen", "0.0.0.0:0", "--data-dir", data];
    let (status, _, stderr) = run_cli(&serve).await?;
    assert!(
        !status.success(),
        "an unprotected daemon started on 0.0.0.0"
    );
    assert!(stderr.contains("--insecure"), "{stderr}");

    let placement = [
        "placement",
        "serve",
        "--id",
        "1",
        "--listen",
        "0.0.0.0:0",
        "--data-dir",
        data,
    ];
    let (status, _, stderr) = run_cli(&placement).await?;
    assert!(!status.success(), "placement started on 0.0.0.0");
    assert!(stderr.contains("--insecure"), "{stderr}");

    let metrics = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "0.0.0.0:0",
        "--data-dir",
        data,
    ];
    let (status, _, stderr) = run_cli_env(&metrics, &[("TROUPE_API_TOKEN", "")]).await?;
    assert!(!status.success(), "open metrics started on 0.0.0.0");
    assert!(stderr.contains("--metrics-listen"), "{stderr}");

    Ok(())
}

/// A token short enough to guess is refused where other machines reach a
/// listener it guards (the daemon does not start), named by its place and
/// never shown; on loopback it is taken, with a warning.
#[tokio::test]
async fn short_tokens_are_refused_beyond_loopback() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().to_str().context("temp path is not UTF-8")?;
    let short = "hunter2";
    let long = "a-token-long-enough-to-keep";
    let tokens = [("TROUPE_API_TOKEN", long), ("TROUPE_APP_TOKEN", short)];
    let beyond = ["serve", "--listen", "0.0.0.0:0", "--data-dir", data];
    let (status, _, stderr) = run_cli_env(&beyond, &tokens).await?;
    assert!(
        !status.success(),
        "a daemon with a short token started on 0.0.0.0"
    );
    assert!(
        stderr.contains("token 1 of TROUPE_APP_TOKEN is 7 characters"),
        "{stderr}"
    );
    assert!(!stderr.contains(short), "the token shown: {stderr}");

    let metrics = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "0.0.0.0:0",
        "--data-dir",
        data,
    ];
    let (status, _, stderr) = run_cli_env(&metrics, &tokens).await?;
    assert!(
        !status.success(),
        "metrics beyond loopback took a short token"
    );
    assert!(stderr.contains("TROUPE_APP_TOKEN"), "{stderr}");

    let replica = [
        "placement",
        "serve",
        "--id",
        "1",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "0.0.0.0:0",
        "--read-token-file",
    ];
    let file = dir.path().join("read-token");
    std::fs::write(&file, format!("{short}\n"))?;
    let mut args: Vec<&str> = replica.to_vec();
    args.extend([
        file.to_str().context("temp path is not UTF-8")?,
        "--data-dir",
        data,
    ]);
    let (status, _, stderr) = run_cli(&args).await?;
    assert!(!status.success(), "a replica's metrics took a short token");
    assert!(stderr.contains("is 7 characters"), "{stderr}");

    // On loopback a short token is only warned of.
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start_with_env(dir.path(), &[], &tokens).await?;
    assert!(daemon.log().contains("too short"), "no warning logged");
    Ok(())
}

#[tokio::test]
async fn metrics_want_the_api_token_when_the_daemon_does() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = Daemon::start_with_env(
        dir.path(),
        &["--metrics-listen", "127.0.0.1:0"],
        &[("TROUPE_API_TOKEN", API_TOKENS)],
    )
    .await?;
    let addr = scrape::metrics_addr(&daemon.log()).context("no metrics address logged")?;
    let anonymous = scrape::http_get(addr, "/metrics").await?;
    assert_eq!(anonymous.status, 401, "{anonymous:?}");
    assert!(anonymous.body.contains("TROUPE_API_TOKEN"), "{anonymous:?}");
    assert!(
        !anonymous.body.contains(FIRST_API_TOKEN),
        "the answer shows the token"
    );
    let wrong =
        scrape::http_get_with(addr, "/metrics", &[("authorization", "Bearer wrong")]).await?;
    assert_eq!(wrong.status, 401);
    let bearer = format!("Bearer {FIRST_API_TOKEN}");
    let scraped = scrape::http_get_with(addr, "/metrics", &[("authorization", &bearer)]).await?;
    assert_eq!(scraped.status, 200, "{scraped:?}");
    assert!(scraped.body.contains("# EOF"));
    Ok(())
}

/// A dashboard scrapes with the read-only token and can change nothing.
#[tokio::test]
async fn metrics_take_the_read_only_token_too() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = daemon_with_metrics(dir.path()).await?;
    let addr = scrape::metrics_addr(&daemon.log()).context("no metrics address logged")?;
    let bearer = format!("Bearer {READ_TOKEN}");
    let scraped = scrape::http_get_with(addr, "/metrics", &[("authorization", &bearer)]).await?;
    assert_eq!(scraped.status, 200, "{scraped:?}");
    let wrong =
        scrape::http_get_with(addr, "/metrics", &[("authorization", "Bearer readers")]).await?;
    assert_eq!(wrong.status, 401, "{wrong:?}");
    Ok(())
}

/// The audit trail: each admin change is logged once under `troupe::audit`
/// with what was done, to which actor, by which credential and how it
/// ended; reads are not, and no token reaches the log.
#[tokio::test]
async fn admin_changes_are_audited_with_the_credential_that_made_them() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (daemon, _) = daemon_with_tokens(dir.path(), &format!("{APP_TOKEN}\n")).await?;
    let addr = daemon.addr.to_string();
    let api = [("TROUPE_API_TOKEN", FIRST_API_TOKEN)];
    let audited = |log: &str| -> Vec<String> {
        log.lines()
            .filter(|line| line.contains("troupe::audit"))
            .map(str::to_owned)
            .collect()
    };

    let status = ["status", "--addr", addr.as_str()];
    let (ok, _, stderr) = run_cli_env(&status, &api).await?;
    assert!(ok.success(), "{stderr}");
    assert_eq!(audited(&daemon.log()), Vec::<String>::new(), "reads");

    let purge = [
        "actors",
        "purge",
        "counter",
        "c1",
        "--yes",
        "--addr",
        addr.as_str(),
    ];
    let (ok, _, stderr) = run_cli_env(&purge, &api).await?;
    assert!(ok.success(), "{stderr}");
    // Refused before it reaches the API: the guard's refusal is not an
    // admin change, so only the purge that ran is in the trail.
    let reader = [("TROUPE_API_TOKEN", READ_TOKEN)];
    let deactivate = [
        "actors",
        "deactivate",
        "counter",
        "c1",
        "--addr",
        addr.as_str(),
    ];
    let (ok, _, _) = run_cli_env(&deactivate, &reader).await?;
    assert!(!ok.success());

    let log = daemon.log();
    let lines = audited(&log);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    // The token by its place: the first of the two in the environment.
    let token = r#"token="token 1 of TROUPE_API_TOKEN""#;
    for field in ["purge", "counter/c1", "api token", token, "ok"] {
        assert!(lines[0].contains(field), "{field} in {}", lines[0]);
    }
    for token in [FIRST_API_TOKEN, READ_TOKEN, APP_TOKEN] {
        assert!(!log.contains(token), "{token} in the log");
    }
    Ok(())
}

/// The exposition line of `count` refusals by `service` for `reason`.
fn refused_line(service: &str, reason: &str, count: u32) -> String {
    format!(r#"troupe_auth_refused_total{{service="{service}",reason="{reason}"}} {count}"#)
}

/// Every refusal is counted by service and reason, and logged without a
/// line per attempt or the token sent.
#[tokio::test]
async fn refused_requests_are_counted_by_service_and_reason() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let daemon = daemon_with_metrics(dir.path()).await?;
    let channel = Channel::from_shared(daemon.url())?.connect().await?;
    let invoke = "/troupe.v1.ActorClient/Invoke";
    let purge = "/troupe.v1.Admin/PurgeActor";
    let addr = scrape::metrics_addr(&daemon.log()).context("no metrics address logged")?;
    let bearer = format!("Bearer {FIRST_API_TOKEN}");

    // Before any refusal, what each guard can refuse shows at 0, so that
    // Prometheus's rate() counts the first; what none can, not at all.
    let before = scrape::http_get_with(addr, "/metrics", &[("authorization", &bearer)]).await?;
    for (service, reason) in [
        ("client", "read_only"),
        ("admin", "no_token"),
        ("reflection", "bad_token"),
        ("link", "no_token"),
        ("metrics", "no_token"),
    ] {
        let line = refused_line(service, reason, 0);
        assert!(before.body.contains(&line), "{line} in {}", before.body);
    }
    // Without TLS no link is refused for its certificate.
    let series = r#"{service="link",reason="not_member"}"#;
    assert!(!before.body.contains(series), "{series} in {}", before.body);

    for (path, token) in [
        (invoke, None),
        (invoke, Some("guess")),
        (invoke, Some(READ_TOKEN)),
        (purge, Some(READ_TOKEN)),
        (purge, Some("guess")),
    ] {
        assert!(refused(&call(&channel, path, token).await?), "{path}");
    }
    let guess = scrape::http_get_with(addr, "/metrics", &[("authorization", "Bearer guess")]);
    assert_eq!(guess.await?.status, 401);

    let scraped = scrape::http_get_with(addr, "/metrics", &[("authorization", &bearer)]).await?;
    assert_eq!(scraped.status, 200, "{scraped:?}");
    for (service, reason) in [
        ("client", "no_token"),
        ("client", "bad_token"),
        ("client", "read_only"),
        ("admin", "read_only"),
        ("admin", "bad_token"),
        ("metrics", "bad_token"),
    ] {
        let line = refused_line(service, reason, 1);
        assert!(scraped.body.contains(&line), "{line} in {}", scraped.body);
    }
    let log = daemon.log();
    let warned = log.matches("refused a request").count();
    // Six refusals within seconds: the first is logged, the rest wait for
    // the next warning at least ten seconds on (a slow machine may see one).
    assert!((1..=2).contains(&warned), "{warned} warnings: {log}");
    for token in ["guess", READ_TOKEN, FIRST_API_TOKEN] {
        assert!(!log.contains(token), "{token} in the log");
    }
    Ok(())
}
