//! The pod annotations the injector reads (`troupe.dev/...`): parsing and
//! validating them into [`Overrides`], and the errors a bad one gives, each
//! naming the annotation, its value and what to write instead.

use std::collections::BTreeMap;

use serde_json::Value;

use super::values::{boolean, cpu, log_level, memory, secret_key, secret_name};

/// Every annotation the injector reads starts with this.
pub const PREFIX: &str = "troupe.dev/";
/// `"true"` asks for the sidecar.
pub const ENABLED: &str = "troupe.dev/enabled";

const LOG_LEVEL: &str = "troupe.dev/log-level";
const LOG_FORMAT: &str = "troupe.dev/log-format";
const CPU_REQUEST: &str = "troupe.dev/cpu-request";
const CPU_LIMIT: &str = "troupe.dev/cpu-limit";
const MEMORY_REQUEST: &str = "troupe.dev/memory-request";
const MEMORY_LIMIT: &str = "troupe.dev/memory-limit";
pub(super) const STORE_SECRET: &str = "troupe.dev/state-store-secret";
pub(super) const STORE_SECRET_KEY: &str = "troupe.dev/state-store-secret-key";
const METRICS: &str = "troupe.dev/metrics";
const METRICS_PORT: &str = "troupe.dev/metrics-port";
const DRAIN_SECONDS: &str = "troupe.dev/drain-seconds";
const IMAGE: &str = "troupe.dev/image";

/// Every annotation read, for the message about an unknown one.
const KNOWN: &[&str] = &[
    ENABLED,
    LOG_LEVEL,
    LOG_FORMAT,
    CPU_REQUEST,
    CPU_LIMIT,
    MEMORY_REQUEST,
    MEMORY_LIMIT,
    STORE_SECRET,
    STORE_SECRET_KEY,
    METRICS,
    METRICS_PORT,
    DRAIN_SECONDS,
    IMAGE,
];

/// The longest drain the injector accepts: an hour is already far past
/// what a rolling update should wait for one pod.
const MAX_DRAIN_SECONDS: u64 = 3600;

/// What a pod's annotations change in its sidecar.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Overrides {
    /// `RUST_LOG`.
    pub log_level: Option<String>,
    /// `TROUPE_LOG_FORMAT`: `text` or `json`.
    pub log_format: Option<String>,
    /// `(requests|limits, cpu|memory, quantity)`.
    pub resources: Vec<(&'static str, &'static str, String)>,
    /// `TROUPE_STORE` from this Secret and key.
    pub store_secret: Option<(String, String)>,
    pub metrics: Option<bool>,
    pub metrics_port: Option<u16>,
    pub drain_seconds: Option<u64>,
    pub image: Option<String>,
}

/// A `troupe.dev/` annotation the injector cannot use. The pod is refused
/// (admission answers `allowed: false`, code 400) with this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnnotationError {
    #[error("annotation {annotation}: {value:?} is not a Kubernetes quantity; write {example}")]
    NotAQuantity {
        annotation: &'static str,
        value: String,
        example: &'static str,
    },
    #[error(
        "annotation {annotation}: {value:?} is neither \"true\" nor \"false\"; write one of them"
    )]
    NotABool {
        annotation: &'static str,
        value: String,
    },
    #[error("annotation {METRICS_PORT}: {value:?} is not a port; write a number from 1 to 65535, e.g. \"9090\"")]
    NotAPort { value: String },
    #[error(
        "annotation {DRAIN_SECONDS}: {value:?} is not a number of seconds from 0 to \
         {MAX_DRAIN_SECONDS}; write a whole number, e.g. \"30\""
    )]
    NotSeconds { value: String },
    #[error("annotation {LOG_LEVEL}: {value:?} is not a log filter ({reason}); write e.g. \"info\", \"debug\" or \"info,troupe_runtime=debug\"")]
    BadLogLevel { value: String, reason: String },
    #[error("annotation {LOG_FORMAT}: {value:?} is not a log format; write \"text\" or \"json\"")]
    BadLogFormat { value: String },
    #[error("annotation {annotation}: {value:?} is not a valid Secret {what}; write {rule}")]
    BadSecretName {
        annotation: &'static str,
        value: String,
        what: &'static str,
        rule: &'static str,
    },
    #[error(
        "annotation {STORE_SECRET_KEY}: {value:?} is set without {STORE_SECRET}; add \
         {STORE_SECRET} with the Secret's name, or remove the key"
    )]
    KeyWithoutSecret { value: String },
    #[error("annotation {IMAGE}: {value:?} is not an image reference; write e.g. \"ghcr.io/example/troupe:0.2.0\"")]
    BadImage { value: String },
    #[error(
        "annotation {METRICS_PORT}: {value:?} is set but metrics are off for this pod; add \
         {METRICS}: \"true\", or remove {METRICS_PORT}"
    )]
    PortWithoutMetrics { value: String },
    #[error(
        "annotation {annotation}: {value:?} is not one the troupe injector reads (a typo?); it \
         reads {}", KNOWN.join(", ")
    )]
    Unknown { annotation: String, value: String },
}

/// Whether the pod asks for the sidecar (`troupe.dev/enabled: "true"`).
pub fn enabled(annotations: &BTreeMap<String, String>) -> bool {
    annotations.get(ENABLED).map(String::as_str) == Some("true")
}

/// The pod's annotations (`metadata.annotations`); none when absent.
pub fn of_pod(pod: &Value) -> BTreeMap<String, String> {
    pod.pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .map(|map| {
            map.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// Reads the `troupe.dev/` annotations; the first bad one is the error.
pub fn parse(annotations: &BTreeMap<String, String>) -> Result<Overrides, AnnotationError> {
    let mut o = Overrides::default();
    let mut store_key = None;
    for (name, value) in annotations.iter().filter(|(k, _)| k.starts_with(PREFIX)) {
        let v = value.trim();
        match name.as_str() {
            ENABLED => {}
            LOG_LEVEL => o.log_level = Some(log_level(v)?),
            LOG_FORMAT => match v {
                "text" | "json" => o.log_format = Some(v.to_owned()),
                _ => return Err(AnnotationError::BadLogFormat { value: v.into() }),
            },
            CPU_REQUEST => o.resources.push(("requests", "cpu", cpu(CPU_REQUEST, v)?)),
            CPU_LIMIT => o.resources.push(("limits", "cpu", cpu(CPU_LIMIT, v)?)),
            MEMORY_REQUEST => o
                .resources
                .push(("requests", "memory", memory(MEMORY_REQUEST, v)?)),
            MEMORY_LIMIT => o
                .resources
                .push(("limits", "memory", memory(MEMORY_LIMIT, v)?)),
            STORE_SECRET => o.store_secret = Some((secret_name(v)?, "url".to_owned())),
            STORE_SECRET_KEY => store_key = Some(secret_key(v)?),
            METRICS => o.metrics = Some(boolean(METRICS, v)?),
            METRICS_PORT => match v.parse::<u16>() {
                Ok(port) if port > 0 => o.metrics_port = Some(port),
                _ => return Err(AnnotationError::NotAPort { value: v.into() }),
            },
            DRAIN_SECONDS => match v.parse::<u64>() {
                Ok(n) if n <= MAX_DRAIN_SECONDS => o.drain_seconds = Some(n),
                _ => return Err(AnnotationError::NotSeconds { value: v.into() }),
            },
            IMAGE => {
                if v.is_empty() || v.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    return Err(AnnotationError::BadImage { value: v.into() });
                }
                o.image = Some(v.to_owned());
            }
            _ => {
                return Err(AnnotationError::Unknown {
                    annotation: name.clone(),
                    value: value.clone(),
                })
            }
        }
    }
    // Annotations come sorted, so the key is applied once both are read.
    match (&mut o.store_secret, store_key) {
        (Some((_, key)), Some(k)) => *key = k,
        (None, Some(k)) => return Err(AnnotationError::KeyWithoutSecret { value: k }),
        _ => {}
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(pairs: &[(&str, &str)]) -> Result<Overrides, AnnotationError> {
        parse(
            &pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    #[test]
    fn every_override_parses() -> Result<(), AnnotationError> {
        let o = parsed(&[
            (ENABLED, "true"),
            (LOG_LEVEL, "info,troupe_runtime=debug"),
            (LOG_FORMAT, "json"),
            (CPU_REQUEST, "100m"),
            (MEMORY_LIMIT, "256Mi"),
            (STORE_SECRET, "orders-db"),
            (STORE_SECRET_KEY, "postgres-url"),
            (METRICS, "true"),
            (METRICS_PORT, "9191"),
            (DRAIN_SECONDS, "60"),
            (IMAGE, "example/troupe:dev"),
            ("other.io/unrelated", "anything"),
        ])?;
        assert_eq!(
            o.store_secret,
            Some(("orders-db".into(), "postgres-url".into()))
        );
        assert_eq!(o.metrics_port, Some(9191));
        assert_eq!(o.drain_seconds, Some(60));
        assert_eq!(o.resources.len(), 2);
        Ok(())
    }

    #[test]
    fn bad_values_name_the_annotation_the_value_and_the_fix() {
        let cases: &[(&str, &str, &str)] = &[
            (CPU_LIMIT, "lots", "250m"),
            (MEMORY_REQUEST, "1GB", "128Mi"),
            (METRICS, "yes", "\"true\" nor \"false\""),
            (METRICS_PORT, "70000", "1 to 65535"),
            (DRAIN_SECONDS, "-5", "whole number"),
            (LOG_FORMAT, "xml", "\"json\""),
            (LOG_LEVEL, "debug=[", "info"),
            (STORE_SECRET, "Orders_DB", "lowercase"),
            (IMAGE, "a b", "ghcr.io"),
            ("troupe.dev/log-levle", "debug", "log-level"),
        ];
        for (annotation, value, fix) in cases {
            let message = match parsed(&[(annotation, value)]) {
                Err(e) => e.to_string(),
                Ok(o) => panic!("{annotation}={value} accepted: {o:?}"),
            };
            for part in [*annotation, *value, *fix] {
                assert!(message.contains(part), "{message:?} lacks {part:?}");
            }
        }
        let key_alone = parsed(&[(STORE_SECRET_KEY, "url")]);
        assert!(matches!(
            key_alone,
            Err(AnnotationError::KeyWithoutSecret { .. })
        ));
    }
}
