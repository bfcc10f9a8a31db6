//! The mutation against real `AdmissionReview`s
//! (`tests/fixtures/admission/`, shared with the end-to-end test): each
//! answer's patch is applied to the pod it came with and the result checked.

use std::path::Path;

use base64::Engine as _;
use serde_json::{json, Value};

use super::config::InjectorConfig;
use super::review::{answer, Decision, MalformedReview};

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/admission"
);

fn fixture(name: &str) -> anyhow::Result<Vec<u8>> {
    Ok(std::fs::read(Path::new(FIXTURES).join(name))?)
}

fn config() -> anyhow::Result<InjectorConfig> {
    Ok(InjectorConfig::from_json(
        Path::new("config.json"),
        &fixture("config.json")?,
    )?)
}

/// The response of a review fixture, and the pod after its patch.
fn review(name: &str, config: &InjectorConfig) -> anyhow::Result<(Value, Decision, Value)> {
    let body = fixture(name)?;
    let super::review::Answer {
        review: answer,
        decision,
        ..
    } = answer(&body, config)?;
    let request: Value = serde_json::from_slice(&body)?;
    let response = answer["response"].clone();
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["kind"], "AdmissionReview");
    assert_eq!(response["uid"], request["request"]["uid"], "{name}");
    let mut pod = request["request"]["object"].clone();
    if let Some(patch) = response["patch"].as_str() {
        assert_eq!(response["patchType"], "JSONPatch");
        let bytes = base64::engine::general_purpose::STANDARD.decode(patch)?;
        let patch: json_patch::Patch = serde_json::from_slice(&bytes)?;
        json_patch::patch(&mut pod, &patch)?;
    }
    Ok((response, decision, pod))
}

fn env<'a>(container: &'a Value, name: &str) -> Option<&'a Value> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
}

#[test]
fn an_annotated_pod_gets_the_sidecar_first_and_the_app_its_environment() -> anyhow::Result<()> {
    let (response, decision, pod) = review("pod-enabled.json", &config()?)?;
    assert_eq!(response["allowed"], true);
    assert_eq!(decision, Decision::Injected);
    let spec = &pod["spec"];
    let sidecar = &spec["initContainers"][0];
    assert_eq!(sidecar["name"], "troupe");
    assert_eq!(sidecar["restartPolicy"], "Always");
    assert_eq!(sidecar["image"], "ghcr.io/example/troupe:0.1.0");
    assert_eq!(spec["initContainers"][1]["name"], "migrate");
    // Every other container gets the app env, without overriding its own.
    let app = &spec["containers"][0];
    assert_eq!(
        env(app, "TROUPE_ADDR"),
        Some(&json!({"name": "TROUPE_ADDR", "value": "127.0.0.1:9999"}))
    );
    assert_eq!(
        env(app, "LOG_LEVEL").map(|e| &e["value"]),
        Some(&json!("info"))
    );
    for c in [&spec["containers"][1], &spec["initContainers"][1]] {
        assert_eq!(
            env(c, "TROUPE_ADDR").map(|e| &e["value"]),
            Some(&json!("127.0.0.1:7420"))
        );
        assert!(env(c, "TROUPE_APP_TOKEN").is_some(), "{c}");
        assert_eq!(c["volumeMounts"][0]["mountPath"], "/var/run/troupe/ca");
    }
    assert_eq!(app["volumeMounts"].as_array().map(Vec::len), Some(2));
    assert!(
        env(sidecar, "TROUPE_ADDR").is_none(),
        "the sidecar got the app env"
    );
    // Volumes: the tokens added, the pod's own troupe-ca kept.
    let volumes = spec["volumes"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = volumes.iter().filter_map(|v| v["name"].as_str()).collect();
    assert_eq!(
        names,
        ["kube-api-access-abcde", "troupe-ca", "troupe-tokens"]
    );
    assert_eq!(volumes[1], json!({"name": "troupe-ca", "emptyDir": {}}));
    assert_eq!(spec["terminationGracePeriodSeconds"], 45);
    // The member label added, the pod's own labels kept.
    assert_eq!(pod["metadata"]["labels"]["troupe.dev/member"], "true");
    // Fields the injector knows nothing of survive.
    assert_eq!(spec["x-unknown-future-field"], json!({"kept": true}));
    Ok(())
}

#[test]
fn every_override_changes_the_sidecar() -> anyhow::Result<()> {
    let (response, _, pod) = review("pod-overrides.json", &config()?)?;
    assert_eq!(response["allowed"], true, "{response}");
    let sidecar = &pod["spec"]["initContainers"][0];
    assert_eq!(sidecar["image"], "ghcr.io/example/troupe:0.2.0-rc1");
    let value = |name: &str| env(sidecar, name).map(|e| e["value"].clone());
    assert_eq!(value("RUST_LOG"), Some(json!("info,troupe_runtime=debug")));
    assert_eq!(value("TROUPE_LOG_FORMAT"), Some(json!("json")));
    assert_eq!(value("TROUPE_METRICS_LISTEN"), Some(json!("0.0.0.0:9464")));
    assert_eq!(value("TROUPE_SHUTDOWN_GRACE"), Some(json!("60s")));
    let store = env(sidecar, "TROUPE_STORE").map(|e| e["valueFrom"].clone());
    assert_eq!(
        store,
        Some(json!({"secretKeyRef": {"name": "orders-db", "key": "postgres-url"}}))
    );
    let stores = sidecar["env"]
        .as_array()
        .map(|e| e.iter().filter(|v| v["name"] == "TROUPE_STORE").count());
    assert_eq!(
        stores,
        Some(1),
        "the configured TROUPE_STORE is replaced, not doubled"
    );
    assert_eq!(
        sidecar["resources"],
        json!({"requests": {"cpu": "250m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}})
    );
    let metrics = sidecar["ports"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == "troupe-metrics"));
    assert_eq!(
        metrics.map(|p| p["containerPort"].clone()),
        Some(json!(9464))
    );
    // 60 s of drain and 15 for the app: more than the configured 45.
    assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 75);
    Ok(())
}

#[test]
fn pods_without_the_annotation_or_with_the_sidecar_are_left_alone() -> anyhow::Result<()> {
    let config = config()?;
    for (name, expected) in [
        ("pod-not-enabled.json", Decision::NotEnabled),
        ("pod-already-injected.json", Decision::AlreadyInjected),
    ] {
        let (response, decision, _) = review(name, &config)?;
        assert_eq!(decision, expected, "{name}");
        assert_eq!(response["allowed"], true, "{name}");
        assert!(response.get("patch").is_none(), "{name}: {response}");
    }
    Ok(())
}

#[test]
fn a_bad_annotation_refuses_the_pod_with_what_to_write() -> anyhow::Result<()> {
    let (response, decision, _) = review("pod-bad-annotation.json", &config()?)?;
    assert_eq!(decision, Decision::Refused);
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 400);
    let message = response["status"]["message"].as_str().unwrap_or_default();
    for part in ["troupe.dev/memory-limit", "512MB", "128Mi"] {
        assert!(message.contains(part), "{message:?} lacks {part:?}");
    }
    Ok(())
}

#[test]
fn malformed_reviews_are_errors() -> anyhow::Result<()> {
    let config = config()?;
    type Check = fn(&MalformedReview) -> bool;
    let cases: [(&str, Check); 4] = [
        ("malformed-not-json.json", |e| {
            matches!(e, MalformedReview::NotJson(_))
        }),
        ("malformed-no-request.json", |e| {
            matches!(e, MalformedReview::NoRequest)
        }),
        ("malformed-no-uid.json", |e| {
            matches!(e, MalformedReview::NoUid)
        }),
        ("malformed-not-a-pod.json", |e| {
            matches!(e, MalformedReview::NotAPod(_))
        }),
    ];
    for (name, expected) in cases {
        match answer(&fixture(name)?, &config) {
            Err(e) => assert!(expected(&e), "{name}: {e}"),
            Ok(a) => panic!("{name} answered {a:?}"),
        }
    }
    Ok(())
}

#[test]
fn a_larger_grace_is_kept_and_updates_pass() -> anyhow::Result<()> {
    let mut review: Value = serde_json::from_slice(&fixture("pod-enabled.json")?)?;
    review["request"]["object"]["spec"]["terminationGracePeriodSeconds"] = json!(120);
    let answer_ = answer(review.to_string().as_bytes(), &config()?)?.review;
    let patch = answer_["response"]["patch"].as_str().unwrap_or_default();
    let patch = String::from_utf8(base64::engine::general_purpose::STANDARD.decode(patch)?)?;
    assert!(!patch.contains("terminationGracePeriodSeconds"), "{patch}");
    review["request"]["operation"] = json!("UPDATE");
    let answered = answer(review.to_string().as_bytes(), &config()?)?;
    assert_eq!(answered.decision, Decision::NotCreate);
    assert_eq!(answered.pod, "shop/orders-7d9f8c6b5-");
    assert!(answered.review["response"].get("patch").is_none());
    Ok(())
}
