"""Schema and policy validation of manifests, offline: kubeconform `-strict` over the
Kubernetes JSON schemas kubernetes-validate ships (made standalone, see `Schemas`),
kubernetes-validate itself, and checkov's policy scan with the failures accepted on
purpose (IGNORED), each with its reason."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
from chart import Json, name_of
from runner import run

# The first Kubernetes with native sidecars on by default, and the newest schemas shipped.
KUBE_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
# Custom resources: not in the Kubernetes schemas (their CRDs are the operators'), so
# kubeconform and kubernetes-validate skip them; the test checks their shape by hand.
CRD_KINDS = {"Certificate", "Issuer", "ClusterIssuer", "ServiceMonitor", "PrometheusRule"}


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

    def prepare(self, version: str, docs: list[Json]) -> None:
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


def kubeconform(schemas: Schemas, files: list[Path], docs: list[Json]) -> list[str]:
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


def kv_validate(docs: list[Json]) -> list[str]:
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
