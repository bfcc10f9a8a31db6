"""The checks of how the chart has Prometheus scrape the placement replicas (`CHECKS`, run
beside chart_checks.py's on every case): what metrics.enabled adds to a replica's pod
template and that it adds nothing else, and the ServiceMonitor that reaches them."""

from __future__ import annotations

import copy
import difflib
from collections.abc import Callable

import yaml
from chart import NAMESPACE, Json, by_kind, documents, helm_template, name_of, secrets_of
from chart_cases import Case
from chart_checks import Results, metrics_on, metrics_port, mounted_secret_key, scrape_key
from runner import output


def placement_metrics_problems(case: Case, template: Json) -> list[str]:
    """What a replica needs to serve /metrics as the ServiceMonitor scrapes it: the listen
    argument, the port, and the scrape token, alone, as a file of a directory mount."""
    spec = template["spec"]
    container = spec["containers"][0]
    port = metrics_port(case)
    problems = []
    args = container["args"]
    listen = args[args.index("--metrics-listen") + 1] if "--metrics-listen" in args else None
    if listen != f"0.0.0.0:{port}":
        problems.append(f"--metrics-listen {listen}, not 0.0.0.0:{port}")
    ports = {p["name"]: p.get("containerPort") for p in container.get("ports", [])}
    if ports.get("metrics") != port:
        problems.append(f"container ports {ports}: no `metrics` on {port}")
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    path = env.get("TROUPE_PLACEMENT_READ_TOKEN_FILE")
    want = (case.tokens_secret, scrape_key(case))
    got = mounted_secret_key(container, spec.get("volumes", []), path) if path else None
    if got != want:
        problems.append(f"TROUPE_PLACEMENT_READ_TOKEN_FILE={path} reads {got}, not {want}")
    for volume in spec.get("volumes", []):
        secret = volume.get("secret", {})
        if secret.get("secretName") != case.tokens_secret:
            continue
        keys = [item["key"] for item in secret.get("items", [])]
        if keys != [scrape_key(case)]:
            problems.append(f"volume {volume['name']}: keys {keys or 'all'}, not the scrape key")
        mounts = [m for m in container.get("volumeMounts", []) if m["name"] == volume["name"]]
        if not all(m.get("readOnly") for m in mounts):
            problems.append(f"volume {volume['name']} mounted writable")
    return problems


def placement_metrics_leftovers(case: Case, template: Json) -> list[str]:
    spec = template["spec"]
    container = spec["containers"][0]
    found = [a for a in container["args"] if a.startswith("--metrics") or "token" in a]
    found += [e["name"] for e in container.get("env", []) if "METRICS" in e["name"]]
    found += [e["name"] for e in container.get("env", []) if "TOKEN" in e["name"]]
    found += [f"port {p['name']}" for p in container.get("ports", []) if p["name"] == "metrics"]
    found += [
        f"volume {v['name']}"
        for v in spec.get("volumes", [])
        if v.get("secret", {}).get("secretName") == case.tokens_secret
    ]
    return found


def without_placement_metrics(case: Case, template: Json) -> Json:
    """TEMPLATE without what /metrics adds (placement_metrics_problems)."""
    out = copy.deepcopy(template)
    spec = out["spec"]
    container = spec["containers"][0]
    args = container["args"]
    if "--metrics-listen" in args:
        i = args.index("--metrics-listen")
        del args[i : i + 2]
    container["env"] = [
        e for e in container.get("env", []) if e["name"] != "TROUPE_PLACEMENT_READ_TOKEN_FILE"
    ]
    container["ports"] = [p for p in container.get("ports", []) if p["name"] != "metrics"]
    tokens = {
        v["name"]
        for v in spec.get("volumes", [])
        if v.get("secret", {}).get("secretName") == case.tokens_secret
    }
    spec["volumes"] = [v for v in spec.get("volumes", []) if v["name"] not in tokens]
    container["volumeMounts"] = [
        m for m in container.get("volumeMounts", []) if m["name"] not in tokens
    ]
    return out


def check_placement_metrics(case: Case, docs: list[Json], results: Results) -> None:
    """metrics.enabled gives each replica /metrics (listen argument, port, scrape token)
    and changes nothing else of the pod template; off, nothing of it: the template a
    release without metrics had, so upgrading restarts none of its replicas. Each case is
    rendered again with metrics.enabled flipped, for both sides."""
    sets = by_kind(docs, "StatefulSet")
    if not sets:
        return
    on = metrics_on(case)
    flip = (
        ("metrics.enabled=false", "metrics.serviceMonitor.enabled=false")
        if on
        else ("metrics.enabled=true",)
    )
    args = (*case.args, *(a for value in flip for a in ("--set", value)))
    code, out = helm_template(args, case.api_versions)
    problems = []
    if code != 0:
        problems.append(f"helm template with {' '.join(flip)}:\n{out}")
    else:
        mine = sets[0]["spec"]["template"]
        other = by_kind(documents(out), "StatefulSet")[0]["spec"]["template"]
        # The side with metrics on, as the case that renders it (metrics.port), and the other.
        on_case, on_template, off_template = (
            (case, mine, other) if on else (Case(case.name, args), other, mine)
        )
        problems += placement_metrics_problems(on_case, on_template)
        problems += [
            f"with metrics off: {x}" for x in placement_metrics_leftovers(case, off_template)
        ]
        stripped = without_placement_metrics(on_case, on_template)
        if stripped != off_template:
            diff = difflib.unified_diff(
                yaml.safe_dump(off_template).splitlines(),
                yaml.safe_dump(stripped).splitlines(),
                "metrics off",
                "metrics on, without /metrics",
                lineterm="",
            )
            problems.append("metrics.enabled changes more than /metrics:\n" + "\n".join(diff))
    results.check(
        not problems,
        f"[{case.name}] placement /metrics with metrics.enabled (args, port, the scrape token"
        " alone), none of it and the same pod template without",
        "\n".join(problems),
    )


def certificate_names(docs: list[Json], secret: str) -> list[str] | None:
    """The DNS names of the certificate in the TLS Secret SECRET, as the chart makes it
    (cert-manager's Certificate, or the generated Secret); None for one of the user's."""
    for cert in by_kind(docs, "Certificate"):
        if cert["spec"].get("secretName") == secret:
            return [str(n) for n in cert["spec"].get("dnsNames", [])]
    pem = secrets_of(docs).get(secret, {}).get("tls.crt")
    if pem is None:
        return None
    text = output(["openssl", "x509", "-noout", "-ext", "subjectAltName"], input=pem.decode())
    return [n.strip()[4:] for n in text.replace("\n", ",").split(",") if "DNS:" in n]


def dns_match(name: str, pattern: str) -> bool:
    """NAME matches PATTERN as TLS checks a certificate's name (a leading * is one label)."""
    if pattern.startswith("*."):
        return "." in name and name.split(".", 1)[1] == pattern[2:]
    return name == pattern


def check_placement_monitor(case: Case, docs: list[Json], results: Results) -> None:
    """With the ServiceMonitor on and placement in the release: exactly one ServiceMonitor
    reaches the replicas, through one Service over their metrics port, scraping as the
    sidecars' one does (labels, interval, token), over HTTPS with the placement CA and a
    name the placement certificate carries when TLS is on."""
    sets = by_kind(docs, "StatefulSet")
    monitors = by_kind(docs, "ServiceMonitor")
    if not sets or not monitors:
        return
    template = sets[0]["spec"]["template"]
    pods = template["metadata"]["labels"]
    ports = {p["name"]: p["containerPort"] for p in template["spec"]["containers"][0]["ports"]}
    problems = []
    routes = []  # (ServiceMonitor, Service) pairs that scrape the replicas
    for monitor in monitors:
        wanted = monitor["spec"]["selector"]["matchLabels"]
        port_name = monitor["spec"]["endpoints"][0]["port"]
        for svc in by_kind(docs, "Service"):
            labels = svc["metadata"].get("labels", {})
            selector = svc["spec"].get("selector", {})
            if not (wanted.items() <= labels.items() and selector.items() <= pods.items()):
                continue
            for port in svc["spec"]["ports"]:
                if port["name"] == port_name:
                    routes.append((monitor, svc))
                    target = port["targetPort"]
                    if ports.get(target, target) != metrics_port(case):
                        problems.append(f"Service/{name_of(svc)} targets {target}, not metrics")
    if len(routes) != 1:
        found = [f"{name_of(m)} via {name_of(s)}" for m, s in routes]
        problems.append(f"the replicas are scraped by {found or 'no ServiceMonitor'}, not once")
    else:
        placement = routes[0][0]
        sidecars = [m for m in monitors if m is not placement]
        endpoint = placement["spec"]["endpoints"][0]
        if sidecars:
            theirs = sidecars[0]["spec"]["endpoints"][0]
            for field_ in ("interval", "authorization", "path"):
                if endpoint.get(field_) != theirs.get(field_):
                    problems.append(f"{field_} {endpoint.get(field_)}, not {theirs.get(field_)}")
            if placement["metadata"]["labels"] != sidecars[0]["metadata"]["labels"]:
                problems.append("labels differ from the sidecars' ServiceMonitor's")
        tls_on = "tls.enabled=false" not in case.args
        tls = endpoint.get("tlsConfig", {})
        if endpoint.get("scheme") != ("https" if tls_on else "http"):
            problems.append(f"scheme {endpoint.get('scheme')} with TLS {tls_on}")
        if tls_on:
            secret = case.value("tls.existingSecrets.placement") or "t-troupe-placement-tls"
            if tls.get("ca", {}).get("secret") != {"name": secret, "key": "ca.crt"}:
                problems.append(f"CA {tls.get('ca')}, not ca.crt of {secret}")
            # The user's certificate carries the member identity (values.yaml).
            identity = case.value("tls.memberIdentity") or f"member.t-troupe.{NAMESPACE}.troupe"
            names = certificate_names(docs, secret) or [identity]
            server = str(tls.get("serverName", ""))
            if not any(dns_match(server, n) for n in names):
                problems.append(f"serverName {server!r} is none of the certificate's {names}")
        elif tls:
            problems.append(f"tlsConfig without TLS: {tls}")
    results.check(
        not problems,
        f"[{case.name}] placement scraped: one ServiceMonitor and Service over the replicas'"
        " metrics port, the sidecars' token, labels and interval, their certificate checked",
        "\n".join(problems),
    )


CHECKS: tuple[Callable[[Case, list[Json], Results], None], ...] = (
    check_placement_metrics,
    check_placement_monitor,
)
