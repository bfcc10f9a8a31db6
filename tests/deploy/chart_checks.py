"""The checks of one case's rendered manifests (`CASE_CHECKS`), and `Results`, which counts
and prints every check of chart_test.py ("ok    ..." / "FAIL  ..." and the detail)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from chart import (
    Json,
    by_kind,
    documents,
    helm_template,
    name_of,
    secrets_of,
    sidecar_config,
)
from chart_cases import Case


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


def pod_specs(docs: list[Json]) -> Iterator[tuple[str, Json]]:
    for doc in docs:
        if doc.get("kind") in ("Deployment", "StatefulSet"):
            yield f"{doc['kind']}/{name_of(doc)}", doc["spec"]["template"]["spec"]


def check_hardening(case: Case, docs: list[Json], results: Results) -> None:
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
        not problems,
        f"[{case.name}] pods hardened, probed, limited",
        "\n".join(problems),
    )


def peers_file_entries(docs: list[Json], sts: Json) -> tuple[list[str], list[str]]:
    """The entries of the peers file the StatefulSet's replicas read (--peers-file, from the
    ConfigMap volume mounted over its directory), and the problems finding it."""
    container = sts["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    if "--peers" in args:
        return [], ["--peers is an argument: changing placement.replicas would restart replicas"]
    if "--peers-file" not in args:
        return [], ["no --peers-file"]
    path = args[args.index("--peers-file") + 1]
    directory, _, key = path.rpartition("/")
    mounts = [m for m in container.get("volumeMounts", []) if m["mountPath"] == directory]
    if not mounts or "subPath" in mounts[0]:
        # A subPath mount is never refreshed by the kubelet.
        return [], [f"no directory mount at {directory} for --peers-file {path}"]
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"].get("volumes", [])}
    config_map = volumes.get(mounts[0]["name"], {}).get("configMap", {}).get("name")
    maps = {name_of(c): c for c in by_kind(docs, "ConfigMap")}
    if config_map not in maps or key not in maps[config_map].get("data", {}):
        return [], [f"--peers-file {path}: no ConfigMap {config_map} with key {key!r}"]
    lines = (line.split("#", 1)[0].strip() for line in maps[config_map]["data"][key].splitlines())
    return [e for line in lines for e in line.split(",") if e.strip()], []


def check_placement(case: Case, docs: list[Json], results: Results) -> None:
    sets = by_kind(docs, "StatefulSet")
    if not sets:
        return
    sts = sets[0]
    replicas = int(sts["spec"]["replicas"])
    container = sts["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    peers, problems = peers_file_entries(docs, sts)
    if not problems and len(peers) != replicas:
        problems.append(f"the peers file has {len(peers)} replicas, not {replicas}: {peers}")
    if not problems and name_of(sts) + "-peers" not in {
        name_of(c) for c in by_kind(docs, "ConfigMap")
    }:
        problems.append(f"the peers ConfigMap is not {name_of(sts)}-peers")
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
        f"[{case.name}] placement: {replicas} replicas, peers file, probes, PDB",
        "\n".join(problems),
    )
    check_scaling_keeps_the_template(case, results)


def check_scaling_keeps_the_template(case: Case, results: Results) -> None:
    """Changing placement.replicas must not change the pod template: Kubernetes would restart
    every running replica (all at once with Parallel pod management) and placement would lose
    its majority mid-scale. Only the StatefulSet's replicas and the peers ConfigMap change."""
    rendered = {}
    problems = []
    for n in (3, 5):
        code, out = helm_template(
            (*case.args, "--set", f"placement.replicas={n}"), case.api_versions
        )
        if code != 0:
            problems.append(f"helm template with placement.replicas={n}:\n{out}")
            continue
        sets = by_kind(documents(out), "StatefulSet")
        rendered[n] = (
            sets[0]["spec"]["template"],
            peers_file_entries(documents(out), sets[0])[0],
        )
    if not problems:
        if rendered[3][0] != rendered[5][0]:
            problems.append("the StatefulSet's pod template differs between 3 and 5 replicas")
        if (len(rendered[3][1]), len(rendered[5][1])) != (3, 5):
            problems.append(f"peers files of {len(rendered[3][1])} and {len(rendered[5][1])}")
    results.check(
        not problems,
        f"[{case.name}] placement.replicas 3 -> 5: the peers ConfigMap changes, the pods do not",
        "\n".join(problems),
    )


def check_webhook(case: Case, docs: list[Json], results: Results) -> None:
    hooks = by_kind(docs, "MutatingWebhookConfiguration")
    if not hooks:
        return
    hook = hooks[0]["webhooks"][0]
    cert_manager = "cert-manager.io/inject-ca-from" in hooks[0]["metadata"].get("annotations", {})
    problems = []
    if not cert_manager and not hook["clientConfig"].get("caBundle"):
        problems.append("no caBundle and no cert-manager CA injection")
    if hook.get("sideEffects") != "None" or hook.get("failurePolicy") not in (
        "Fail",
        "Ignore",
    ):
        problems.append("sideEffects/failurePolicy")
    if not hook.get("namespaceSelector") or not hook.get("objectSelector"):
        problems.append("no namespaceSelector/objectSelector")
    own = [d for d in by_kind(docs, "Deployment") if "injector" in name_of(d)]
    labels = own[0]["spec"]["template"]["metadata"]["labels"] if own else {}
    if labels.get("troupe.dev/control-plane") != "true":
        problems.append("the injector's own pods are not excluded from the webhook")
    results.check(not problems, f"[{case.name}] webhook registration", "\n".join(problems))


def check_network_policies(case: Case, docs: list[Json], results: Results) -> None:
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
    problems += metrics_ingress_problems(case, policies)
    results.check(not problems, f"[{case.name}] NetworkPolicies", "\n".join(problems))


def metrics_ingress_problems(case: Case, policies: dict[str, Json]) -> list[str]:
    """With metrics on, placement and member pods admit the metrics port from the monitoring
    namespace alone (the same rule); with it off, neither admits it."""
    port = metrics_port(case)
    monitoring = [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    problems = []
    for name in ("t-troupe-placement", "t-troupe-members"):
        if name not in policies:
            continue
        rules = [
            r
            for r in policies[name]["spec"].get("ingress", [])
            if any(p.get("port") == port for p in r.get("ports", []))
        ]
        want = [{"from": monitoring, "ports": [{"port": port, "protocol": "TCP"}]}]
        if metrics_on(case) and rules != want:
            problems.append(f"{name}: the metrics port {port} admitted by {rules}, not {want}")
        if not metrics_on(case) and rules:
            problems.append(f"{name}: the metrics port {port} admitted with metrics off: {rules}")
    return problems


def check_sidecar_probes(case: Case, docs: list[Json], results: Results) -> None:
    """Readiness follows the actor API (a daemon without a placement lease serves no
    actors); startup and liveness the process, or a lost lease would restart it."""
    config = sidecar_config(docs)
    problems = []
    if config is not None:
        sidecar = config["sidecar"]
        services = {
            probe: sidecar.get(probe, {}).get("grpc", {}).get("service", "")
            for probe in ("startupProbe", "readinessProbe", "livenessProbe")
        }
        expected = {
            "startupProbe": "",
            "readinessProbe": "troupe.v1.ActorClient",
            "livenessProbe": "",
        }
        if services != expected:
            problems.append(f"the sidecar's probes ask {services}, not {expected}")
    results.check(not problems, f"[{case.name}] sidecar probes", "\n".join(problems))


def check_secrets(case: Case, docs: list[Json], results: Results) -> None:
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


def mounted_secret_key(container: Json, volumes: list[Json], path: str) -> tuple[str, str] | None:
    """The Secret and key whose file CONTAINER reads at PATH, if a Secret volume holds it."""
    directory, _, file = path.rpartition("/")
    by_name = {v["name"]: v for v in volumes}
    for mount in container.get("volumeMounts", []):
        secret = by_name.get(mount["name"], {}).get("secret")
        if secret is None or "subPath" in mount or mount["mountPath"].rstrip("/") != directory:
            continue
        items = secret.get("items") or [{"key": file, "path": file}]
        keys = [item["key"] for item in items if item["path"] == file]
        return (secret["secretName"], keys[0]) if keys else None
    return None


def token_file_problems(case: Case, sidecar: Json, volumes: list[Json], secret: str) -> list[str]:
    """Each token file the sidecar is given (TROUPE_*_TOKEN_FILE) is its token's key of the
    tokens Secret SECRET; the read-only token's is given only with a tokens.readTokenKey."""
    expected = {
        "TROUPE_API_TOKEN_FILE": case.value("tokens.apiTokenKey", "api-token"),
        "TROUPE_APP_TOKEN_FILE": case.value("tokens.appTokenKey", "app-token"),
        "TROUPE_READ_TOKEN_FILE": case.read_token_key,
    }
    env = {e["name"]: e.get("value") for e in sidecar.get("env", [])}
    problems = []
    for name, key in expected.items():
        path = env.get(name)
        got = mounted_secret_key(sidecar, volumes, path) if path else None
        want = (secret, key) if key else None
        if got != want or (path and not want):
            problems.append(f"{name}={path} reads {got}, not {want}")
    return problems


def check_read_token(case: Case, docs: list[Json], results: Results) -> None:
    """The read-only token (tokens.readTokenKey): generated beside the others, a file of the
    sidecar's, what the ServiceMonitor scrapes with; with readTokenKey "", none of that and
    the ServiceMonitor sends the API token."""
    key = case.read_token_key
    problems = []
    generated = secrets_of(docs).get("t-troupe-tokens")
    if generated is not None:
        keys = {"api-token", "app-token"} | ({key} if key else set())
        if set(generated) != keys:
            problems.append(f"the tokens Secret has {sorted(generated)}, not {sorted(keys)}")
        tokens = list(generated.values())
        if len(set(tokens)) != len(tokens) or min(map(len, tokens)) < 32:
            problems.append("the generated tokens are not distinct, or shorter than 32 bytes")
    config = sidecar_config(docs)
    if config is not None:
        problems += token_file_problems(
            case, config["sidecar"], config["volumes"], case.tokens_secret
        )
    for monitor in by_kind(docs, "ServiceMonitor"):
        credentials = monitor["spec"]["endpoints"][0].get("authorization", {}).get("credentials")
        want = {"name": case.tokens_secret, "key": key or "api-token"}
        if credentials != want:
            problems.append(f"the ServiceMonitor scrapes with {credentials}, not {want}")
    what = f"read-only token {key!r}" if key else "no read-only token (the API token scrapes)"
    results.check(
        not problems,
        f"[{case.name}] {what}: tokens Secret, sidecar token files, ServiceMonitor",
        "\n".join(problems),
    )


def metrics_on(case: Case) -> bool:
    return case.value("metrics.enabled") == "true"


def metrics_port(case: Case) -> int:
    return int(case.value("metrics.port", "9090"))


def scrape_key(case: Case) -> str:
    """The tokens Secret's key the ServiceMonitors send (and the replicas are given)."""
    return case.read_token_key or case.value("tokens.apiTokenKey", "api-token")


def check_crds(case: Case, docs: list[Json], results: Results) -> None:
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
            problems.append("ServiceMonitor does not send a bearer token")
        # Sidecars with a certificate serve /metrics over HTTPS only.
        tls_on = "tls.enabled=false" not in case.args
        tls = endpoint.get("tlsConfig", {})
        if endpoint.get("scheme") != ("https" if tls_on else "http"):
            problems.append(f"ServiceMonitor scheme {endpoint.get('scheme')} with TLS {tls_on}")
        if tls_on and (
            tls.get("ca", {}).get("secret", {}).get("key") != "ca.crt"
            or not str(tls.get("serverName", "")).startswith("member.")
        ):
            problems.append(
                f"ServiceMonitor/{name_of(monitor)} does not check the certificate: {tls}"
            )
    if by_kind(docs, "Certificate") or by_kind(docs, "ServiceMonitor"):
        results.check(
            not problems,
            f"[{case.name}] custom resources (by hand)",
            "\n".join(problems),
        )


CASE_CHECKS: tuple[Callable[[Case, list[Json], Results], None], ...] = (
    check_hardening,
    check_placement,
    check_webhook,
    check_network_policies,
    check_sidecar_probes,
    check_secrets,
    check_read_token,
    check_crds,
)
