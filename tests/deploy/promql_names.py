"""What the PromQL the chart ships reads, for the checks of the alert rules (alert_checks.py)
and of the Grafana dashboard (dashboard_checks.py): the metric families docs/observability.md
describes, and the selectors and metric names of a parsed expression (promql-parser, the
parser of the Rust promql-parser crate)."""

from __future__ import annotations

import re

import promql_parser
from runner import REPO

OBSERVABILITY = REPO / "docs" / "observability.md"


def documented_families() -> set[str]:
    """The names in the first column of docs/observability.md's tables, histograms with
    their series."""
    names: set[str] = set()
    for line in OBSERVABILITY.read_text().splitlines():
        cells = line.split("|")
        if len(cells) > 2 and line.startswith("| `"):
            names.update(re.findall(r"`([a-z_]+)`", cells[1]))
    series = {f"{n}{suffix}" for n in names for suffix in ("_bucket", "_sum", "_count")}
    return names | series | PROMETHEUS_OWN


# What Prometheus records about each scrape itself, which the alerts may read too.
PROMETHEUS_OWN = {"up"}


def nodes(expr: promql_parser.Expr) -> list[object]:
    """Every node of EXPR: operators, calls, aggregations, selectors, literals."""
    found: list[object] = []
    stack: list[object] = [expr]
    while stack:
        node = stack.pop()
        found.append(node)
        if isinstance(node, promql_parser.MatrixSelector):
            stack.append(node.vector_selector)
        elif isinstance(node, promql_parser.BinaryExpr):
            stack.extend((node.lhs, node.rhs))
        elif isinstance(node, promql_parser.Call):
            stack.extend(node.args)
        elif isinstance(
            node,
            promql_parser.AggregateExpr
            | promql_parser.ParenExpr
            | promql_parser.UnaryExpr
            | promql_parser.SubqueryExpr,
        ):
            stack.append(node.expr)
    return found


def selectors(expr: promql_parser.Expr) -> list[promql_parser.VectorSelector]:
    """Every vector selector in EXPR, those under a range (`x[5m]`) included."""
    return [n for n in nodes(expr) if isinstance(n, promql_parser.VectorSelector)]


def metrics_read(expr: promql_parser.Expr) -> set[str]:
    """Every metric name EXPR selects."""
    return {s.name for s in selectors(expr) if s.name}
