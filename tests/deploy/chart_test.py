"""Static checks of the Helm chart (deploy/helm/troupe) and the example (deploy/examples).

No cluster can run here, so this tests every level below one:

- `helm lint --strict` and `helm template` over a matrix of values (chart_cases.py), and
  checks of what each renders (chart_checks.py, placement_scrape_checks.py);
- every rendered manifest through kubeconform `-strict` (schemas of Kubernetes 1.29, the
  first with native sidecars, and the newest kubernetes-validate ships, made standalone
  from kubernetes-validate's files: no network) and through kubernetes-validate itself;
- a policy scan with checkov (kube-linter's Go module is not served here) with no failed
  check beyond the commented IGNORED list (validation.py);
- values.schema.json refusing wrong types and unknown values;
- the injector's sidecar config: JSON, a native sidecar (restartPolicy Always); the
  example Deployment's pod as the real `troupe injector` (DAEMON_BIN, webhook.py) patches
  it with each case's config, validated and scanned like the manifests; injecting twice
  changes nothing; the `troupe.sidecar` named template included by a parent chart;
- NOTES.txt as each case's install prints it (rendered as a ConfigMap: `helm template`
  skips it);
- the `helm lint` / `helm template` / `helm install` / `helm upgrade` commands of
  docs/kubernetes.md, run (install and upgrade as `helm template`);
- the alert rules (files/alerts.yaml, alert_checks.py): PromQL that parses and reads only
  documented metrics, and the PrometheusRule that carries them; Prometheus's own promtool
  (alert_unit_checks.py) checks the file and runs one unit test per alert: quiet, then
  firing with its labels and summary;
- the Grafana dashboard (files/dashboards/troupe.json, dashboard_checks.py): its variables,
  panels on the grid, queries that parse, read documented metrics and pick the daemons by
  namespace and instance, and the ConfigMap that carries it.

Run: .venv/bin/python tests/deploy/chart_test.py DAEMON_BIN   (installs its tools with
scripts/k8s-tools.sh and scripts/prometheus.sh when missing). Prints "N passed, M failed"
last; exits 1 on a failure.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from alert_checks import check_alert_rules, check_prometheus_rule
from alert_unit_checks import check_alert_units
from chart import (
    CHART,
    EXAMPLE,
    NAMESPACE,
    Json,
    documents,
    example_deployment,
    helm_template,
    k8s_tools,
    sidecar_config,
)
from chart_cases import (
    MATRIX,
    REFUSED,
    Case,
    as_offline,
    doc_commands,
    make_notes_chart,
    make_parent_chart,
    write,
)
from chart_checks import CASE_CHECKS, Results, token_file_problems
from dashboard_checks import check_dashboard, check_dashboard_config_map
from placement_scrape_checks import CHECKS as PLACEMENT_SCRAPE_CHECKS
from runner import daemon_binary, run
from validation import IGNORED, KUBE_VERSIONS, Schemas, checkov, kubeconform, kv_validate
from webhook import applied, injector_for
from workloads import deployment_pod, with_pod


@dataclass
class Run:
    """What every step shares: the daemon under test, where rendered files go (WORK; SCAN
    for the policy scan), the schemas, the results."""

    binary: str
    work: Path
    scan: Path
    schemas: Schemas
    results: Results

    def validate(self, path: Path, docs: list[Json]) -> list[str]:
        """Problems kubeconform and kubernetes-validate find in DOCS (written at PATH)."""
        return kubeconform(self.schemas, [path], docs) + kv_validate(docs)


def check_case(run_: Run, case: Case) -> list[Json] | None:
    """Lint and render CASE, validate what it renders, run CASE_CHECKS; its documents."""
    results = run_.results
    lint_cmd = ["helm", "lint", "--strict", str(CHART), "--namespace", NAMESPACE, *case.args]
    code, out = run(lint_cmd)
    # --api-versions is template-only: lint renders CRD cases with the capability
    # checks failing, so those are linted through `helm template` below.
    if not case.api_versions:
        results.check(code == 0, f"[{case.name}] helm lint --strict", out)
    code, out = helm_template(case.args, case.api_versions)
    if not results.check(code == 0, f"[{case.name}] helm template", out):
        return None
    docs = documents(out)
    kinds = {str(d.get("kind")) for d in docs}
    results.check(
        case.expect <= kinds and not (case.absent & kinds),
        f"[{case.name}] renders {sorted(case.expect)} and not {sorted(case.absent)}",
        f"rendered kinds: {sorted(kinds)}",
    )
    path = write(run_.work / f"{case.name}.yaml", out)
    problems = kubeconform(run_.schemas, [path], docs)
    results.check(
        not problems,
        f"[{case.name}] kubeconform -strict, Kubernetes {' and '.join(KUBE_VERSIONS)}"
        f" ({len(docs)} manifests, CRDs skipped)",
        "\n".join(problems),
    )
    problems = kv_validate(docs)
    results.check(not problems, f"[{case.name}] kubernetes-validate --strict", "\n".join(problems))
    write(run_.scan / f"{case.name}.yaml", out)
    for check in (*CASE_CHECKS, *PLACEMENT_SCRAPE_CHECKS):
        check(case, docs, results)
    check_prometheus_rule(case, docs, results.check)
    check_dashboard_config_map(case, docs, results.check)
    return docs


def check_injected_example(run_: Run, case: Case, docs: list[Json]) -> None:
    """The example's pod through the real injector with CASE's sidecar config."""
    config = sidecar_config(docs)
    if config is None:
        return
    results = run_.results
    sidecar = config.get("sidecar", {})
    results.check(
        sidecar.get("restartPolicy") == "Always" and sidecar.get("name") == "troupe",
        f"[{case.name}] sidecar config: JSON, a native sidecar named troupe",
        json.dumps(sidecar)[:500],
    )
    example = example_deployment()
    name = f"vehicle-app-{case.name}"
    pod = deployment_pod(example, name)
    try:
        with injector_for(run_.binary, docs, run_.work / f"{case.name}-injector") as injector:
            patched = injector.mutate(pod)
            twice = applied(patched, injector.review(patched))
    except AssertionError as e:
        results.check(False, f"[{case.name}] troupe injector: the example's pod patched", str(e))
        return
    results.check(True, f"[{case.name}] troupe injector: the example's pod patched")
    deployment = with_pod(example, patched)
    deployment["metadata"]["name"] = name
    deployment["metadata"]["namespace"] = NAMESPACE  # kubectl -n troupe apply
    text = yaml.safe_dump(deployment, sort_keys=False)
    problems = run_.validate(write(run_.work / f"{case.name}-injected.yaml", text), [deployment])
    results.check(
        not problems,
        f"[{case.name}] the example pod with the sidecar injected: kubeconform,"
        " kubernetes-validate",
        "\n".join(problems),
    )
    write(run_.scan / f"{case.name}-injected.yaml", text)
    results.check(twice == patched, f"[{case.name}] injecting twice changes nothing")
    spec = patched["spec"]
    injected: Json = next((c for c in spec.get("initContainers", []) if c["name"] == "troupe"), {})
    problems = token_file_problems(case, injected, spec.get("volumes", []), case.tokens_secret)
    results.check(
        not problems,
        f"[{case.name}] the injected sidecar's token files: each its key of the tokens Secret",
        "\n".join(problems),
    )


def check_parent_chart(run_: Run) -> None:
    """The named template without the webhook, from a chart that depends on this one."""
    parent = make_parent_chart(run_.work / "parent")
    code, out = run(
        ["helm", "template", "x", str(parent), "--namespace", NAMESPACE,
         "--set", "troupe.injector.enabled=false", "--show-only", "templates/pod.yaml"]
    )  # fmt: skip
    if run_.results.check(code == 0, 'include "troupe.sidecar" from a parent chart: renders', out):
        pods = documents(out)
        problems = run_.validate(write(run_.work / "parent-pod.yaml", out), pods)
        init = pods[0]["spec"]["initContainers"][0] if pods else {}
        if init.get("restartPolicy") != "Always":
            problems.append("the sidecar is not a native sidecar")
        volumes = pods[0]["spec"].get("volumes", []) if pods else []
        problems += token_file_problems(Case("parent"), init, volumes, "x-troupe-tokens")
        run_.results.check(not problems, "  ...and the pod validates", "\n".join(problems))


def check_example(run_: Run) -> None:
    """The example as written (before injection)."""
    example_docs = documents(EXAMPLE.read_text())
    problems = run_.validate(EXAMPLE, example_docs)
    run_.results.check(
        not problems, "example Deployment: kubeconform, kubernetes-validate", "\n".join(problems)
    )
    annotations = example_docs[0]["spec"]["template"]["metadata"].get("annotations", {})
    run_.results.check(
        annotations.get("troupe.dev/enabled") == "true",
        'example Deployment is annotated troupe.dev/enabled: "true"',
    )


def check_notes(run_: Run) -> None:
    """NOTES.txt as each case's `helm install` prints it (its lookups find nothing here):
    where to get the read-only token, and an existing tokens Secret's keys to create."""
    chart = make_notes_chart(run_.work / "notes")
    for case in MATRIX:
        args = (*case.args, "--show-only", "templates/notes.yaml")
        code, out = helm_template(args, case.api_versions, chart=chart)
        if not run_.results.check(code == 0, f"[{case.name}] NOTES.txt renders", out):
            continue
        notes = " ".join(str(documents(out)[0]["data"]["NOTES.txt"]).split())
        key = case.read_token_key
        problems = []
        command = f"get secret {case.tokens_secret} -o jsonpath='{{.data.{key}}}'"
        if key and command not in notes:
            problems.append(f"no `{command}`")
        if not key and "read-only token" in notes:
            problems.append("a read-only token named without one")
        if case.value("tokens.existingSecret"):
            keys = ", ".join(k for k in ("api-token", "app-token", key) if k)
            warning = f'"{case.tokens_secret}" does not exist yet'
            if warning not in notes or f"with the keys {keys} " not in notes:
                problems.append(f"no warning that {warning}, with the keys {keys}")
        run_.results.check(
            not problems,
            f"[{case.name}] NOTES.txt: the read-only token, the tokens Secret",
            "\n".join(problems) + "\n" + notes,
        )


def check_policy(run_: Run) -> None:
    """Policy scan over everything rendered, the injected pods included."""
    bad, ignored, passed = checkov(run_.scan)
    for check_id, reason in IGNORED.items():
        hits = sorted({line.split()[1] for line in ignored if line.startswith(check_id + " ")})
        print(f"      ignored {check_id} ({reason}): {', '.join(hits) or 'no finding'}")
    run_.results.check(
        not bad,
        f"checkov over {len(list(run_.scan.iterdir()))} rendered files: {passed} checks passed,"
        f" {len(ignored)} failed as listed in IGNORED, {len(bad)} failed otherwise",
        "\n".join(bad),
    )


def check_refused(results: Results) -> None:
    for args, word in REFUSED:
        code, out = helm_template(args)
        results.check(
            code != 0 and word.lower() in out.lower(),
            f"refused: {' '.join(args[1::2])}",
            f"exit {code}: {out[-600:]}",
        )


def check_doc_commands(results: Results) -> None:
    for cmd in doc_commands():
        offline = as_offline(cmd)
        if offline is None:
            continue
        code, out = run(offline)
        results.check(code == 0, f"docs/kubernetes.md: {shlex.join(cmd)}", out)
    results.check(bool(doc_commands()), "docs/kubernetes.md has helm commands to run")


def main() -> int:
    binary = daemon_binary(__doc__ or "")
    start = time.monotonic()
    bin_dir = k8s_tools()
    _, helm_version = run(["helm", "version", "--short"])
    print(f"tools: {bin_dir} (helm {helm_version.strip()})")
    work = Path(tempfile.mkdtemp(prefix="troupe-chart-"))
    (work / "scan").mkdir()
    run_ = Run(binary, work, work / "scan", Schemas(work / "schemas"), Results())

    for case in MATRIX:
        docs = check_case(run_, case)
        if docs is not None:
            check_injected_example(run_, case, docs)
    check_parent_chart(run_)
    check_notes(run_)
    check_example(run_)
    check_policy(run_)
    check_refused(run_.results)
    check_doc_commands(run_.results)
    check_alert_rules(run_.results.check)
    check_alert_units(run_.results.check)
    check_dashboard(run_.results.check)

    if run_.results.failed:
        # Kept for a look at what failed.
        print(f"({time.monotonic() - start:.1f} s; files in {work})")
    else:
        shutil.rmtree(work, ignore_errors=True)
        print(f"({time.monotonic() - start:.1f} s)")
    print(f"{run_.results.passed} passed, {len(run_.results.failed)} failed")
    return 1 if run_.results.failed else 0


if __name__ == "__main__":
    sys.exit(main())
