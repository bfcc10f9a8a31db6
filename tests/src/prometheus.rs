//! A real Prometheus scraping test processes on loopback, and its HTTP API
//! as a test reads it: for the tests that run the chart's alert rules and
//! dashboard queries against real daemons and replicas.
//!
//! The binary is Debian's (`scripts/prometheus.sh` unpacks it); its path
//! comes from `TROUPE_PROMETHEUS`, which `scripts/test` sets.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{bail, Context};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::Value;
use tokio::process::{Child, Command};

use crate::replicas::free_port;
use crate::scrape::http_get;
use crate::{poll_until, WAIT};

/// The Prometheus binary to run, or `None` (after saying why `test` is
/// skipped) when `TROUPE_PROMETHEUS` names none; with
/// `TROUPE_REQUIRE_PROMETHEUS=1` (as `scripts/test` sets) that is a failure.
pub fn prometheus_bin(test: &str) -> anyhow::Result<Option<PathBuf>> {
    let bin = std::env::var_os("TROUPE_PROMETHEUS").map(PathBuf::from);
    match bin {
        Some(bin) if bin.is_file() => Ok(Some(bin)),
        _ => {
            let how = "TROUPE_PROMETHEUS=$(scripts/prometheus.sh)/prometheus";
            if std::env::var("TROUPE_REQUIRE_PROMETHEUS").is_ok_and(|v| v == "1") {
                bail!("{test} needs Prometheus: set {how}");
            }
            eprintln!("SKIPPED {test}: needs Prometheus; set {how}");
            Ok(None)
        }
    }
}

/// One scrape job of the configuration [`Prometheus::start`] writes.
#[derive(Debug, Clone)]
pub struct Job {
    pub name: String,
    pub targets: Vec<SocketAddr>,
    /// The file holding the bearer token scrapes send, if they send one.
    pub token_file: Option<PathBuf>,
    /// Labels every series of the job gets, as a Kubernetes scrape adds
    /// `namespace`.
    pub labels: Vec<(String, String)>,
}

/// A `prometheus` process with its own storage, killed when dropped.
#[derive(Debug)]
pub struct Prometheus {
    pub addr: SocketAddr,
    /// Held for its kill on drop.
    _child: Child,
    log: tempfile::NamedTempFile,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts `bin` scraping `jobs` and evaluating `rule_files` every
    /// second, and waits until it is ready.
    pub async fn start(bin: &Path, jobs: &[Job], rule_files: &[&Path]) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("prometheus.yml");
        std::fs::write(&config, configuration(jobs, rule_files))?;
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let log = tempfile::Builder::new()
            .prefix("prometheus-")
            .suffix(".log")
            .tempfile()?;
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(log.reopen()?)
            .stderr(log.reopen()?)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot run {}", bin.display()))?;
        let prometheus = Prometheus {
            addr,
            _child: child,
            log,
            _dir: dir,
        };
        poll_until(WAIT, "Prometheus to be ready", || async {
            Ok(http_get(prometheus.addr, "/-/ready")
                .await
                .ok()
                .filter(|r| r.status == 200))
        })
        .await
        .with_context(|| prometheus.log())?;
        Ok(prometheus)
    }

    /// What Prometheus logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// `GET /api/v1/PATH`'s `data`, failing on an error status.
    pub async fn api(&self, path: &str) -> anyhow::Result<Value> {
        let response = http_get(self.addr, &format!("/api/v1/{path}")).await?;
        let body: Value = serde_json::from_str(&response.body)
            .with_context(|| format!("{path}: not JSON: {}", response.body))?;
        if body["status"] != "success" {
            bail!(
                "{path}: {} ({}): {}",
                body["errorType"],
                response.status,
                body["error"]
            );
        }
        Ok(body["data"].clone())
    }

    /// The instant vector `expr` evaluates to now.
    pub async fn query(&self, expr: &str) -> anyhow::Result<Vec<Value>> {
        let encoded = utf8_percent_encode(expr, NON_ALPHANUMERIC);
        let data = self
            .api(&format!("query?query={encoded}"))
            .await
            .with_context(|| format!("the query {expr}"))?;
        match &data["result"] {
            Value::Array(series) => Ok(series.clone()),
            // A scalar or a string: one value.
            other => Ok(vec![other.clone()]),
        }
    }

    /// Every rule of every loaded group (`name`, `query`, `health`, `state`...).
    pub async fn rules(&self) -> anyhow::Result<Vec<Value>> {
        let data = self.api("rules").await?;
        let groups = data["groups"].as_array().cloned().unwrap_or_default();
        Ok(groups
            .iter()
            .filter_map(|g| g["rules"].as_array())
            .flatten()
            .cloned()
            .collect())
    }

    /// The alerts pending or firing now.
    pub async fn alerts(&self) -> anyhow::Result<Vec<Value>> {
        let data = self.api("alerts").await?;
        Ok(data["alerts"].as_array().cloned().unwrap_or_default())
    }

    /// The names of every metric Prometheus has stored.
    pub async fn metric_names(&self) -> anyhow::Result<BTreeSet<String>> {
        let data = self.api("label/__name__/values").await?;
        Ok(data
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect())
    }

    /// Waits until every target of every job was scraped successfully at
    /// least `samples` times (rates need two).
    pub async fn until_scraped(&self, jobs: &[Job], samples: u32) -> anyhow::Result<()> {
        for job in jobs {
            // Each target's count of successful scrapes, the lowest.
            let expr = format!(
                "min(sum_over_time(up{{job=\"{}\"}}[5m])) and count(up{{job=\"{}\"}}) == {}",
                job.name,
                job.name,
                job.targets.len()
            );
            let what = format!("{samples} scrapes of each target of {}", job.name);
            poll_until(WAIT, &what, || async {
                let scraped = single_value(&self.query(&expr).await?);
                Ok((scraped >= Some(f64::from(samples))).then_some(()))
            })
            .await
            .with_context(|| self.log())?;
        }
        Ok(())
    }
}

/// The value of a one-series result, if it has exactly one.
fn single_value(series: &[Value]) -> Option<f64> {
    match series {
        [one] => one["value"][1].as_str()?.parse().ok(),
        _ => None,
    }
}

/// prometheus.yml: a one-second scrape and evaluation interval, so a test
/// waits seconds for what takes a real deployment a minute.
fn configuration(jobs: &[Job], rule_files: &[&Path]) -> String {
    let mut yaml = String::from("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n");
    yaml.push_str("rule_files:\n");
    for file in rule_files {
        yaml.push_str(&format!("  - {:?}\n", file.display().to_string()));
    }
    yaml.push_str("scrape_configs:\n");
    for job in jobs {
        yaml.push_str(&format!("  - job_name: {:?}\n", job.name));
        if let Some(token_file) = &job.token_file {
            yaml.push_str(&format!(
                "    authorization:\n      credentials_file: {:?}\n",
                token_file.display().to_string()
            ));
        }
        let targets: Vec<String> = job
            .targets
            .iter()
            .map(|t| format!("{:?}", t.to_string()))
            .collect();
        yaml.push_str(&format!(
            "    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        ));
        if !job.labels.is_empty() {
            yaml.push_str("        labels:\n");
        }
        for (name, value) in &job.labels {
            yaml.push_str(&format!("          {name}: {value:?}\n"));
        }
    }
    yaml
}
