//! The injector's config file (`--config`, JSON; the chart renders it into
//! a ConfigMap): what the sidecar is and what app containers get. This
//! module owns its types, their checks, and reading the file again when it
//! changes, keeping the last good one when a new one is broken.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{Map, Value};

/// What the injector adds to a pod. Kubernetes objects stay JSON, so fields
/// this version does not know pass through to the pod unchanged.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InjectorConfig {
    /// A complete Container: the daemon, inserted as the first init
    /// container (with `restartPolicy: Always`, a native sidecar).
    pub sidecar: Map<String, Value>,
    /// Volumes added to the pod, skipping names it already has.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub volumes: Vec<Map<String, Value>>,
    /// EnvVars added to every other container; a container's own wins.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub app_env: Vec<Map<String, Value>>,
    /// VolumeMounts added to every other container, skipping paths it
    /// already mounts something at.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub app_volume_mounts: Vec<Map<String, Value>>,
    /// The pod's grace period is raised to this (never lowered).
    #[serde(default)]
    pub termination_grace_period_seconds: Option<u64>,
    /// Labels added to the pod where it does not set them: the chart's
    /// NetworkPolicies select daemons by them, so users need not add them.
    #[serde(default)]
    pub pod_labels: Map<String, Value>,
}

/// A list rendered from an empty YAML value arrives as `null`: no entries.
fn null_as_empty<'de, D>(d: D) -> Result<Vec<Map<String, Value>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Ok(Option::deserialize(d)?.unwrap_or_default())
}

/// Why a config file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the injector config {} (check the path given to --config)", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the injector config {} is not valid: it is JSON with \"sidecar\", \"volumes\", \"appEnv\", \"appVolumeMounts\", \"terminationGracePeriodSeconds\" and \"podLabels\" (docs/cli.md, `troupe injector`)", path.display())]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("the injector config {}: {problem}", path.display())]
    Invalid { path: PathBuf, problem: String },
}

impl InjectorConfig {
    /// The sidecar container's name (checked present by [`Self::check`]).
    pub fn sidecar_name(&self) -> &str {
        self.sidecar
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// What serde cannot say: the objects the pod needs to be valid.
    fn check(&self) -> Result<(), String> {
        let named = |what: &str, m: &Map<String, Value>| match m.get("name").and_then(Value::as_str)
        {
            Some(name) if !name.is_empty() => Ok(()),
            _ => Err(format!(
                "every entry of {what} needs a \"name\"; one has none: {}",
                Value::Object(m.clone())
            )),
        };
        named("\"sidecar\"", &self.sidecar)?;
        if !self.sidecar.get("image").is_some_and(Value::is_string) {
            return Err("\"sidecar\" needs an \"image\" (the troupe daemon's image)".into());
        }
        if let Some((key, _)) = self.pod_labels.iter().find(|(_, v)| !v.is_string()) {
            return Err(format!(
                "\"podLabels\" values are strings; {key:?} is not (quote it in YAML, e.g. \"true\")"
            ));
        }
        for v in &self.volumes {
            named("\"volumes\"", v)?;
        }
        for e in &self.app_env {
            named("\"appEnv\"", e)?;
        }
        for m in &self.app_volume_mounts {
            named("\"appVolumeMounts\"", m)?;
            if !m.get("mountPath").is_some_and(Value::is_string) {
                return Err(format!(
                    "every entry of \"appVolumeMounts\" needs a \"mountPath\"; one has none: {}",
                    Value::Object(m.clone())
                ));
            }
        }
        Ok(())
    }

    /// Parses and checks a config file's contents.
    pub fn from_json(path: &Path, text: &[u8]) -> Result<Self, ConfigError> {
        let config: Self = serde_json::from_slice(text).map_err(|source| ConfigError::Json {
            path: path.to_owned(),
            source,
        })?;
        config.check().map_err(|problem| ConfigError::Invalid {
            path: path.to_owned(),
            problem,
        })?;
        Ok(config)
    }
}

/// Modification time and length: a change in either means read it again.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    // Following symlinks: a ConfigMap's mounted files are symlinks that
    // Kubernetes swaps on an update.
    std::fs::metadata(path)
        .ok()
        .and_then(|m| Some((m.modified().ok()?, m.len())))
}

/// The config file, read again when it changes (checked with one `stat` as
/// each review arrives, so a `helm upgrade` needs no restart).
#[derive(Debug)]
pub struct ConfigSource {
    path: PathBuf,
    current: ArcSwap<(Stamp, Arc<InjectorConfig>)>,
    /// The stamp of a changed file that failed to load, reported once.
    failed: Mutex<Option<Stamp>>,
}

impl ConfigSource {
    /// Reads the file; at start a broken one is an error.
    pub fn load(path: PathBuf) -> Result<Self, ConfigError> {
        let (stamp, config) = read(&path)?;
        Ok(Self {
            path,
            current: ArcSwap::from_pointee((stamp, Arc::new(config))),
            failed: Mutex::new(None),
        })
    }

    /// The config as the file holds it now, or the last good one.
    pub fn current(&self) -> Arc<InjectorConfig> {
        let loaded = self.current.load_full();
        let now = stamp(&self.path);
        if loaded.0 == now {
            return loaded.1.clone();
        }
        let mut failed = self.failed.lock();
        if *failed == Some(now) {
            return loaded.1.clone();
        }
        match read(&self.path) {
            Ok((stamp, config)) => {
                let config = Arc::new(config);
                self.current.store(Arc::new((stamp, config.clone())));
                *failed = None;
                tracing::info!(config = %self.path.display(), "injector config changed; new reviews use it");
                config
            }
            Err(error) => {
                *failed = Some(now);
                // The whole chain: what is wrong with the file is in the source.
                let error = anyhow::Error::from(error);
                tracing::warn!(error = format!("{error:#}"), "the injector config changed but cannot be used; reviews keep the previous one until it is fixed");
                loaded.1.clone()
            }
        }
    }
}

fn read(path: &Path) -> Result<(Stamp, InjectorConfig), ConfigError> {
    // Stamped first: a write while reading is seen next time.
    let before = stamp(path);
    let text = std::fs::read(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    Ok((before, InjectorConfig::from_json(path, &text)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sidecar_without_name_or_image_is_refused() {
        let path = Path::new("sidecar.json");
        let no_image = br#"{"sidecar": {"name": "troupe"}}"#;
        let e = InjectorConfig::from_json(path, no_image).map(|_| ());
        assert!(matches!(e, Err(ConfigError::Invalid { .. })), "{e:?}");
        let empty = br#"{"sidecar": {"name": "troupe", "image": "t"}, "volumes": null}"#;
        assert!(InjectorConfig::from_json(path, empty).is_ok_and(|c| c.volumes.is_empty()));
        let typo = br#"{"sidecar": {"name": "troupe", "image": "t"}, "appenv": []}"#;
        let e = InjectorConfig::from_json(path, typo).map(|_| ());
        // serde names the unknown key in the source, which the binary prints.
        assert!(
            matches!(&e, Err(ConfigError::Json { source, .. }) if source.to_string().contains("appenv")),
            "{e:?}"
        );
    }

    #[test]
    fn a_broken_change_keeps_the_last_good_config() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("sidecar.json");
        std::fs::write(&path, r#"{"sidecar": {"name": "troupe", "image": "a"}}"#)?;
        let source = ConfigSource::load(path.clone())?;
        assert_eq!(source.current().sidecar["image"], "a");
        std::fs::write(
            &path,
            r#"{"sidecar": {"name": "troupe", "image": "b"}, "x": 1}"#,
        )?;
        assert_eq!(source.current().sidecar["image"], "a");
        std::fs::write(&path, r#"{"sidecar": {"name": "troupe", "image": "bb"}}"#)?;
        assert_eq!(source.current().sidecar["image"], "bb");
        Ok(())
    }
}
