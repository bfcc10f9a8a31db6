//! The chart's alert rules (`deploy/helm/troupe/files/alerts.yaml`) and its
//! Grafana dashboard (`files/dashboards/troupe.json`) run by a real
//! Prometheus scraping a real cluster: one placement replica and two daemons
//! that forward calls to each other, healthy, then in trouble. Parsing the PromQL (the chart checks do)
//! cannot tell a rule that never matches the series the processes export, a
//! division whose two sides carry different labels (an evaluation error), or
//! a panel that shows nothing; these tests can.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde_json::Value;
use troupe_tests::cluster_harness::{placement_arg, routing_by, settled_with, signal, Member};
use troupe_tests::prometheus::{prometheus_bin, Job, Prometheus};
use troupe_tests::replicas::PlacementCluster;
use troupe_tests::scrape::{http_get, metrics_addr};
use troupe_tests::{actor, pb, poll_until, type_spec, WAIT};

/// The namespace label the scrape adds, as a Kubernetes scrape would.
const NAMESPACE: &str = "troupe-test";

fn chart_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/helm/troupe/files")
        .join(path)
}

/// The processes, and the Prometheus watching them.
struct Watched {
    placement: PlacementCluster,
    members: Vec<Member>,
    /// The replica's metrics endpoint.
    replica_metrics: SocketAddr,
    prometheus: Prometheus,
    _dir: tempfile::TempDir,
}

impl Watched {
    /// Starts the cluster, makes calls that run on both daemons (half of
    /// them forwarded), and Prometheus with `rule_files`; returns once every
    /// target was scraped a few times. `None`: no Prometheus here.
    async fn start(test: &str, rule_files: &[&Path]) -> anyhow::Result<Option<Watched>> {
        let Some(bin) = prometheus_bin(test)? else {
            return Ok(None);
        };
        let dir = tempfile::tempdir()?;
        // The replica's metrics take a token, as the chart's do; the
        // daemons on loopback without tokens serve theirs to anyone local.
        let token_file = dir.path().join("scrape-token");
        std::fs::write(&token_file, "scrape-token\n")?;
        let token = token_file.display().to_string();
        let placement = PlacementCluster::start(
            1,
            &[
                "--lease",
                "3s",
                "--heartbeat",
                "200ms",
                "--metrics-listen",
                "127.0.0.1:0",
                "--read-token-file",
                &token,
            ],
        )
        .await?;
        let replica = placement.replicas.values().next().context("no replica")?;
        let replica_metrics = metrics_addr(&replica.log()).context("no replica metrics")?;

        let mut members = Vec::new();
        let mut daemons = Vec::new();
        for node in ["node-a", "node-b"] {
            let member = Member::start(
                node,
                &placement_arg(&placement),
                "memory",
                vec![type_spec("counter")],
                &["--metrics-listen", "127.0.0.1:0"],
                None,
            )
            .await?;
            daemons.push(metrics_addr(&member.daemon.log()).context("no daemon metrics")?);
            members.push(member);
        }
        let jobs = [
            Job {
                name: "troupe".into(),
                targets: daemons,
                token_file: None,
                labels: vec![("namespace".into(), NAMESPACE.into())],
            },
            Job {
                name: "troupe-placement".into(),
                targets: vec![replica_metrics],
                token_file: Some(token_file),
                labels: vec![("namespace".into(), NAMESPACE.into())],
            },
        ];
        let version = settled_with(&placement, &["node-a", "node-b"], "counter").await?;
        routing_by(&members, version).await?;
        let client = &mut members.first_mut().context("no member")?.client;
        for i in 0..20 {
            client.incr("counter", &format!("c{i}"), 1).await?;
        }

        let prometheus = Prometheus::start(&bin, &jobs, rule_files).await?;
        prometheus.until_scraped(&jobs, 3).await?;
        Ok(Some(Watched {
            placement,
            members,
            replica_metrics,
            prometheus,
            _dir: dir,
        }))
    }
}

/// The alerts pending or firing named `name`, as (labels, annotations),
/// of the target at `instance` when given.
async fn active(
    prometheus: &Prometheus,
    name: &str,
    instance: Option<&str>,
) -> anyhow::Result<Vec<(Value, Value)>> {
    Ok(prometheus
        .alerts()
        .await?
        .into_iter()
        .filter(|a| a["labels"]["alertname"] == name)
        .filter(|a| instance.is_none_or(|i| a["labels"]["instance"] == i))
        .map(|a| (a["labels"].clone(), a["annotations"].clone()))
        .collect())
}

/// Waits until [`active`] names at least one such alert; returns them.
async fn raised(
    prometheus: &Prometheus,
    name: &str,
    instance: Option<&str>,
) -> anyhow::Result<Vec<(Value, Value)>> {
    poll_until(WAIT, name, || async {
        let found = active(prometheus, name, instance).await?;
        Ok((!found.is_empty()).then_some(found))
    })
    .await
    .context(prometheus.log())
}

#[tokio::test]
async fn a_healthy_cluster_raises_no_alert_and_each_trouble_raises_its_own() -> anyhow::Result<()> {
    let alerts_file = chart_file("alerts.yaml");
    let test = "a_healthy_cluster_raises_no_alert_and_each_trouble_raises_its_own";
    let Some(mut watched) = Watched::start(test, &[&alerts_file]).await? else {
        return Ok(());
    };
    let prometheus = &watched.prometheus;

    // Every rule of the file is loaded and evaluates without an error (a
    // division of series with different labels fails here, not in a parser).
    let rules = poll_until(WAIT, "every rule evaluated", || async {
        let rules = prometheus.rules().await?;
        Ok(rules
            .iter()
            .all(|r| r["health"] != "unknown")
            .then_some(rules))
    })
    .await?;
    let in_file = std::fs::read_to_string(&alerts_file)?
        .lines()
        .filter(|l| l.trim_start().starts_with("- alert:"))
        .count();
    assert_eq!(rules.len(), in_file, "{rules:#?}");
    for rule in &rules {
        assert_eq!(rule["health"], "ok", "{} failed: {rule:#}", rule["name"]);
    }

    // Healthy: no rule's expression matches anything, so no alert even
    // begins to be pending. Evaluated here rather than read from the alerts
    // so that the answer does not wait for the next evaluation.
    for rule in &rules {
        let expr = rule["query"].as_str().context("a rule without a query")?;
        let matched = prometheus.query(expr).await?;
        assert!(
            matched.is_empty(),
            "{} matches a healthy cluster: {matched:#?}",
            rule["name"]
        );
    }

    // One scrape without the token: the replica showed its refusals at 0
    // from the start, so rate() sees this one (a counter born at 1 would
    // have hidden it for good).
    let refused = http_get(watched.replica_metrics, "/metrics").await?;
    assert_eq!(refused.status, 401);
    let guessed = raised(prometheus, "TroupeCredentialsRefused", None).await?;
    let [(labels, annotations)] = guessed.as_slice() else {
        bail!("one alert for one refused caller, not {guessed:#?}");
    };
    assert_eq!(labels["job"], "troupe-placement", "{labels:#}");
    assert_eq!(labels["service"], "metrics", "{labels:#}");
    assert_eq!(labels["reason"], "no_token", "{labels:#}");
    let summary = annotations["summary"].as_str().unwrap_or_default();
    let instance = watched.replica_metrics.to_string();
    assert!(
        summary.contains(&instance) && summary.contains("metrics"),
        "{summary}"
    );

    // A backup asked of a daemon whose store cannot make one fails.
    let daemon = &watched.members.first().context("no member")?.daemon;
    let asked = async {
        let mut chunks = daemon
            .admin()
            .await?
            .backup(pb::BackupRequest {})
            .await?
            .into_inner();
        while chunks.message().await?.is_some() {}
        anyhow::Ok(())
    };
    assert!(asked.await.is_err(), "the memory store made a backup");
    let instance = metrics_addr(&daemon.log())
        .context("no daemon metrics")?
        .to_string();
    let failed = raised(prometheus, "TroupeBackupFailed", None).await?;
    let [(labels, _)] = failed.as_slice() else {
        bail!("one alert for the one failed backup, not {failed:#?}");
    };
    assert_eq!(labels["instance"], instance, "{labels:#}");

    // A reminder paused: the alert for a pause left for days begins to
    // pend at once (it fires after three days of it), once for both daemons.
    let mut client = watched.members.first().context("no member")?.client.clone();
    let bill = || pb::ReminderRef {
        actor: Some(actor("counter", "c1")),
        name: "bill".into(),
    };
    client
        .0
        .set_reminder(pb::SetReminderRequest {
            actor: Some(actor("counter", "c1")),
            name: "bill".into(),
            due: "1h".into(),
            ..Default::default()
        })
        .await?;
    client.0.pause_reminder(bill()).await?;
    let paused = raised(prometheus, "TroupeRemindersPausedLong", None).await?;
    let [(labels, _)] = paused.as_slice() else {
        bail!("one alert for the deployment's paused reminder, not {paused:#?}");
    };
    assert_eq!(labels["job"], "troupe", "{labels:#}");
    client.0.delete_reminder(bill()).await?;

    // Placement stops answering: both daemons' leases lapse, and each is
    // named as not serving; the replica, frozen, fails its scrapes.
    let replica = watched.replica_metrics.to_string();
    let pid = watched
        .placement
        .replicas
        .values()
        .next()
        .context("no replica")?
        .pid()?;
    signal(pid, "STOP").await?;
    let outcome = poll_until(
        2 * WAIT,
        "TroupeNotServing and TroupeProcessDown",
        || async {
            let not_serving = active(prometheus, "TroupeNotServing", None).await?;
            let down = active(prometheus, "TroupeProcessDown", Some(&replica)).await?;
            Ok(
                (not_serving.len() == watched.members.len() && down.len() == 1)
                    .then_some((not_serving, down)),
            )
        },
    )
    .await;
    signal(pid, "CONT").await?;
    let (not_serving, down) = outcome.context(prometheus.log())?;
    for (labels, annotations) in &not_serving {
        assert_eq!(labels["severity"], "critical", "{labels:#}");
        let instance = labels["instance"].as_str().unwrap_or_default();
        let summary = annotations["summary"].as_str().unwrap_or_default();
        assert!(summary.contains(instance), "{summary}");
    }
    assert_eq!(down[0].0["job"], "troupe-placement", "{down:#?}");

    // A daemon dies: its target stays and fails every scrape.
    let member = watched.members.last_mut().context("no member")?;
    let gone = metrics_addr(&member.daemon.log()).context("no daemon metrics")?;
    member.daemon.kill9().await?;
    let gone = gone.to_string();
    let down = raised(prometheus, "TroupeProcessDown", Some(&gone)).await?;
    let [(labels, annotations)] = down.as_slice() else {
        bail!("one alert for the one daemon down, not {down:#?}");
    };
    assert_eq!(labels["job"], "troupe", "{labels:#}");
    let summary = annotations["summary"].as_str().unwrap_or_default();
    assert!(summary.contains(&gone), "{summary}");
    Ok(())
}

/// The dashboard's panels, rows' nested panels included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut found = Vec::new();
    let mut stack: Vec<&Value> = dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    while let Some(panel) = stack.pop() {
        stack.extend(panel["panels"].as_array().into_iter().flatten());
        found.push(panel);
    }
    found
}

/// `expr` as Grafana sends it with the namespace picked and every instance.
fn as_grafana_sends(expr: &str) -> String {
    expr.replace("$namespace", NAMESPACE)
        .replace("$instance", ".*")
        .replace("$__rate_interval", "1m")
}

/// The metric names `expr` reads: the words naming troupe's families or the
/// process figures (no function or label is spelt that way).
fn metrics_named(expr: &str) -> Vec<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| w.starts_with("troupe_") || w.starts_with("process_"))
        .map(str::to_owned)
        .collect()
}

/// The labels a legend format such as `{{peer}} → {{channel}}` shows.
fn legend_labels(legend: &str) -> Vec<&str> {
    legend
        .split("{{")
        .skip(1)
        .filter_map(|rest| rest.split_once("}}"))
        .map(|(label, _)| label.trim())
        .collect()
}

#[tokio::test]
async fn every_dashboard_query_shows_what_the_processes_export() -> anyhow::Result<()> {
    let test = "every_dashboard_query_shows_what_the_processes_export";
    let Some(watched) = Watched::start(test, &[]).await? else {
        return Ok(());
    };
    let prometheus = &watched.prometheus;
    let file = chart_file("dashboards/troupe.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&file)?)
        .with_context(|| format!("{} is not JSON", file.display()))?;

    // The variables' label_values(SELECTOR, LABEL) offer the scraped values.
    let variables = dashboard["templating"]["list"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for variable in variables.iter().filter(|v| v["type"] == "query") {
        let query = match &variable["query"] {
            Value::String(q) => q.clone(),
            other => other["query"].as_str().unwrap_or_default().to_owned(),
        };
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .with_context(|| format!("variable {}: {query}", variable["name"]))?;
        let (selector, label) = inner
            .rsplit_once(',')
            .context("label_values without a label")?;
        let label = label.trim();
        let offered = prometheus
            .query(&as_grafana_sends(&format!(
                "group by ({label}) ({selector})"
            )))
            .await?;
        assert!(
            !offered.is_empty() && offered.iter().all(|s| s["metric"][label].is_string()),
            "variable {} offers nothing: {offered:#?}",
            variable["name"]
        );
    }

    let scraped = prometheus.metric_names().await?;
    let (mut shown, mut unexported) = (Vec::new(), Vec::new());
    for panel in panels(&dashboard) {
        let title = panel["title"].as_str().unwrap_or_default();
        for target in panel["targets"].as_array().into_iter().flatten() {
            let Some(expr) = target["expr"].as_str() else {
                continue;
            };
            let sent = as_grafana_sends(expr);
            let series = prometheus
                .query(&sent)
                .await
                .with_context(|| format!("panel {title:?}"))?;
            let missing: Vec<String> = metrics_named(&sent)
                .into_iter()
                .filter(|name| !scraped.contains(name))
                .collect();
            if missing.is_empty() {
                assert!(
                    !series.is_empty(),
                    "panel {title:?} shows nothing although the processes export what it reads: {sent}"
                );
                // A legend naming a label the series lack shows blanks.
                let legend = target["legendFormat"].as_str().unwrap_or_default();
                for label in legend_labels(legend) {
                    let blank: Vec<&Value> = series
                        .iter()
                        .filter(|s| !s["metric"][label].is_string())
                        .collect();
                    assert!(
                        blank.is_empty(),
                        "panel {title:?}: its legend {legend:?} names {label}, which these lack: {blank:#?}"
                    );
                }
                shown.push(title);
            } else {
                unexported.push(format!("{title} ({})", missing.join(", ")));
            }
        }
    }
    eprintln!(
        "{} dashboard queries show series; {} read what these processes do not export \
         (no TLS, no memory limit, no store on disk, nothing refused yet...): {unexported:#?}",
        shown.len(),
        unexported.len()
    );
    // The cluster exports enough for most panels to be checked.
    let total = shown.len() + unexported.len();
    assert!(total > 0, "the dashboard has no queries");
    assert!(shown.len() * 4 >= total * 3, "{unexported:#?}");
    Ok(())
}
