"""The Grafana dashboard of deploy/helm/troupe/files/dashboards/troupe.json, which Grafana
imports as it is and the chart puts in a ConfigMap for Grafana's dashboard sidecar
(metrics.grafanaDashboard). tests/tests/prometheus_rules.rs runs each of its queries against
a Prometheus scraping real daemons; these checks hold it to what that test and Grafana rely
on, without either: its uid, title and variables; every panel with an id of its own, a
title, a description, the `datasource` variable and a place on the 24-column grid that no
other panel takes; every query PromQL that parses once Grafana has put its variables in
(promql-parser), reads only metrics docs/observability.md describes, picks the daemons by
namespace and instance (placement replicas by namespace alone) and filters nothing else
away, so that it answers whenever its metrics are scraped. And the ConfigMap: the file byte
for byte, with the labels and annotations asked for, only when asked for."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import promql_parser
from chart import CHART, NAMESPACE, Json, by_kind, name_of
from chart_cases import Case
from promql_names import documented_families, metrics_read, nodes, selectors

DASHBOARD = CHART / "files" / "dashboards" / "troupe.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRID_COLUMNS = 24
VARIABLES: dict[str, Json] = {
    "datasource": {"type": "datasource", "query": "prometheus"},
    "namespace": {
        "type": "query",
        "query": "label_values(troupe_build_info, namespace)",
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
    },
    "instance": {
        "type": "query",
        "query": 'label_values(troupe_build_info{namespace=~"$namespace"}, instance)',
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
    },
}
# What Grafana puts in place of the variables a query may use before Prometheus sees it, as
# with "All" chosen; any other variable ($__interval, $__range, ${...}) is refused.
AS_GRAFANA_SENDS = {"$namespace": ".*", "$instance": ".*", "$__rate_interval": "1m"}
# The same variables as markers that survive parsing, to tell a selector's `$namespace` from a
# `.*` written by hand.
AS_MARKERS = {"$namespace": "VAR_namespace", "$instance": "VAR_instance", "$__rate_interval": "1m"}
# The matchers each selector must carry: the daemons are picked by namespace and instance,
# the placement replicas (instances of their own) by namespace alone.
DAEMON_MATCHERS = {("namespace", "=~", "VAR_namespace"), ("instance", "=~", "VAR_instance")}
PLACEMENT_MATCHERS = {("namespace", "=~", "VAR_namespace")}
# Besides those, the one matcher on a label's value a query may have (for "calls not ok"): any
# other would leave a query without series while its metrics are scraped (group by the label).
ALLOWED_FILTERS = {("result", "=", "ok")}
# Operators that drop series: `x > 0` answers nothing while x is 0, `a and b` nothing without b.
DROPPING = ("==", "!=", ">", "<", ">=", "<=", "and", "unless")

Check = Callable[[bool, str, str], bool]


def load() -> Json:
    dashboard: Json = json.loads(DASHBOARD.read_text())
    return dashboard


def panels(dashboard: Json) -> list[Json]:
    found: list[Json] = dashboard.get("panels", [])
    return found


def targets(dashboard: Json) -> Iterator[tuple[str, Json]]:
    """Each query of the dashboard, with the title of its panel."""
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            yield str(panel.get("title", "?")), target


def substituted(expr: str, values: dict[str, str]) -> str:
    for variable, value in values.items():
        expr = expr.replace(variable, value)
    return expr


def top_level_problems(dashboard: Json) -> list[str]:
    problems = []
    want = {"uid": "troupe", "title": "Troupe", "tags": ["troupe"], "schemaVersion": 39}
    for key, value in want.items():
        if dashboard.get(key) != value:
            problems.append(f"{key} is {dashboard.get(key)!r}, not {value!r}")
    # A dashboard with an id or __inputs is an export of one Grafana, not a file to provision.
    problems += [f"a top-level {key!r}" for key in ("id", "__inputs") if key in dashboard]
    variables = {v.get("name"): v for v in dashboard.get("templating", {}).get("list", [])}
    if set(variables) != set(VARIABLES):
        problems.append(f"variables {sorted(map(str, variables))}, not {sorted(VARIABLES)}")
    for name, want_fields in VARIABLES.items():
        variable = variables.get(name, {})
        query = variable.get("query")
        got: Json = {k: variable.get(k) for k in want_fields}
        # Grafana saves a query variable's query as {"query": ...} since schema version 38.
        if isinstance(query, dict):
            got["query"] = query.get("query")
        if got != want_fields:
            problems.append(f"variable {name}: {got}, not {want_fields}")
        if variable.get("type") == "query" and variable.get("datasource") != DATASOURCE:
            problems.append(f"variable {name}: data source {variable.get('datasource')}")
    return problems


def overlap(a: Json, b: Json) -> bool:
    return bool(
        a["x"] < b["x"] + b["w"]
        and b["x"] < a["x"] + a["w"]
        and a["y"] < b["y"] + b["h"]
        and b["y"] < a["y"] + a["h"]
    )


def panel_problems(dashboard: Json) -> list[str]:
    problems = []
    ids: list[Any] = []
    placed: list[tuple[str, Json]] = []
    for panel in panels(dashboard):
        title = str(panel.get("title") or f"the panel with id {panel.get('id')}")
        ids.append(panel.get("id"))
        grid = panel.get("gridPos", {})
        if (
            not all(isinstance(grid.get(k), int) for k in ("x", "y", "w", "h"))
            or min(grid["x"], grid["y"], grid["w"] - 1, grid["h"] - 1) < 0
        ):
            problems.append(f"{title}: gridPos {grid}")
        elif grid["x"] + grid["w"] > GRID_COLUMNS:
            problems.append(f"{title}: gridPos {grid} ends past column {GRID_COLUMNS}")
        else:
            problems += [f"{title} overlaps {other}" for other, g in placed if overlap(grid, g)]
            placed.append((title, grid))
        if panel.get("type") == "row":
            # Collapsed rows keep their panels inside them, out of `panels`.
            if panel.get("collapsed") is not False or panel.get("panels"):
                problems.append(f"row {title}: collapsed, or panels inside it")
            continue
        if not isinstance(panel.get("id"), int):
            problems.append(f"{title}: no id")
        if not panel.get("title") or not panel.get("description"):
            problems.append(f"{title}: no title or no description")
        if panel.get("datasource") != DATASOURCE:
            problems.append(f"{title}: data source {panel.get('datasource')}, not {DATASOURCE}")
        refs = [t.get("refId") for t in panel.get("targets", [])]
        if not refs or len(set(refs)) != len(refs) or not all(refs):
            problems.append(f"{title}: no queries, or refIds {refs} not one each")
        for target in panel.get("targets", []):
            if target.get("datasource") != DATASOURCE:
                problems.append(f"{title}: a query's data source {target.get('datasource')}")
            if not target.get("expr") or not isinstance(target.get("legendFormat"), str):
                problems.append(f"{title}: a query without expr or legendFormat")
    problems += [f"id {i} used twice" for i in sorted({i for i in ids if ids.count(i) > 1})]
    return problems


def matchers(selector: promql_parser.VectorSelector) -> set[tuple[str, str, str]]:
    """SELECTOR's matchers as (label, operator, value)."""
    ops = {"Equal": "=", "NotEqual": "!=", "Re": "=~", "NotRe": "!~"}
    found = set()
    for m in selector.matchers.matchers:
        op = str(m.op).removeprefix("MatchOp.")  # MatchOp.Re
        found.add((m.name, ops.get(op, op), m.value))
    return found


def as_written(found: set[tuple[str, str, str]]) -> str:
    """Matchers as the dashboard spells them, its variables for the markers."""
    unmarked = {marker: variable for variable, marker in AS_MARKERS.items()}
    text = (f'{n}{op}"{unmarked.get(v, v)}"' for n, op, v in sorted(found))
    return "{" + ", ".join(text) + "}"


def dropping_operators(expr: promql_parser.Expr) -> list[str]:
    """The binary operators of EXPR that drop series: comparisons without `bool`, and, unless."""
    return [
        str(node.op)
        for node in nodes(expr)
        if isinstance(node, promql_parser.BinaryExpr)
        and str(node.op) in DROPPING
        and not (node.modifier is not None and node.modifier.return_bool)
    ]


def expr_problems(where: str, expr: str, documented: set[str]) -> list[str]:
    problems = []
    variables = re.findall(r"\$\{?\w+\}?", expr)
    problems += [
        f"{where}: uses {v} (only {', '.join(AS_GRAFANA_SENDS)})"
        for v in variables
        if v not in AS_GRAFANA_SENDS
    ]
    try:
        parsed = promql_parser.parse(substituted(expr, AS_GRAFANA_SENDS))
        marked = selectors(promql_parser.parse(substituted(expr, AS_MARKERS)))
    except ValueError as e:
        return [*problems, f"{where}: does not parse: {e}\n  {expr}"]
    read = metrics_read(parsed)
    if not read:
        problems.append(f"{where}: reads no metric")
    problems += [f"{where}: {m} is not in docs/observability.md" for m in sorted(read - documented)]
    for selector in marked:
        name = selector.name or "?"
        found = matchers(selector)
        want = PLACEMENT_MATCHERS if name.startswith("troupe_placement_") else DAEMON_MATCHERS
        if name.startswith(("troupe_", "process_")) and not want <= found:
            problems.append(f"{where}: {name}{as_written(found)} lacks {as_written(want)}")
        extra = {m for m in found - want - ALLOWED_FILTERS if m[0] != "__name__"}
        if extra:
            problems.append(f"{where}: {name} filters on {as_written(extra)}")
    problems += [
        f"{where}: `{op}` drops series (group by a label instead)"
        for op in dropping_operators(parsed)
    ]
    return problems


def query_problems(dashboard: Json) -> tuple[int, list[str]]:
    documented = documented_families()
    problems = []
    count = 0
    for title, target in targets(dashboard):
        count += 1
        where = f"{title} ({target.get('refId')})"
        problems += expr_problems(where, str(target.get("expr", "")), documented)
    for variable in dashboard.get("templating", {}).get("list", []):
        query = variable.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        inner = re.fullmatch(r"label_values\((.*),\s*\w+\)", str(query))
        if variable.get("type") == "query" and inner:
            read = metrics_read(promql_parser.parse(substituted(inner[1], AS_GRAFANA_SENDS)))
            problems += [
                f"variable {variable['name']}: {m} is undocumented" for m in read - documented
            ]
    return count, problems


def check_dashboard(check: Check) -> None:
    try:
        dashboard = load()
    except (OSError, ValueError) as e:
        check(False, f"{DASHBOARD.name}: Grafana dashboard JSON", str(e))
        return
    problems = top_level_problems(dashboard)
    check(
        not problems,
        f"{DASHBOARD.name}: uid troupe, its tags, the datasource/namespace/instance variables",
        "\n".join(problems),
    )
    problems = panel_problems(dashboard)
    shown = [p for p in panels(dashboard) if p.get("type") != "row"]
    check(
        not problems and len(shown) > 0,
        f"{DASHBOARD.name}: {len(shown)} panels, each with its id, title, description, the"
        " datasource variable and a place on the grid of its own",
        "\n".join(problems),
    )
    count, problems = query_problems(dashboard)
    check(
        not problems and count > 0,
        f"{DASHBOARD.name}: {count} queries parse, read documented metrics, pick the daemons by"
        " $namespace and $instance (placement by $namespace) and drop no series",
        "\n".join(problems),
    )


def asked(case: Case, prefix: str) -> dict[str, str | None]:
    """The keys under PREFIX that CASE sets (--set A.B=V, --set-string ...), None for null."""
    found: dict[str, str | None] = {}
    for flag, value in zip(case.args[::2], case.args[1::2], strict=False):
        if flag in ("--set", "--set-string") and value.startswith(prefix + "."):
            key, _, v = value[len(prefix) + 1 :].partition("=")
            found[key] = None if (flag, v) == ("--set", "null") else v
    return found


def merged(defaults: dict[str, str], sets: dict[str, str | None]) -> dict[str, str]:
    out = dict(defaults)
    for key, value in sets.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def check_dashboard_config_map(case: Case, docs: list[Json], check: Check) -> None:
    """With metrics.grafanaDashboard.enabled: one ConfigMap, in the namespace asked for (the
    release's by default), holding the file byte for byte under troupe.json, with the chart's
    labels and those asked for (the sidecar's `grafana_dashboard: "1"` by default) and the
    annotations asked for. Without it, none."""
    maps = [
        d
        for d in by_kind(docs, "ConfigMap")
        if "troupe.json" in (d.get("data") or {}) or name_of(d).endswith("-dashboard")
    ]
    if case.value("metrics.grafanaDashboard.enabled") != "true":
        check(not maps, f"[{case.name}] no dashboard ConfigMap unless asked", str(maps)[:400])
        return
    prefix = "metrics.grafanaDashboard"
    problems = []
    if len(maps) != 1:
        problems.append(f"{len(maps)} dashboard ConfigMaps: {[name_of(m) for m in maps]}")
    else:
        meta = maps[0]["metadata"]
        namespace = case.value(f"{prefix}.namespace") or NAMESPACE
        if (name_of(maps[0]), meta.get("namespace")) != ("t-troupe-dashboard", namespace):
            problems.append(f"{meta.get('namespace')}/{name_of(maps[0])}, not in {namespace}")
        if maps[0]["data"].get("troupe.json", "").encode() != DASHBOARD.read_bytes():
            problems.append("troupe.json is not files/dashboards/troupe.json byte for byte")
        labels = merged({"grafana_dashboard": "1"}, asked(case, f"{prefix}.labels"))
        labels |= {"app.kubernetes.io/part-of": "troupe", "app.kubernetes.io/instance": "t"}
        if not labels.items() <= (meta.get("labels") or {}).items():
            problems.append(f"labels {meta.get('labels')} lack some of {labels}")
        annotations = merged({}, asked(case, f"{prefix}.annotations"))
        if (meta.get("annotations") or {}) != annotations:
            problems.append(f"annotations {meta.get('annotations')}, not {annotations}")
    check(
        not problems,
        f"[{case.name}] the dashboard ConfigMap: files/dashboards/troupe.json as it is, its"
        " namespace, labels and annotations",
        "\n".join(problems),
    )
