//! `troupe injector` end to end: the real binary over HTTPS answers the
//! `AdmissionReview` fixtures (`tests/fixtures/admission/`) as the API
//! server would send them, its patches give the pods the contract asks for,
//! malformed reviews get 400, `/healthz` answers probes, and a changed
//! config file or certificate is used without a restart.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{ensure, Context};
use base64::Engine as _;
use serde_json::{json, Value};
use tokio_rustls::rustls::ClientConfig;
use troupe_tests::injector::{client_config, https, Http, Injector};
use troupe_tests::poll_until;
use troupe_tests::tls::TestCa;
use troupe_tls::dev::Subject;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/admission");

fn fixture(name: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(Path::new(FIXTURES).join(name)).with_context(|| format!("fixture {name}"))
}

/// A webhook certificate as cert-manager or the chart makes one: the
/// Service's DNS names, no member identity.
fn webhook_subject() -> Subject {
    Subject {
        name: "troupe-injector".into(),
        hosts: vec![
            "troupe-injector.troupe.svc".into(),
            "localhost".into(),
            "127.0.0.1".into(),
        ],
        uris: Vec::new(),
    }
}

struct Setup {
    ca: Arc<TestCa>,
    _dir: tempfile::TempDir,
    config: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn setup() -> anyhow::Result<Setup> {
    let ca = TestCa::new()?;
    let (cert, key) = ca.issue("injector", &webhook_subject())?;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("sidecar.json");
    std::fs::write(&config, fixture("config.json")?)?;
    Ok(Setup {
        ca,
        _dir: dir,
        config,
        cert,
        key,
    })
}

async fn start(s: &Setup) -> anyhow::Result<Injector> {
    let (cert, key, config) = (
        s.cert.display().to_string(),
        s.key.display().to_string(),
        s.config.display().to_string(),
    );
    Injector::start(&["--tls-cert", &cert, "--tls-key", &key, "--config", &config]).await
}

/// POSTs a review as the API server does; the status and the body.
async fn post(
    inj: &Injector,
    tls: &Arc<ClientConfig>,
    body: Vec<u8>,
) -> anyhow::Result<(u16, String)> {
    https(inj.addr, tls.clone(), Http::Two, "POST", "/mutate", body).await
}

/// The response of a fixture's review, and its pod with the patch applied.
async fn review(
    inj: &Injector,
    tls: &Arc<ClientConfig>,
    body: Vec<u8>,
) -> anyhow::Result<(Value, Value)> {
    let sent: Value = serde_json::from_slice(&body)?;
    let (status, text) = post(inj, tls, body).await?;
    ensure!(status == 200, "status {status}: {text}\n{}", inj.log());
    let answer: Value = serde_json::from_str(&text)?;
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["kind"], "AdmissionReview");
    let response = answer["response"].clone();
    assert_eq!(response["uid"], sent["request"]["uid"]);
    let mut pod = sent["request"]["object"].clone();
    if let Some(patch) = response["patch"].as_str() {
        assert_eq!(response["patchType"], "JSONPatch");
        let patch = base64::engine::general_purpose::STANDARD.decode(patch)?;
        let patch: json_patch::Patch = serde_json::from_slice(&patch)?;
        json_patch::patch(&mut pod, &patch)?;
    }
    Ok((response, pod))
}

fn env_value(container: &Value, name: &str) -> Option<Value> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .map(|e| e["value"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reviews_over_https_inject_the_sidecar_as_the_contract_says() -> anyhow::Result<()> {
    let s = setup()?;
    let inj = start(&s).await?;
    let tls = client_config(s.ca.ca_path(), Http::Two)?;

    let (response, pod) = review(&inj, &tls, fixture("pod-enabled.json")?).await?;
    assert_eq!(response["allowed"], true);
    let spec = &pod["spec"];
    let sidecar = &spec["initContainers"][0];
    assert_eq!(sidecar["name"], "troupe");
    assert_eq!(sidecar["restartPolicy"], "Always");
    assert_eq!(spec["initContainers"][1]["name"], "migrate");
    // The app's own TROUPE_ADDR wins; the other containers get the config's.
    assert_eq!(
        env_value(&spec["containers"][0], "TROUPE_ADDR"),
        Some(json!("127.0.0.1:9999"))
    );
    assert_eq!(
        env_value(&spec["containers"][1], "TROUPE_ADDR"),
        Some(json!("127.0.0.1:7420"))
    );
    assert_eq!(
        env_value(&spec["initContainers"][1], "TROUPE_ADDR"),
        Some(json!("127.0.0.1:7420"))
    );
    assert_eq!(spec["terminationGracePeriodSeconds"], 45);

    let (response, pod) = review(&inj, &tls, fixture("pod-overrides.json")?).await?;
    assert_eq!(response["allowed"], true);
    let sidecar = &pod["spec"]["initContainers"][0];
    assert_eq!(sidecar["image"], "ghcr.io/example/troupe:0.2.0-rc1");
    assert_eq!(
        env_value(sidecar, "TROUPE_SHUTDOWN_GRACE"),
        Some(json!("60s"))
    );
    assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 75);

    for unchanged in ["pod-not-enabled.json", "pod-already-injected.json"] {
        let (response, _) = review(&inj, &tls, fixture(unchanged)?).await?;
        assert_eq!(response["allowed"], true, "{unchanged}");
        assert!(response.get("patch").is_none(), "{unchanged}: {response}");
    }

    let (response, _) = review(&inj, &tls, fixture("pod-bad-annotation.json")?).await?;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 400);
    let message = response["status"]["message"].as_str().unwrap_or_default();
    ensure!(
        message.contains("troupe.dev/memory-limit") && message.contains("512MB"),
        "{message}"
    );

    for malformed in [
        "malformed-not-json.json",
        "malformed-no-request.json",
        "malformed-no-uid.json",
        "malformed-not-a-pod.json",
    ] {
        let (status, text) = post(&inj, &tls, fixture(malformed)?).await?;
        assert_eq!(status, 400, "{malformed}: {text}");
        ensure!(
            text.to_lowercase().contains("review") && !text.starts_with('{'),
            "{malformed}: {text}"
        );
    }

    // kubelet's httpGet probe, over HTTP/1.1.
    let probe = client_config(s.ca.ca_path(), Http::One)?;
    let (status, text) = https(
        inj.addr,
        probe.clone(),
        Http::One,
        "GET",
        "/healthz",
        Vec::new(),
    )
    .await?;
    assert_eq!((status, text.trim()), (200, "ok"));
    // HTTP/1.1 reviews work too.
    let (status, _) = https(
        inj.addr,
        probe,
        Http::One,
        "POST",
        "/mutate",
        fixture("pod-enabled.json")?,
    )
    .await?;
    assert_eq!(status, 200);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_config_or_certificate_is_used_without_a_restart() -> anyhow::Result<()> {
    let s = setup()?;
    let mut inj = start(&s).await?;
    let tls = client_config(s.ca.ca_path(), Http::Two)?;
    let sidecar_image = |pod: &Value| pod["spec"]["initContainers"][0]["image"].clone();

    let (_, pod) = review(&inj, &tls, fixture("pod-enabled.json")?).await?;
    assert_eq!(sidecar_image(&pod), "ghcr.io/example/troupe:0.1.0");

    // A helm upgrade rewrites the ConfigMap: the next review uses it.
    let mut config: Value = serde_json::from_slice(&fixture("config.json")?)?;
    config["sidecar"]["image"] = json!("ghcr.io/example/troupe:0.3.0-upgraded");
    config["terminationGracePeriodSeconds"] = json!(90);
    std::fs::write(&s.config, serde_json::to_vec_pretty(&config)?)?;
    let (_, pod) = review(&inj, &tls, fixture("pod-enabled.json")?).await?;
    assert_eq!(sidecar_image(&pod), "ghcr.io/example/troupe:0.3.0-upgraded");
    assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 90);

    // A broken one is logged and the last good one kept.
    std::fs::write(&s.config, b"{\"sidecar\": ")?;
    let (_, pod) = review(&inj, &tls, fixture("pod-enabled.json")?).await?;
    assert_eq!(sidecar_image(&pod), "ghcr.io/example/troupe:0.3.0-upgraded");
    poll_until(
        troupe_tests::WAIT,
        "the broken config in the log",
        || async { Ok(inj.log().contains("cannot be used").then_some(())) },
    )
    .await?;

    // A certificate renewed by another CA: new connections present it.
    let other = TestCa::new()?;
    let (cert, key) = other.issue("injector", &webhook_subject())?;
    std::fs::rename(&cert, &s.cert)?;
    std::fs::rename(&key, &s.key)?;
    let renewed = client_config(other.ca_path(), Http::Two)?;
    let (_, pod) = review(&inj, &renewed, fixture("pod-enabled.json")?).await?;
    assert_eq!(sidecar_image(&pod), "ghcr.io/example/troupe:0.3.0-upgraded");
    ensure!(
        review(&inj, &tls, fixture("pod-enabled.json")?)
            .await
            .is_err(),
        "the old certificate is still served"
    );

    let status = inj.terminate().await?;
    ensure!(
        status.success(),
        "exit {status} after SIGTERM:\n{}",
        inj.log()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_settings_stop_the_start_with_what_to_fix() -> anyhow::Result<()> {
    let s = setup()?;
    std::fs::write(&s.config, br#"{"sidecar": {"name": "troupe"}}"#)?;
    let (cert, key, config) = (
        s.cert.display().to_string(),
        s.key.display().to_string(),
        s.config.display().to_string(),
    );
    let (status, _, err) = troupe_tests::run_cli(&[
        "injector",
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--config",
        &config,
    ])
    .await?;
    ensure!(
        !status.success() && err.contains("\"image\""),
        "{status}: {err}"
    );
    let (status, _, err) = troupe_tests::run_cli(&["injector", "--config", &config]).await?;
    ensure!(
        status.code() == Some(2) && err.contains("--tls-cert"),
        "{status}: {err}"
    );
    Ok(())
}
