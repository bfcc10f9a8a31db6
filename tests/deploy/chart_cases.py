"""What chart_test.py renders: the matrix of values (`Case`), the values the chart must
refuse, the helm commands docs/kubernetes.md shows (run offline), a parent chart that
includes the `troupe.sidecar` named template by hand, and the chart with its NOTES.txt
rendered as a ConfigMap."""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from chart import CHART
from runner import REPO

DOC = REPO / "docs" / "kubernetes.md"
# A value the chart must have (the defaults point at an operator-made Secret instead).
PG_URL = "postgres://troupe:secret@db.example.svc:5432/troupe"


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...] = ()
    api_versions: tuple[str, ...] = ()
    # Kinds this case must render (beyond the always-present ones).
    expect: frozenset[str] = frozenset()
    absent: frozenset[str] = frozenset()

    def value(self, name: str, default: str = "") -> str:
        """What the case sets NAME to with --set, or DEFAULT (the chart's value)."""
        set_to = [a.split("=", 1)[1] for a in self.args if a.startswith(f"{name}=")]
        return set_to[-1] if set_to else default

    @property
    def tokens_secret(self) -> str:
        return self.value("tokens.existingSecret") or "t-troupe-tokens"

    @property
    def read_token_key(self) -> str:
        """The read-only token's key; "" for none."""
        return self.value("tokens.readTokenKey", "read-token")


def monitored(name: str, *values: str, api_versions: tuple[str, ...] = ()) -> Case:
    """A case with metrics and a ServiceMonitor on, plus VALUES (each a --set) and the
    API_VERSIONS they need."""
    sets = ("metrics.enabled=true", "metrics.serviceMonitor.enabled=true", *values)
    return Case(
        name,
        tuple(arg for value in sets for arg in ("--set", value)),
        api_versions=("monitoring.coreos.com/v1", *api_versions),
        expect=frozenset({"ServiceMonitor"}),
    )


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
    monitored("metrics-servicemonitor"),
    monitored("metrics-servicemonitor-plaintext", "tls.enabled=false"),
    # The placement certificate from cert-manager: the ServiceMonitor's serverName is one of
    # its dnsNames.
    monitored(
        "metrics-cert-manager",
        "certManager.enabled=true",
        api_versions=("cert-manager.io/v1",),
    ),
    # Metrics without the Prometheus operator: the replicas serve /metrics, nothing selects it.
    Case(
        "metrics-no-servicemonitor",
        ("--set", "metrics.enabled=true", "--set", "metrics.port=9465"),
        absent=frozenset({"ServiceMonitor"}),
    ),
    Case(
        "metrics-alerts",
        (
            "--set",
            "metrics.enabled=true",
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--set",
            "metrics.prometheusRule.labels.release=prometheus",
        ),
        api_versions=("monitoring.coreos.com/v1",),
        expect=frozenset({"PrometheusRule"}),
        absent=frozenset({"ServiceMonitor"}),
    ),
    # Alerts routed by a team label, two of them left out (a whole group's, for one).
    Case(
        "metrics-alerts-tailored",
        (
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--set",
            "metrics.prometheusRule.additionalRuleLabels.team=payments",
            "--set",
            "metrics.prometheusRule.additionalRuleLabels.severity=page",
            "--set",
            "metrics.prometheusRule.disabled={TroupeCredentialsRefused,"
            "TroupeCertificateExpiresSoon,TroupeCertificateExpiresToday}",
        ),
        api_versions=("monitoring.coreos.com/v1",),
        expect=frozenset({"PrometheusRule"}),
    ),
    # The Grafana dashboard needs no CRD: a ConfigMap for Grafana's dashboard sidecar.
    Case("grafana-dashboard", ("--set", "metrics.grafanaDashboard.enabled=true")),
    # ...in the namespace the sidecar watches, with its label, value and folder annotation.
    Case(
        "grafana-dashboard-monitoring",
        (
            "--set",
            "metrics.grafanaDashboard.enabled=true",
            "--set",
            "metrics.grafanaDashboard.namespace=monitoring",
            "--set",
            "metrics.grafanaDashboard.labels.grafana_dashboard=null",
            "--set-string",
            "metrics.grafanaDashboard.labels.dashboards=troupe",
            "--set-string",
            "metrics.grafanaDashboard.annotations.grafana_folder=Troupe",
        ),
    ),
    # No read-only token: the ServiceMonitor sends the API token, as before there was one.
    monitored("read-token-off", "tokens.readTokenKey="),
    monitored(
        "existing-tokens-read-key",
        "tokens.existingSecret=my-tokens",
        "tokens.readTokenKey=prometheus",
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
    (("--set", "metrics.prometheusRule.enabled=true"), "monitoring"),
    # A misspelt name would leave the alert on.
    (("--api-versions", "monitoring.coreos.com/v1",
      "--set", "metrics.prometheusRule.enabled=true",
      "--set", "metrics.prometheusRule.disabled={TroupeCredentialRefused}"),
     "TroupeCredentialRefused, which is no alert"),
    (("--set", "metrics.grafanaDashboard.namespace=Monitoring"), "namespace"),
    # A pod cannot listen on one port twice: the sidecars' API, the replicas' health port.
    (("--set", "metrics.enabled=true", "--set", "metrics.port=7420"), "sidecar.port"),
    (("--set", "metrics.enabled=true", "--set", "metrics.port=7471"), "placement.healthPort"),
    (("--set", "placement.enabled=false"), "externalAddresses"),
    (("--set", "stateStore.existingSecret="), "stateStore"),
    (("--set", "tokens.readTokenKey=a/b"), "readTokenKey"),
    # Prometheus would hold the app token, and with it could register as an app.
    (("--set", "tokens.readTokenKey=app-token"), "readTokenKey"),
    (("--set", "tokens.readTokenKey=api-token"), "readTokenKey"),
)  # fmt: skip


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


def make_notes_chart(root: Path) -> Path:
    """The chart with NOTES.txt also rendered as the ConfigMap `notes` (templates/notes.yaml):
    `helm template` skips NOTES.txt and `helm lint` only logs its errors, so nothing else
    renders it before a real install prints it."""
    shutil.copytree(CHART, root)
    notes = (root / "templates" / "NOTES.txt").read_text()
    define = '{{- define "test.notes" -}}\n' + notes + "{{- end }}\n"
    write(root / "templates" / "_notes.tpl", define)
    write(
        root / "templates" / "notes.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n"
        'data:\n  NOTES.txt: {{ include "test.notes" . | quote }}\n',
    )
    return root
