"""The Helm chart (deploy/helm/troupe) rendered as the tests read it: the pinned tools on
PATH (scripts/k8s-tools.sh), `helm template` into documents, and the documents the tests
look up (by kind, by name, the Secrets' data, the injector's sidecar config, the example)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from runner import REPO, run

CHART = REPO / "deploy" / "helm" / "troupe"
EXAMPLE = REPO / "deploy" / "examples" / "vehicle-app.yaml"
NAMESPACE = "troupe"

Json = dict[str, Any]


def tools_dir(script: str) -> Path:
    """The directory scripts/SCRIPT prints last, once it has installed its tools there
    (when missing); exits when it fails."""
    proc = subprocess.run(
        [str(REPO / "scripts" / script)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        sys.exit(f"scripts/{script} failed:\n{proc.stdout}{proc.stderr}")
    return Path(proc.stdout.strip().splitlines()[-1])


def k8s_tools() -> Path:
    """The k8s tools' directory (scripts/k8s-tools.sh installs them when missing), put
    first on PATH: every test runs the versions the script pins, not whatever is installed."""
    bin_dir = tools_dir("k8s-tools.sh")
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    return bin_dir


def helm_template(
    args: tuple[str, ...] | list[str],
    api_versions: tuple[str, ...] = (),
    release: str = "t",
    chart: Path = CHART,
) -> tuple[int, str]:
    """`helm template` of the chart in NAMESPACE: exit code and output (the manifests)."""
    cmd = ["helm", "template", release, str(chart), "--namespace", NAMESPACE, *args]
    for api in api_versions:
        cmd += ["--api-versions", api]
    return run(cmd)


def documents(text: str) -> list[Json]:
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


def example_deployment() -> Json:
    return one(documents(EXAMPLE.read_text()), "Deployment")


def name_of(doc: Json) -> str:
    return str(doc.get("metadata", {}).get("name", "?"))


def by_kind(docs: list[Json], kind: str) -> list[Json]:
    return [d for d in docs if d.get("kind") == kind]


def one(docs: list[Json], kind: str, pred: Callable[[Json], bool] = lambda _: True) -> Json:
    found = [d for d in by_kind(docs, kind) if pred(d)]
    assert len(found) == 1, f"expected one {kind}, the chart rendered {len(found)}"
    return found[0]


def secrets_of(docs: list[Json]) -> dict[str, dict[str, bytes]]:
    """Each Secret's data by name, decoded (data and stringData, as the API server merges)."""
    out: dict[str, dict[str, bytes]] = {}
    for d in by_kind(docs, "Secret"):
        data = {k: base64.b64decode(v) for k, v in (d.get("data") or {}).items()}
        data.update({k: str(v).encode() for k, v in (d.get("stringData") or {}).items()})
        out[d["metadata"]["name"]] = data
    return out


def config_maps_of(docs: list[Json]) -> dict[str, dict[str, bytes]]:
    """Each ConfigMap's data by name (data and binaryData), as a volume would hold it."""
    out: dict[str, dict[str, bytes]] = {}
    for d in by_kind(docs, "ConfigMap"):
        data = {k: str(v).encode() for k, v in (d.get("data") or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (d.get("binaryData") or {}).items()})
        out[d["metadata"]["name"]] = data
    return out


def sidecar_json(docs: list[Json]) -> str | None:
    """The injector's config (the ConfigMap's sidecar.json) as rendered, if any."""
    for doc in by_kind(docs, "ConfigMap"):
        if "sidecar.json" in doc.get("data", {}):
            return str(doc["data"]["sidecar.json"])
    return None


def sidecar_config(docs: list[Json]) -> Json | None:
    text = sidecar_json(docs)
    if text is None:
        return None
    config: Json = json.loads(text)
    return config
