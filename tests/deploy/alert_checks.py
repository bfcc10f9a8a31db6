"""The alert rules of deploy/helm/troupe/files/alerts.yaml, which Prometheus loads as a rule
file and the chart wraps in a PrometheusRule: every expression parses as PromQL (with the
promql-parser package, the parser of the Rust promql-parser crate), every metric it reads is
one docs/observability.md describes (so a renamed or misspelt family cannot leave an alert
that never fires), and every alert is named once, has a severity and says what to do."""

from __future__ import annotations

import re
from collections.abc import Callable

import promql_parser
import yaml
from chart import CHART, Json
from chart_cases import Case
from promql_names import documented_families, metrics_read

ALERTS = CHART / "files" / "alerts.yaml"
SEVERITIES = ("warning", "critical")

Check = Callable[[bool, str, str], bool]


def rule_groups() -> list[Json]:
    groups: list[Json] = yaml.safe_load(ALERTS.read_text())["groups"]
    return groups


def rule_problems(rule: Json, documented: set[str]) -> list[str]:
    name = rule.get("alert", "?")
    problems = []
    try:
        read = metrics_read(promql_parser.parse(rule["expr"]))
    except ValueError as e:
        return [f"{name}: the expression does not parse: {e}"]
    if not read:
        problems.append(f"{name}: reads no metric")
    problems += [f"{name}: {m} is not in docs/observability.md" for m in read - documented]
    if rule.get("labels", {}).get("severity") not in SEVERITIES:
        problems.append(f"{name}: severity is none of {SEVERITIES}")
    annotations = rule.get("annotations", {})
    if not annotations.get("summary") or not annotations.get("description"):
        problems.append(f"{name}: no summary or description")
    if "for" in rule and not re.fullmatch(r"[0-9]+[smh]", str(rule["for"])):
        problems.append(f"{name}: for {rule['for']!r} is no duration")
    return problems


def check_alert_rules(check: Check) -> None:
    documented = documented_families()
    problems: list[str] = []
    names: list[str] = []
    for group in rule_groups():
        for rule in group["rules"]:
            names.append(rule.get("alert", "?"))
            problems += rule_problems(rule, documented)
    problems += [f"{n}: named twice" for n in sorted({n for n in names if names.count(n) > 1})]
    check(
        not problems and len(names) > 0,
        f"{len(names)} alert rules parse, read documented metrics and say what to do",
        "\n".join(problems),
    )


def expected_groups(case: Case) -> list[Json]:
    """The rule file's groups as CASE's values tailor them: alerts left out, labels added
    where an alert has none of that name."""
    disabled = case.value("metrics.prometheusRule.disabled", "{}").strip("{}").split(",")
    prefix = "metrics.prometheusRule.additionalRuleLabels."
    added = {
        arg.split("=", 1)[0].removeprefix(prefix): arg.split("=", 1)[1]
        for arg in case.args
        if arg.startswith(prefix)
    }
    groups = []
    for group in rule_groups():
        rules = [
            {**rule, "labels": {**added, **rule.get("labels", {})}}
            for rule in group["rules"]
            if rule["alert"] not in disabled
        ]
        if rules:
            groups.append({"name": group["name"], "rules": rules})
    return groups


def check_prometheus_rule(case: Case, docs: list[Json], check: Check) -> None:
    """The PrometheusRule carries the rule file's groups, tailored as the values ask, when
    asked for."""
    rules = [d for d in docs if d.get("kind") == "PrometheusRule"]
    if case.value("metrics.prometheusRule.enabled") != "true":
        check(not rules, f"[{case.name}] no PrometheusRule unless asked", str(rules))
        return
    carried = len(rules) == 1 and rules[0]["spec"]["groups"] == expected_groups(case)
    check(carried, f"[{case.name}] the PrometheusRule carries files/alerts.yaml", str(rules))
