//! The mutation itself, with no I/O: a pod (as JSON), the config and the
//! pod's annotations in, the JSON Patch (RFC 6902) that injects the sidecar
//! out. The patch is the difference between the pod and the injected pod,
//! computed by `json-patch`, so it applies to exactly the pod received.

use json_patch::Patch;
use serde_json::{json, Map, Value};

use super::annotations::{self, AnnotationError, Overrides};
use super::config::InjectorConfig;
use super::pod;

/// Kubernetes' grace period when a pod sets none.
const DEFAULT_GRACE_SECONDS: u64 = 30;
/// Time beyond the daemon's drain for the app to stop after it.
const GRACE_BEYOND_DRAIN: u64 = 15;
/// The metrics port when the pod names none.
const DEFAULT_METRICS_PORT: u16 = 9090;
const METRICS_ENV: &str = "TROUPE_METRICS_LISTEN";
/// The sidecar's metrics port name: prefixed, as an app container of the same
/// pod may well name its own port `metrics`.
const METRICS_PORT_NAME: &str = "troupe-metrics";

/// What the injector does with a pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// `troupe.dev/enabled` is not `"true"`: left alone.
    NotEnabled,
    /// A container named like the sidecar is there already (a
    /// reinvocation, or the chart's named template used by hand).
    AlreadyInjected,
    /// The patch that injects the sidecar.
    Patched(Patch),
}

/// Decides what to do with `pod` and builds the patch.
pub fn mutate(pod: &Value, config: &InjectorConfig) -> Result<Outcome, AnnotationError> {
    let annotations = annotations::of_pod(pod);
    if !annotations::enabled(&annotations) {
        return Ok(Outcome::NotEnabled);
    }
    let overrides = annotations::parse(&annotations)?;
    let name = config.sidecar_name();
    let spec = pod.get("spec");
    let named = |key: &str| {
        spec.and_then(|s| s.get(key))
            .and_then(Value::as_array)
            .is_some_and(|items| pod::has_named(items, name))
    };
    if named("initContainers") || named("containers") {
        return Ok(Outcome::AlreadyInjected);
    }
    let sidecar = sidecar(config, &overrides)?;
    let mut injected = pod.clone();
    let Some(root) = injected.as_object_mut() else {
        // Review checks made sure it is an object; nothing to patch otherwise.
        return Ok(Outcome::NotEnabled);
    };
    let spec = pod::object(root, "spec");
    for key in ["containers", "initContainers"] {
        for container in pod::list(spec, key).iter_mut() {
            if let Some(c) = container.as_object_mut() {
                pod::add_missing_env(c, &config.app_env);
                pod::add_missing_mounts(c, &config.app_volume_mounts);
            }
        }
    }
    pod::list(spec, "initContainers").insert(0, Value::Object(sidecar));
    if !config.volumes.is_empty() {
        let volumes = pod::list(spec, "volumes");
        for volume in &config.volumes {
            let name = volume
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if !pod::has_named(volumes, name) {
                volumes.push(Value::Object(volume.clone()));
            }
        }
    }
    raise_grace(spec, config, &overrides);
    if !config.pod_labels.is_empty() {
        let labels = pod::object(pod::object(root, "metadata"), "labels");
        for (key, value) in &config.pod_labels {
            labels.entry(key.as_str()).or_insert_with(|| value.clone());
        }
    }
    Ok(Outcome::Patched(json_patch::diff(pod, &injected)))
}

/// The configured sidecar with the pod's overrides applied.
fn sidecar(config: &InjectorConfig, o: &Overrides) -> Result<Map<String, Value>, AnnotationError> {
    let mut c = config.sidecar.clone();
    // A native sidecar: started before the app, stopped after it.
    c.insert("restartPolicy".into(), json!("Always"));
    if let Some(image) = &o.image {
        c.insert("image".into(), json!(image));
    }
    if let Some(level) = &o.log_level {
        pod::set_env(&mut c, pod::env_value("RUST_LOG", level));
    }
    if let Some(format) = &o.log_format {
        pod::set_env(&mut c, pod::env_value("TROUPE_LOG_FORMAT", format));
    }
    if !o.resources.is_empty() {
        let resources = pod::object(&mut c, "resources");
        for (kind, resource, quantity) in &o.resources {
            pod::object(resources, kind).insert((*resource).to_owned(), json!(quantity));
        }
    }
    if let Some((secret, key)) = &o.store_secret {
        pod::set_env(
            &mut c,
            json!({
                "name": "TROUPE_STORE",
                "valueFrom": { "secretKeyRef": { "name": secret, "key": key } },
            }),
        );
    }
    if let Some(seconds) = o.drain_seconds {
        pod::set_env(
            &mut c,
            pod::env_value("TROUPE_SHUTDOWN_GRACE", &format!("{seconds}s")),
        );
    }
    metrics(&mut c, o)?;
    Ok(c)
}

/// `troupe.dev/metrics` and `metrics-port`: the env var and the named port.
fn metrics(c: &mut Map<String, Value>, o: &Overrides) -> Result<(), AnnotationError> {
    let configured_on = pod::env_of(c, METRICS_ENV).is_some();
    match (o.metrics, o.metrics_port) {
        (Some(false), port) => {
            if let Some(port) = port {
                return Err(AnnotationError::PortWithoutMetrics {
                    value: port.to_string(),
                });
            }
            pod::remove_env(c, METRICS_ENV);
            pod::remove_port(c, METRICS_PORT_NAME);
        }
        (Some(true), port) => set_metrics(c, port.unwrap_or(DEFAULT_METRICS_PORT)),
        // A new port for metrics the config already turns on.
        (None, Some(port)) if configured_on => set_metrics(c, port),
        (None, Some(port)) => {
            return Err(AnnotationError::PortWithoutMetrics {
                value: port.to_string(),
            })
        }
        (None, None) => {}
    }
    Ok(())
}

fn set_metrics(c: &mut Map<String, Value>, port: u16) {
    pod::set_env(c, pod::env_value(METRICS_ENV, &format!("0.0.0.0:{port}")));
    pod::set_port(c, METRICS_PORT_NAME, port);
}

/// Raises the pod's grace period to cover the daemon's drain; never
/// lowers one the pod set higher.
fn raise_grace(spec: &mut Map<String, Value>, config: &InjectorConfig, o: &Overrides) {
    let wanted = [
        config.termination_grace_period_seconds,
        o.drain_seconds.map(|d| d + GRACE_BEYOND_DRAIN),
    ]
    .into_iter()
    .flatten()
    .max();
    let Some(wanted) = wanted else { return };
    let current = spec
        .get("terminationGracePeriodSeconds")
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_GRACE_SECONDS);
    if wanted > current || !spec.contains_key("terminationGracePeriodSeconds") {
        spec.insert(
            "terminationGracePeriodSeconds".into(),
            json!(wanted.max(current)),
        );
    }
}
