"""The alert rules of deploy/helm/troupe/files/alerts.yaml run by Prometheus's own rule
engine (promtool, from Debian's prometheus package: scripts/prometheus.sh): `promtool check
rules`, then `promtool test rules` with one case per alert. Each case feeds the series a
failing daemon or replica exports and asserts that the alert stays quiet while its `for`
has not passed, then fires with exactly the labels routing needs and a summary naming what
is wrong, rendered from its templates (a template reading a label the series lack renders
empty; this is where that shows). The live side, rules evaluated against real processes,
is tests/tests/prometheus_rules.rs."""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from alert_checks import ALERTS, Check, rule_groups
from chart import Json, tools_dir

DAEMON = {"job": "troupe", "instance": "10.1.2.3:9090", "namespace": "shop"}
REPLICA = {"job": "troupe-placement", "instance": "10.1.2.9:9090", "namespace": "shop"}


@dataclass(frozen=True)
class AlertCase:
    alert: str
    # promtool input: series (name and its labels beyond the process's) -> values
    series: dict[str, str]
    fires_at: str
    # the alert's labels besides alertname
    labels: dict[str, str]
    summary: str
    # an evaluation time at which the trouble has not lasted long enough yet
    quiet_at: str | None = None
    process: dict[str, str] = field(default_factory=lambda: DAEMON)
    # series of other targets, as they are: what the alert must not pick up
    others: dict[str, str] = field(default_factory=dict)


def selector(name: str, process: dict[str, str]) -> str:
    """NAME{extra} with the process's labels added."""
    metric, _, extra = name.partition("{")
    labels = [f'{k}="{v}"' for k, v in process.items()]
    if extra:
        labels.append(extra.rstrip("}"))
    return f"{metric}{{{', '.join(labels)}}}"


# One type's reminders: most of them start 10 to 30 s late.
LATENESS = 'troupe_reminder_lateness_seconds_bucket{actor_type="orders", kind="reminder"'

CASES = [
    # Down for hours: still named, though its own series stopped long ago.
    AlertCase(
        "TroupeProcessDown",
        {"up": "1 1 0x200", 'troupe_build_info{version="1.0.0"}': "1 1"},
        fires_at="3h",
        quiet_at="3m",
        labels={**DAEMON, "severity": "critical"},
        summary="Troupe process 10.1.2.3:9090 (troupe) cannot be scraped",
        others={'up{job="node-exporter", instance="10.1.2.3:9100"}': "0x200"},
    ),
    # Crash-looping from its first start: it never exported a thing, its sibling did.
    AlertCase(
        "TroupeProcessDown",
        {"up": "0x10"},
        fires_at="5m",
        quiet_at="1m",
        labels={**DAEMON, "severity": "critical"},
        summary="Troupe process 10.1.2.3:9090 (troupe) cannot be scraped",
        others={
            'up{job="troupe", instance="10.1.2.4:9090", namespace="shop"}': "1x10",
            'troupe_build_info{job="troupe", instance="10.1.2.4:9090", namespace="shop", '
            'version="1.0.0"}': "1x10",
        },
    ),
    AlertCase(
        "TroupeStoreFailing",
        {"troupe_flush_failures_total": "0+1x20", "troupe_dirty_actors": "3x20"},
        fires_at="12m",
        quiet_at="4m",
        labels={**DAEMON, "severity": "critical"},
        summary="Troupe daemon 10.1.2.3:9090 cannot write to its store",
    ),
    AlertCase(
        "TroupeNotServing",
        {"troupe_serving": "1 1 0x10"},
        fires_at="5m",
        quiet_at="2m",
        labels={**DAEMON, "severity": "critical"},
        summary="Troupe daemon 10.1.2.3:9090 lost its placement lease",
    ),
    AlertCase(
        "TroupePendingCallsNearLimit",
        {"troupe_pending_calls": "950x10", "troupe_max_pending_calls": "1000x10"},
        fires_at="6m",
        quiet_at="3m",
        labels={**DAEMON, "severity": "warning"},
        summary="Troupe daemon 10.1.2.3:9090 is near its bound on pending calls",
    ),
    AlertCase(
        "TroupeMemoryShedding",
        {"troupe_memory_shedding": "1x10"},
        fires_at="6m",
        quiet_at="3m",
        labels={**DAEMON, "severity": "warning"},
        summary="Troupe daemon 10.1.2.3:9090 refuses new calls for memory",
    ),
    AlertCase(
        "TroupeMemoryNearLimit",
        {"process_resident_memory_bytes": "950x15", "troupe_memory_limit_bytes": "1000x15"},
        fires_at="11m",
        quiet_at="5m",
        labels={**DAEMON, "severity": "warning"},
        summary="Troupe process 10.1.2.3:9090 is near its memory limit",
    ),
    AlertCase(
        "TroupeDeadLetters",
        {'troupe_durable_tells_dead_lettered_total{actor_type="orders"}': "0 0 1 1 1"},
        fires_at="3m",
        labels={**DAEMON, "actor_type": "orders", "severity": "warning"},
        summary="Durable tells to orders were dead-lettered",
    ),
    AlertCase(
        "TroupeCallsRefusedForLoad",
        {
            'troupe_calls_total{actor_type="cart", kind="call", result="ok"}': "0+90x20",
            'troupe_calls_total{actor_type="cart", kind="call", result="resource_exhausted"}': (
                "0+10x20"
            ),
            'troupe_calls_total{actor_type="user", kind="call", result="ok"}': "0+100x20",
        },
        fires_at="16m",
        quiet_at="8m",
        labels={**DAEMON, "actor_type": "cart", "severity": "warning"},
        summary="Troupe daemon 10.1.2.3:9090 refuses calls to cart for load",
    ),
    AlertCase(
        "TroupeRemindersLate",
        {
            f'{LATENESS}, le="10"}}': "0+1x40",
            f'{LATENESS}, le="30"}}': "0+100x40",
            f'{LATENESS}, le="+Inf"}}': "0+100x40",
        },
        fires_at="20m",
        quiet_at="10m",
        labels={**DAEMON, "actor_type": "orders", "kind": "reminder", "severity": "warning"},
        summary="reminders of orders start late on 10.1.2.3:9090",
    ),
    # One deployment, two daemons counting the shared store: one alert, the larger count.
    AlertCase(
        "TroupeRemindersPausedLong",
        {"troupe_reminders_paused": "1x4400"},
        fires_at="73h",
        quiet_at="71h",
        labels={"job": "troupe", "namespace": "shop", "severity": "warning"},
        summary="Reminders of troupe in shop have stayed paused for 3 days (2 now)",
        others={
            'troupe_reminders_paused{job="troupe", instance="10.1.2.4:9090", namespace="shop"}': (
                "1x4000 2x400"
            ),
        },
    ),
    AlertCase(
        "TroupeBackupFailed",
        {
            'troupe_backups_total{outcome="failed"}': "0 0 1 1",
            'troupe_backups_total{outcome="ok"}': "0 1 1 1",
        },
        fires_at="3m",
        labels={**DAEMON, "outcome": "failed", "severity": "warning"},
        summary="A backup of Troupe daemon 10.1.2.3:9090's store failed",
    ),
    AlertCase(
        "TroupeFencedWrites",
        {"troupe_fenced_writes_total": "0 1 1"},
        fires_at="2m",
        labels={**DAEMON, "severity": "warning"},
        summary="Troupe daemon 10.1.2.3:9090 served actors it no longer owned",
    ),
    AlertCase(
        "TroupeCredentialsRefused",
        {'troupe_auth_refused_total{service="client", reason="bad_token"}': "1+1x30"},
        fires_at="20m",
        quiet_at="10m",
        labels={**DAEMON, "service": "client", "reason": "bad_token", "severity": "warning"},
        summary="10.1.2.3:9090 keeps refusing client requests (bad_token)",
    ),
    # Unit tests start at Unix time 0: an expiry of 172800 is two days away.
    AlertCase(
        "TroupeCertificateExpiresSoon",
        {'troupe_tls_certificate_expiry_timestamp_seconds{certificate="own"}': "172800x5"},
        fires_at="1m",
        labels={**DAEMON, "certificate": "own", "severity": "warning"},
        summary="The own certificate of 10.1.2.3:9090 expires within a week",
    ),
    AlertCase(
        "TroupeCertificateExpiresToday",
        {'troupe_tls_certificate_expiry_timestamp_seconds{certificate="ca"}': "3600x5"},
        fires_at="1m",
        labels={**DAEMON, "certificate": "ca", "severity": "critical"},
        summary="The ca certificate of 10.1.2.3:9090 expires within a day",
    ),
    AlertCase(
        "TroupePlacementNoLeader",
        {"troupe_placement_raft_has_leader": "0x10"},
        fires_at="2m",
        quiet_at="30s",
        labels={"job": "troupe-placement", "namespace": "shop", "severity": "critical"},
        summary="No placement replica of troupe-placement knows a leader",
        process=REPLICA,
    ),
    AlertCase(
        "TroupePlacementLeaderFlapping",
        {"troupe_placement_raft_leader_changes_total": "1 2 3 4 5 6"},
        fires_at="5m",
        labels={**REPLICA, "severity": "warning"},
        summary="Placement leadership keeps changing (10.1.2.9:9090)",
        process=REPLICA,
    ),
    AlertCase(
        "TroupePlacementFollowerBehind",
        {'troupe_placement_raft_replication_lag_entries{replica="2"}': "150x10"},
        fires_at="6m",
        quiet_at="3m",
        labels={**REPLICA, "replica": "2", "severity": "warning"},
        summary="Placement replica 2 is behind the leader",
        process=REPLICA,
    ),
    AlertCase(
        "TroupeDaemonHeartbeatLate",
        {
            'troupe_placement_daemon_heartbeat_age_seconds{node="node-a"}': "20x5",
            "troupe_placement_lease_seconds": "30x5",
        },
        fires_at="1m",
        labels={**REPLICA, "node": "node-a", "severity": "warning"},
        summary="Daemon node-a is halfway to losing its placement lease",
        process=REPLICA,
    ),
    AlertCase(
        "TroupePlacementTableStuck",
        {"troupe_placement_table_changing": "1x10"},
        fires_at="6m",
        quiet_at="3m",
        labels={"job": "troupe-placement", "namespace": "shop", "severity": "warning"},
        summary="A new placement table has waited 5 minutes for daemons to drain",
        process=REPLICA,
    ),
]


def unit_test(case: AlertCase, rule: Json) -> Json:
    """A promtool test case: quiet first (when it has a `for`), then firing."""
    evaluations: list[Json] = []
    if case.quiet_at:
        evaluations.append({"eval_time": case.quiet_at, "alertname": case.alert, "exp_alerts": []})
    annotations = {"summary": case.summary, "description": rule["annotations"]["description"]}
    fired = {"exp_labels": case.labels, "exp_annotations": annotations}
    evaluations.append({"eval_time": case.fires_at, "alertname": case.alert, "exp_alerts": [fired]})
    series = [{"series": selector(n, case.process), "values": v} for n, v in case.series.items()]
    series += [{"series": n, "values": v} for n, v in case.others.items()]
    return {
        "name": case.alert,
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": evaluations,
    }


def check_alert_units(check: Check) -> None:
    tool = tools_dir("prometheus.sh") / "promtool"
    proc = subprocess.run(
        [str(tool), "check", "rules", str(ALERTS)], capture_output=True, text=True, check=False
    )
    check(proc.returncode == 0, "promtool check rules: the rule file", proc.stdout + proc.stderr)

    rules = {r["alert"]: r for g in rule_groups() for r in g["rules"] if "alert" in r}
    covered = {c.alert for c in CASES}
    check(
        covered == set(rules),
        f"every alert has a promtool case ({len(covered)})",
        f"without a case: {sorted(set(rules) - covered)}; "
        f"no such alert: {sorted(covered - set(rules))}",
    )
    tests = {
        "rule_files": [str(ALERTS)],
        "evaluation_interval": "30s",
        "tests": [unit_test(c, rules[c.alert]) for c in CASES if c.alert in rules],
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "alerts_test.yaml"
        path.write_text(yaml.safe_dump(tests, sort_keys=False))
        proc = subprocess.run(
            [str(tool), "test", "rules", str(path)], capture_output=True, text=True, check=False
        )
    check(
        proc.returncode == 0,
        f"promtool test rules: {len(tests['tests'])} cases, each alert quiet, "
        "then firing with their labels and summary",
        proc.stdout + proc.stderr,
    )
