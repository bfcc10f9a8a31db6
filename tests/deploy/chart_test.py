"""Static checks of the Helm chart (deploy/helm/troupe) and the example (deploy/examples).

No cluster can run here, so this tests every level below one:

- `helm lint --strict` and `helm template` over a matrix of values;
- every rendered manifest through kubeconform `-strict` (schemas of Kubernetes 1.29, the
  first with native sidecars, and the newest kubernetes-validate ships, made standalone
  from kubernetes-validate's files: no network) and through kubernetes-validate itself;
- a policy scan with checkov (kube-linter's Go module is not served here) with no failed
  check beyond the commented IGNORED list;
- values.schema.json refusing wrong types and unknown values;
- the injector's sidecar config: JSON, a native sidecar (restartPolicy Always), applied to
  the example Deployment's pod as the injector does (docs/kubernetes.md), the result
  validated and scanned like the manifests;
- the `helm lint` / `helm template` / `helm install` / `helm upgrade` commands of
  docs/kubernetes.md, run (install and upgrade as `helm template`).

Run: .venv/bin/python tests/deploy/chart_test.py   (installs its tools with
scripts/k8s-tools.sh when missing). Prints "N passed, M failed" last; exits 1 on a failure.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import yaml  # type: ignore[import-untyped]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "troupe"
EXAMPLE = REPO / "deploy" / "examples" / "vehicle-app.yaml"
DOC = REPO / "docs" / "kubernetes.md"
NAMESPACE = "troupe"
# The first Kubernetes with native sidecars on by default, and the newest schemas shipped.
KUBE_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
# Custom resources: not in the Kubernetes schemas (their CRDs are the operators'), so
# kubeconform and kubernetes-validate skip them; the test checks their shape by hand.
CRD_KINDS = {"Certificate", "Issuer", "ClusterIssuer", "ServiceMonitor"}
# A value the chart must have (the defaults point at an operator-made Secret instead).
PG_URL = "postgres://troupe:secret@db.example.svc:5432/troupe"

# Checkov checks that fail on purpose, each with the reason. Checkov (open source, offline)
# gives no severities, so every failed check counts as high unless listed here.
IGNORED: dict[str, str] = {
    # The chart's image is one the user builds and pushes (no public registry yet);
    # image.digest pins it by digest (the "digest" case below passes CKV_K8S_43), and the
    # default tag is the immutable release version, not "latest".
    "CKV_K8S_43": "image by tag by default; image.digest pins a digest",
    # IfNotPresent with immutable version tags or a digest: "Always" would make every
    # restart of placement, the injector and every sidecar depend on the registry.
    "CKV_K8S_15": "IfNotPresent with immutable tags; Always ties restarts to the registry",
    # Secrets in env: the sidecar gets TROUPE_STORE (the PostgreSQL URL, with its
    # password) from secretKeyRef, as the daemon reads the store URL from the flag or the
    # environment only. Tokens are files everywhere (TROUPE_*_TOKEN_FILE, read by the
    # daemon and both SDKs).
    "CKV_K8S_35": "the store URL is read from the environment only (no file option yet)",
}


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...] = ()
    api_versions: tuple[str, ...] = ()
    # Kinds this case must render (beyond the always-present ones).
    expect: frozenset[str] = frozenset()
    absent: frozenset[str] = frozenset()


MATRIX = (
    Case("defaults", expect=frozenset({"StatefulSet", "MutatingWebhookConfiguration"})),
    Case(
        "ha-5-replicas",
        ("--set", "placement.replicas=5", "--set", "placement.antiAffinity=hard"),
    ),
    Case(
        "existing-secrets",
        (
            "--set",
            "tokens.existingSecret=my-tokens",
            "--set",
            "stateStore.existingSecret=pg-cluster-app",
            "--set",
            "tls.existingSecrets.placement=my-placement-tls",
            "--set",
            "tls.existingSecrets.sidecar=my-sidecar-tls",
        ),
    ),
    Case("url-secret", ("--set", f"stateStore.url={PG_URL}")),
    Case("tls-off-development", ("--set", "tls.enabled=false")),
    Case(
        "injector-off",
        ("--set", "injector.enabled=false"),
        absent=frozenset({"MutatingWebhookConfiguration", "Deployment"}),
    ),
    Case(
        "cert-manager",
        ("--set", "certManager.enabled=true"),
        api_versions=("cert-manager.io/v1",),
        expect=frozenset({"Certificate", "Issuer"}),
    ),
    Case(
        "metrics-servicemonitor",
        ("--set", "metrics.enabled=true", "--set", "metrics.serviceMonitor.enabled=true"),
        api_versions=("monitoring.coreos.com/v1",),
        expect=frozenset({"ServiceMonitor"}),
    ),
    Case(
        "digest-external-placement",
        (
            "--set",
            "image.digest=sha256:" + "ab" * 32,
            "--set",
            "placement.enabled=false",
            "--set",
            "placement.externalAddresses={placement.example:7470}",
        ),
        absent=frozenset({"StatefulSet"}),
    ),
)

# --set values the schema (or a required value) must refuse, with a word the error names.
REFUSED = (
    (("--set", "placement.replicas=abc"), "replicas"),
    (("--set", "placement.replicas=0"), "replicas"),
    (("--set", "tls.enabled=maybe"), "enabled"),
    (("--set", "injector.failurePolicy=Sometimes"), "failurePolicy"),
    (("--set", "sidecar.port=70000"), "port"),
    (("--set", "logging.format=xml"), "format"),
    (("--set", "placement.lease=soon"), "lease"),
    (("--set", "unknownValue=1"), "unknownValue"),
    (("--set", "placement.unknown=1"), "unknown"),
    (("--set", "stateStore.url=mysql://x"), "url"),
    (("--set", "certManager.enabled=true"), "cert-manager"),  # no cert-manager.io/v1
    (("--set", "metrics.enabled=true", "--set", "metrics.serviceMonitor.enabled=true"),
     "monitoring"),
    (("--set", "placement.enabled=false"), "externalAddresses"),
    (("--set", "stateStore.existingSecret="), "stateStore"),
)  # fmt: skip


# ---------------------------------------------------------------------------------------


@dataclass
class Results:
    passed: int = 0
    failed: list[str] = field(default_factory=list)

    def check(self, ok: bool, what: str, detail: str = "") -> bool:
        if ok:
            self.passed += 1
            print(f"ok    {what}")
        else:
            self.failed.append(what)
            print(f"FAIL  {what}\n{indent(detail)}" if detail else f"FAIL  {what}")
        return ok


def indent(text: str) -> str:
    return "\n".join("      " + line for line in text.strip().splitlines()[-40:])


def run(cmd: list[str], cwd: Path = REPO, env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, env=env or os.environ.copy(), check=False
    )
    return proc.returncode, proc.stdout + proc.stderr


def tools() -> Path:
    """The k8s tools' directory (installing them when missing), put first on PATH."""
    proc = subprocess.run(
        [str(REPO / "scripts" / "k8s-tools.sh")], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        sys.exit(f"scripts/k8s-tools.sh failed:\n{proc.stdout}{proc.stderr}")
    bin_dir = Path(proc.stdout.strip().splitlines()[-1])
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    return bin_dir


def helm_template(args: tuple[str, ...], api_versions: tuple[str, ...] = ()) -> tuple[int, str]:
    cmd = ["helm", "template", "t", str(CHART), "--namespace", NAMESPACE, *args]
    for api in api_versions:
        cmd += ["--api-versions", api]
    return run(cmd)


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


# -- schemas: kubernetes-validate's files, made standalone for kubeconform ------------------


class Schemas:
    """kubeconform's `-schema-location` over kubernetes-validate's JSON schemas.

    Its "local" schemas point into one shared `/api/_definitions.json`, which kubeconform
    cannot follow; each schema a manifest needs is written out with the definitions it
    reaches copied in (`#/$defs/...`), under DIR/vVERSION-standalone-strict/."""

    REF = "/api/_definitions.json#/$defs/"

    def __init__(self, root: Path) -> None:
        self.root = root
        package = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
        self.source = package
        self.definitions: dict[str, dict[str, Any]] = {}

    def location(self) -> str:
        return str(
            self.root / "{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}"
            "/{{ .ResourceKind }}{{ .KindSuffix }}.json"
        )

    def prepare(self, version: str, docs: list[dict[str, Any]]) -> None:
        src = self.source / f"v{version}-local-strict"
        dst = self.root / f"v{version}-standalone-strict"
        dst.mkdir(parents=True, exist_ok=True)
        if version not in self.definitions:
            self.definitions[version] = json.loads((src / "_definitions.json").read_text())["$defs"]
        defs = self.definitions[version]
        for doc in docs:
            if doc.get("kind") in CRD_KINDS:
                continue
            group_version = str(doc["apiVersion"]).split("/")
            suffix = "-" + group_version[0].split(".")[0].lower()
            if len(group_version) > 1:
                suffix += "-" + group_version[1].lower()
            name = f"{str(doc['kind']).lower()}{suffix}.json"
            if (dst / name).exists() or not (src / name).exists():
                continue
            schema = json.loads((src / name).read_text())
            reached: dict[str, Any] = {}
            pending = list(self._refs(schema))
            while pending:
                key = pending.pop()
                if key in reached:
                    continue
                reached[key] = defs[key]
                pending.extend(self._refs(defs[key]))
            standalone = self._rewrite(schema)
            standalone["$defs"] = {k: self._rewrite(v) for k, v in reached.items()}
            (dst / name).write_text(json.dumps(standalone))

    def _target(self, ref: str) -> str:
        """The definition a $ref names: "/api/_definitions.json#/$defs/X" or "#/$defs/X"."""
        for prefix in (self.REF, "#/$defs/"):
            if ref.startswith(prefix):
                return ref[len(prefix) :]
        raise ValueError(f"a $ref kubernetes-validate's schemas are not known to use: {ref}")

    def _refs(self, node: Any) -> Iterator[str]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "$ref" and isinstance(value, str):
                    yield self._target(value)
                else:
                    yield from self._refs(value)
        elif isinstance(node, list):
            for item in node:
                yield from self._refs(item)

    def _rewrite(self, node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: "#/$defs/" + self._target(v)
                if k == "$ref" and isinstance(v, str)
                else self._rewrite(v)
                for k, v in node.items()
            }
        if isinstance(node, list):
            return [self._rewrite(item) for item in node]
        return node


def kubeconform(schemas: Schemas, files: list[Path], docs: list[dict[str, Any]]) -> list[str]:
    """Problems kubeconform -strict finds in FILES, for each Kubernetes version."""
    problems = []
    for version in KUBE_VERSIONS:
        schemas.prepare(version, docs)
        cmd = [
            "kubeconform", "-strict", "-summary", "-output", "json",
            "-kubernetes-version", version,
            "-schema-location", schemas.location(),
            "-skip", ",".join(sorted(CRD_KINDS)),
            *map(str, files),
        ]  # fmt: skip
        code, out = run(cmd)
        try:
            report = json.loads(out)
        except json.JSONDecodeError:
            problems.append(f"kubeconform {version}: {out}")
            continue
        for res in report.get("resources", []):
            if res.get("status") not in ("statusValid", "statusSkipped"):
                problems.append(f"{version} {res.get('kind')}/{res.get('name')}: {res.get('msg')}")
        summary = report.get("summary", {})
        valid, skipped = summary.get("valid", 0), summary.get("skipped", 0)
        expected = sum(1 for d in docs if d.get("kind") not in CRD_KINDS)
        if code != 0 or valid != expected:
            problems.append(
                f"kubeconform {version}: exit {code}, {valid} valid of {expected}"
                f" ({skipped} skipped: {sorted(CRD_KINDS)})"
            )
    return problems


def kv_validate(docs: list[dict[str, Any]]) -> list[str]:
    problems = []
    for doc in docs:
        if doc.get("kind") in CRD_KINDS:
            continue
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                where = "/".join(str(p) for p in e.path)
                problems.append(f"{version} {doc['kind']}/{name_of(doc)} at {where}: {e.message}")
    return problems


def name_of(doc: dict[str, Any]) -> str:
    return str(doc.get("metadata", {}).get("name", "?"))


def checkov(directory: Path) -> tuple[list[str], list[str], int]:
    """(failed checks not ignored, ignored ones, passed count) over DIRECTORY."""
    env = os.environ.copy()
    # Offline: no guideline download, no version check, no platform mapping.
    env.update(BC_SKIP_MAPPING="TRUE", CHECKOV_NO_VERSION_CHECK="1")
    cmd = [
        "checkov", "-d", str(directory), "--framework", "kubernetes",
        "--quiet", "--compact", "--skip-download", "-o", "json",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return [f"checkov output is not JSON: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"], [], 0
    reports = report if isinstance(report, list) else [report]
    bad: list[str] = []
    ignored: list[str] = []
    passed = 0
    for rep in reports:
        passed += int(rep.get("summary", {}).get("passed", 0))
        for check in rep.get("results", {}).get("failed_checks", []):
            line = (
                f"{check['check_id']} {check['resource']} ({Path(check['file_path']).name}):"
                f" {check['check_name']}"
            )
            (ignored if check["check_id"] in IGNORED else bad).append(line)
    return bad, ignored, passed


# -- the injector's work, done here as the contract says ---------------------------------


def inject(pod_spec: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """POD_SPEC with the sidecar CONFIG applied as `troupe injector` does (the contract)."""
    spec = copy.deepcopy(pod_spec)
    sidecar = config["sidecar"]
    names = {c["name"] for c in spec.get("containers", []) + spec.get("initContainers", [])}
    if sidecar["name"] in names:
        return spec
    apps = spec.get("containers", []) + spec.get("initContainers", [])
    for container in apps:
        env = container.setdefault("env", [])
        have = {e["name"] for e in env}
        env.extend(e for e in config["appEnv"] if e["name"] not in have)
        mounts = container.setdefault("volumeMounts", [])
        mounted = {m["name"] for m in mounts}
        mounts.extend(m for m in config["appVolumeMounts"] if m["name"] not in mounted)
    spec["initContainers"] = [copy.deepcopy(sidecar), *spec.get("initContainers", [])]
    volumes = spec.setdefault("volumes", [])
    present = {v["name"] for v in volumes}
    volumes.extend(v for v in config["volumes"] if v["name"] not in present)
    grace = int(config["terminationGracePeriodSeconds"])
    spec["terminationGracePeriodSeconds"] = max(grace, spec.get("terminationGracePeriodSeconds", 0))
    return spec


def sidecar_config(docs: list[dict[str, Any]]) -> dict[str, Any] | None:
    for doc in docs:
        if doc.get("kind") == "ConfigMap" and "sidecar.json" in doc.get("data", {}):
            config: dict[str, Any] = json.loads(doc["data"]["sidecar.json"])
            return config
    return None


# -- docs/kubernetes.md's commands --------------------------------------------------------


def doc_commands() -> list[list[str]]:
    """The helm lint/template/install/upgrade commands in docs/kubernetes.md's sh blocks."""
    text = DOC.read_text()
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split(" #", 1)[0].strip()
            if re.match(r"helm (lint|template|install|upgrade)\b", line):
                commands.append(shlex.split(line))
    return commands


def as_offline(cmd: list[str]) -> list[str] | None:
    """A doc command as one that runs here: install/upgrade become template."""
    verb = cmd[1]
    if verb in ("lint", "template"):
        return cmd
    install_only = ("--install", "--wait", "--atomic", "--create-namespace", "--reuse-values")
    args = [a for a in cmd[2:] if a not in install_only]
    args = [a for a in args if not a.startswith("--timeout")]
    if verb in ("install", "upgrade"):
        return ["helm", "template", *args]
    return None


# ---------------------------------------------------------------------------------------


def main() -> int:
    start = time.monotonic()
    results = Results()
    bin_dir = tools()
    _, helm_version = run(["helm", "version", "--short"])
    print(f"tools: {bin_dir} (helm {helm_version.strip()})")
    work = Path(tempfile.mkdtemp(prefix="troupe-chart-"))
    schemas = Schemas(work / "schemas")
    scan = work / "scan"
    scan.mkdir()

    for case in MATRIX:
        lint_cmd = ["helm", "lint", "--strict", str(CHART), "--namespace", NAMESPACE, *case.args]
        code, out = run(lint_cmd)
        # --api-versions is template-only: lint renders CRD cases with the capability
        # checks failing, so those are linted through `helm template` below.
        if not case.api_versions:
            results.check(code == 0, f"[{case.name}] helm lint --strict", out)
        code, out = helm_template(case.args, case.api_versions)
        if not results.check(code == 0, f"[{case.name}] helm template", out):
            continue
        docs = documents(out)
        kinds = {str(d.get("kind")) for d in docs}
        results.check(
            case.expect <= kinds and not (case.absent & kinds),
            f"[{case.name}] renders {sorted(case.expect)} and not {sorted(case.absent)}",
            f"rendered kinds: {sorted(kinds)}",
        )
        path = work / f"{case.name}.yaml"
        path.write_text(out)
        problems = kubeconform(schemas, [path], docs)
        results.check(
            not problems,
            f"[{case.name}] kubeconform -strict, Kubernetes {' and '.join(KUBE_VERSIONS)}"
            f" ({len(docs)} manifests, CRDs skipped)",
            "\n".join(problems),
        )
        problems = kv_validate(docs)
        results.check(
            not problems, f"[{case.name}] kubernetes-validate --strict", "\n".join(problems)
        )
        (scan / f"{case.name}.yaml").write_text(out)
        for check in CASE_CHECKS:
            check(case, docs, results)

        config = sidecar_config(docs)
        if config is not None:
            sidecar = config.get("sidecar", {})
            results.check(
                sidecar.get("restartPolicy") == "Always" and sidecar.get("name") == "troupe",
                f"[{case.name}] sidecar config: JSON, a native sidecar named troupe",
                json.dumps(sidecar)[:500],
            )
            example = documents(EXAMPLE.read_text())[0]
            patched = copy.deepcopy(example)
            pod = patched["spec"]["template"]
            pod["spec"] = inject(pod["spec"], config)
            patched["metadata"]["name"] = f"vehicle-app-{case.name}"
            patched["metadata"]["namespace"] = NAMESPACE  # kubectl -n troupe apply
            text = yaml.safe_dump(patched, sort_keys=False)
            ppath = work / f"{case.name}-injected.yaml"
            ppath.write_text(text)
            problems = kubeconform(schemas, [ppath], [patched]) + kv_validate([patched])
            results.check(
                not problems,
                f"[{case.name}] the example pod with the sidecar injected: kubeconform,"
                " kubernetes-validate",
                "\n".join(problems),
            )
            (scan / f"{case.name}-injected.yaml").write_text(text)
            twice = inject(pod["spec"], config)
            results.check(twice == pod["spec"], f"[{case.name}] injecting twice changes nothing")

    # The named template without the webhook, from a chart that depends on this one.
    parent = make_parent_chart(work / "parent")
    code, out = run(
        ["helm", "template", "x", str(parent), "--namespace", NAMESPACE,
         "--set", "troupe.injector.enabled=false", "--show-only", "templates/pod.yaml"]
    )  # fmt: skip
    if results.check(code == 0, 'include "troupe.sidecar" from a parent chart: renders', out):
        pods = documents(out)
        problems = kubeconform(schemas, [write(work / "parent-pod.yaml", out)], pods)
        problems += kv_validate(pods)
        init = pods[0]["spec"]["initContainers"][0] if pods else {}
        if init.get("restartPolicy") != "Always":
            problems.append("the sidecar is not a native sidecar")
        results.check(not problems, "  ...and the pod validates", "\n".join(problems))

    # The example as written (before injection).
    example_docs = documents(EXAMPLE.read_text())
    problems = kubeconform(schemas, [EXAMPLE], example_docs) + kv_validate(example_docs)
    results.check(
        not problems, "example Deployment: kubeconform, kubernetes-validate", "\n".join(problems)
    )
    annotations = example_docs[0]["spec"]["template"]["metadata"].get("annotations", {})
    results.check(
        annotations.get("troupe.dev/enabled") == "true",
        'example Deployment is annotated troupe.dev/enabled: "true"',
    )

    # Policy scan over everything rendered, the injected pods included.
    bad, ignored, passed = checkov(scan)
    for check_id, reason in IGNORED.items():
        hits = sorted({line.split()[1] for line in ignored if line.startswith(check_id + " ")})
        print(f"      ignored {check_id} ({reason}): {', '.join(hits) or 'no finding'}")
    results.check(
        not bad,
        f"checkov over {len(list(scan.iterdir()))} rendered files: {passed} checks passed,"
        f" {len(ignored)} failed as listed in IGNORED, {len(bad)} failed otherwise",
        "\n".join(bad),
    )

    for args, word in REFUSED:
        code, out = helm_template(args)
        results.check(
            code != 0 and word.lower() in out.lower(),
            f"refused: {' '.join(args[1::2])}",
            f"exit {code}: {out[-600:]}",
        )

    for cmd in doc_commands():
        offline = as_offline(cmd)
        if offline is None:
            continue
        code, out = run(offline)
        results.check(code == 0, f"docs/kubernetes.md: {shlex.join(cmd)}", out)
    results.check(bool(doc_commands()), "docs/kubernetes.md has helm commands to run")

    print(f"({time.monotonic() - start:.1f} s; files in {work})")
    print(f"{results.passed} passed, {len(results.failed)} failed")
    return 1 if results.failed else 0


PARENT_POD = """\
{{- $troupe := include "troupe.sidecar" .Subcharts.troupe | fromYaml }}
apiVersion: v1
kind: Pod
metadata:
  name: app
spec:
  terminationGracePeriodSeconds: {{ $troupe.terminationGracePeriodSeconds }}
  initContainers:
    - {{- toYaml $troupe.sidecar | nindent 6 }}
  containers:
    - name: app
      image: registry.example.com/app:1.0.0
      env: {{- toYaml $troupe.appEnv | nindent 8 }}
      volumeMounts: {{- toYaml $troupe.appVolumeMounts | nindent 8 }}
  volumes: {{- toYaml $troupe.volumes | nindent 4 }}
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def make_parent_chart(root: Path) -> Path:
    """A user's chart with this chart as its dependency "troupe", adding the sidecar to a
    pod by hand as docs/kubernetes.md shows."""
    (root / "templates").mkdir(parents=True)
    (root / "charts").mkdir()
    shutil.copytree(CHART, root / "charts" / "troupe")
    write(
        root / "Chart.yaml",
        "apiVersion: v2\nname: app\nversion: 0.1.0\n"
        "dependencies:\n  - name: troupe\n    version: 0.1.0\n",
    )
    write(root / "templates" / "pod.yaml", PARENT_POD)
    return root


# -- checks of one case's rendered manifests ----------------------------------------------


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == kind]


def pod_specs(docs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for doc in docs:
        if doc.get("kind") in ("Deployment", "StatefulSet"):
            yield f"{doc['kind']}/{name_of(doc)}", doc["spec"]["template"]["spec"]


def check_hardening(case: Case, docs: list[dict[str, Any]], results: Results) -> None:
    problems = []
    for where, spec in pod_specs(docs):
        if spec.get("automountServiceAccountToken") is not False:
            problems.append(f"{where}: automountServiceAccountToken is not false")
        if (
            spec.get("securityContext", {}).get("seccompProfile", {}).get("type")
            != "RuntimeDefault"
        ):
            problems.append(f"{where}: no RuntimeDefault seccomp")
        for c in spec["containers"]:
            sc = c.get("securityContext", {})
            if not (
                sc.get("runAsNonRoot")
                and sc.get("readOnlyRootFilesystem")
                and sc.get("allowPrivilegeEscalation") is False
                and sc.get("capabilities", {}).get("drop") == ["ALL"]
            ):
                problems.append(f"{where}/{c['name']}: not hardened: {sc}")
            for probe in ("readinessProbe", "livenessProbe"):
                if probe not in c:
                    problems.append(f"{where}/{c['name']}: no {probe}")
            if "limits" not in c.get("resources", {}):
                problems.append(f"{where}/{c['name']}: no resource limits")
    results.check(
        not problems, f"[{case.name}] pods hardened, probed, limited", "\n".join(problems)
    )


def check_placement(case: Case, docs: list[dict[str, Any]], results: Results) -> None:
    sets = by_kind(docs, "StatefulSet")
    if not sets:
        return
    sts = sets[0]
    replicas = int(sts["spec"]["replicas"])
    container = sts["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    peers = args[args.index("--peers") + 1].split(",")
    problems = []
    if len(peers) != replicas:
        problems.append(f"--peers has {len(peers)} replicas, not {replicas}")
    if "--id-from-hostname" not in args:
        problems.append("no --id-from-hostname")
    tls = not any("tls.enabled=false" in a for a in case.args)
    if tls == ("--insecure" in args):
        problems.append(f"--insecure {'given with' if tls else 'missing without'} TLS")
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        if container[probe].get("grpc", {}).get("port") != 7471:
            problems.append(f"{probe} is not gRPC on 7471")
    headless = [s for s in by_kind(docs, "Service") if s["spec"].get("clusterIP") == "None"]
    if not any(s["spec"].get("publishNotReadyAddresses") for s in headless):
        problems.append("no headless Service publishing not-ready addresses")
    pdbs = [p for p in by_kind(docs, "PodDisruptionBudget") if "placement" in name_of(p)]
    if not pdbs or pdbs[0]["spec"].get("minAvailable") != replicas // 2 + 1:
        problems.append(f"no PodDisruptionBudget keeping a majority of {replicas}")
    if not sts["spec"].get("volumeClaimTemplates"):
        problems.append("no volumeClaimTemplates")
    affinity = sts["spec"]["template"]["spec"].get("affinity", {}).get("podAntiAffinity")
    if not affinity:
        problems.append("no pod anti-affinity")
    results.check(
        not problems,
        f"[{case.name}] placement: {replicas} replicas, peers, probes, PDB",
        "\n".join(problems),
    )


def check_webhook(case: Case, docs: list[dict[str, Any]], results: Results) -> None:
    hooks = by_kind(docs, "MutatingWebhookConfiguration")
    if not hooks:
        return
    hook = hooks[0]["webhooks"][0]
    cert_manager = "cert-manager.io/inject-ca-from" in hooks[0]["metadata"].get("annotations", {})
    problems = []
    if not cert_manager and not hook["clientConfig"].get("caBundle"):
        problems.append("no caBundle and no cert-manager CA injection")
    if hook.get("sideEffects") != "None" or hook.get("failurePolicy") not in ("Fail", "Ignore"):
        problems.append("sideEffects/failurePolicy")
    if not hook.get("namespaceSelector") or not hook.get("objectSelector"):
        problems.append("no namespaceSelector/objectSelector")
    own = [d for d in by_kind(docs, "Deployment") if "injector" in name_of(d)]
    labels = own[0]["spec"]["template"]["metadata"]["labels"] if own else {}
    if labels.get("troupe.dev/control-plane") != "true":
        problems.append("the injector's own pods are not excluded from the webhook")
    results.check(not problems, f"[{case.name}] webhook registration", "\n".join(problems))


def check_network_policies(case: Case, docs: list[dict[str, Any]], results: Results) -> None:
    policies = {name_of(p): p for p in by_kind(docs, "NetworkPolicy")}
    problems = []
    if "placement.enabled=false" not in case.args and not any(
        n.endswith("-placement") for n in policies
    ):
        problems.append("no placement NetworkPolicy")
    for name, policy in policies.items():
        for rule in policy["spec"].get("ingress", []):
            if not rule.get("ports"):
                problems.append(f"{name}: an ingress rule open on every port")
    results.check(not problems, f"[{case.name}] NetworkPolicies", "\n".join(problems))


def check_secrets(case: Case, docs: list[dict[str, Any]], results: Results) -> None:
    secrets = {name_of(s) for s in by_kind(docs, "Secret")}
    config = sidecar_config(docs)
    problems = []
    if config is not None:
        env = {e["name"]: e for e in config["sidecar"]["env"]}
        store = env["TROUPE_STORE"]["valueFrom"]["secretKeyRef"]
        expected = {"name": "pg-cluster-app", "key": "uri"}
        if "existingSecret=pg-cluster-app" in " ".join(case.args) and store != expected:
            problems.append(f"store from {store}")
        tls = "TROUPE_TLS_PEER_IDENTITY" in env
        if tls == any("tls.enabled=false" in a for a in case.args):
            problems.append("TLS environment does not follow tls.enabled")
    if "tokens.existingSecret=my-tokens" in case.args:
        if "t-troupe-tokens" in secrets:
            problems.append("tokens generated although an existing Secret is given")
    elif "t-troupe-tokens" not in secrets:
        problems.append("no generated tokens Secret")
    results.check(not problems, f"[{case.name}] secrets and their references", "\n".join(problems))


def check_crds(case: Case, docs: list[dict[str, Any]], results: Results) -> None:
    """The custom resources kubeconform skips: the fields that matter, by hand."""
    problems = []
    for cert in by_kind(docs, "Certificate"):
        spec = cert["spec"]
        if cert["apiVersion"] != "cert-manager.io/v1" or not spec.get("secretName"):
            problems.append(f"Certificate/{name_of(cert)}: apiVersion or secretName")
        if "issuerRef" not in spec:
            problems.append(f"Certificate/{name_of(cert)}: no issuerRef")
        if name_of(cert).endswith(("-placement", "-sidecar")) and not any(
            n.startswith("member.") for n in spec.get("dnsNames", [])
        ):
            problems.append(f"Certificate/{name_of(cert)}: no member identity")
    for monitor in by_kind(docs, "ServiceMonitor"):
        endpoint = monitor["spec"]["endpoints"][0]
        if endpoint.get("authorization", {}).get("type") != "Bearer":
            problems.append("ServiceMonitor does not send the API token")
    if by_kind(docs, "Certificate") or by_kind(docs, "ServiceMonitor"):
        results.check(
            not problems, f"[{case.name}] custom resources (by hand)", "\n".join(problems)
        )


CASE_CHECKS: tuple[Callable[[Case, list[dict[str, Any]], Results], None], ...] = (
    check_hardening,
    check_placement,
    check_webhook,
    check_network_policies,
    check_secrets,
    check_crds,
)

if __name__ == "__main__":
    sys.exit(main())
