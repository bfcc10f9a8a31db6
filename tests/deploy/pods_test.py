"""Issue 18's real containers: the Helm chart's placement pods and the example app's pod,
patched by the real injector, running under podman against a real PostgreSQL.

    .venv/bin/python tests/deploy/pods_test.py DAEMON_BIN

1. Images: the daemon (deploy/container/build-scratch.sh, from DAEMON_BIN) and the Python
   example app (deploy/examples/build-scratch.sh), both FROM scratch.
2. PostgreSQL from scripts/postgres.sh; the chart rendered with `helm template` and
   tests/deploy/podman-values.yaml (TLS on with the chart's generated certificates, tokens
   and the store URL in Secrets).
3. The placement StatefulSet becomes three Pods as the StatefulSet controller makes them
   (workloads.py); the example Deployment's pod template becomes a Pod that goes through
   `troupe injector` (the binary under test, webhook.py: on 127.0.0.1, with the rendered
   sidecar.json and webhook certificate, checked as the API server checks it); its JSON
   Patch is applied with `jsonpatch`.
4. The pods run with `podman kube play`, the test playing the kubelet where podman 4.3
   does not (kubelet.py's docstring lists what and why); the test checks: placement
   healthy (gRPC health on each replica's health port), the sidecar's probes (startup,
   then readiness), the app registered over 127.0.0.1 (TROUPE_ADDR), a call from the host
   (`troupe invoke` with the API token and the CA) reaching the `vehicle` actor through
   the sidecar, the read-only token (the one the ServiceMonitor scrapes with) answered
   `troupe status` and refused an invoke (PERMISSION_DENIED), the sidecar's /metrics over
   HTTPS answering it (and 401 without a token), each placement replica's /metrics
   scraped as the chart's placement ServiceMonitor says (its CA, serverName and token:
   200, one leader among them; 401 without the token), the app's own exec probe, and on
   deletion the app stopping first, then the sidecar draining and the actor's state in
   PostgreSQL (write-behind is set to 1h, so only the drain wrote it); last, the three
   replicas deleted at once each stop cleanly on SIGTERM.

Needs podman (.ci/run installs it; tests/packaging/containers.conf holds the settings it
runs with here), helm (scripts/k8s-tools.sh), PostgreSQL's server (scripts/postgres.sh
installs it) and the repo's .venv with PyYAML, jsonpatch and grpcio-health-checking.
Everything made is removed at the end, on failure too.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import http.client
import json
import os
import random
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from chart import (
    Json,
    config_maps_of,
    documents,
    example_deployment,
    helm_template,
    k8s_tools,
    name_of,
    one,
    secrets_of,
)
from kubelet import (
    Played,
    create_pod,
    delete_pod,
    follow_logs,
    for_podman,
    podman,
    podman_env,
    probe,
    start_pod,
    tail_logs,
)
from pod_checks import check_drain, check_injected
from runner import REPO, Lines, daemon_binary, output, wait_until
from webhook import injector_for
from workloads import deployment_pod, stable_name, statefulset_pods

VALUES = Path(__file__).with_name("podman-values.yaml")
RELEASE = "troupe"
DAEMON_TAG = "localhost/troupe:pods-test"
APP_TAG = "localhost/troupe-vehicle-app:pods-test"
APP_POD = "vehicle-app-0"
# Bounds of the waits: each ends as soon as its event (a health answer, a log line) comes.
BUILD_TIMEOUT = 300.0
START_TIMEOUT = 60.0
CALL_TIMEOUT = 30.0


def log(message: str) -> None:
    print(f"pods_test: {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def timed(timings: dict[str, float], name: str) -> Iterator[None]:
    start = time.monotonic()
    log(f"{name}...")
    yield
    timings[name] = time.monotonic() - start


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def psql(url: str, sql: str) -> list[list[str]]:
    out = output(["psql", url, "-X", "-A", "-t", "-F", "\t", "-c", sql])
    return [line.split("\t") for line in out.splitlines() if line]


def build_images(binary: str) -> None:
    """Both images at once (the daemon's is a copy, the app's mostly pip)."""
    commands = [
        [str(REPO / "deploy/container/build-scratch.sh"), binary, DAEMON_TAG],
        [str(REPO / "deploy/examples/build-scratch.sh"), APP_TAG],
    ]
    builds = [
        (
            cmd[0],
            subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=podman_env()
            ),
        )
        for cmd in commands
    ]
    for script, b in builds:
        out, err = b.communicate(timeout=BUILD_TIMEOUT)
        if b.returncode != 0:
            raise RuntimeError(f"{script} failed ({b.returncode}):\n{err}{out}")


def render(pg_url: str, sidecar_port: int, health_port: int, metrics_port: int) -> list[Json]:
    """The release as podman-values.yaml installs it, on this run's store and ports, with
    the ServiceMonitors (not played: the test scrapes as they say)."""
    k8s_tools()
    code, out = helm_template(
        ["-f", str(VALUES), "--set", f"stateStore.url={pg_url}",
         "--set", f"sidecar.port={sidecar_port}", "--set", f"sidecar.healthPort={health_port}",
         "--set", f"metrics.port={metrics_port}", "--set", "metrics.serviceMonitor.enabled=true"],
        api_versions=("monitoring.coreos.com/v1",),
        release=RELEASE,
    )  # fmt: skip
    if code != 0:
        raise RuntimeError(f"helm template failed ({code}):\n{out}")
    return documents(out)


@dataclass
class Pods:
    """What the steps share: the daemon, the played pods, the release's Secrets, the
    store, where files go, and the cleanup every step adds to."""

    binary: str
    cleanup: contextlib.ExitStack
    work: Path
    pg_url: str
    secrets: dict[str, dict[str, bytes]]
    placement: list[Played]
    app: Played
    sidecar_port: int
    metrics_port: int
    # The endpoint of the ServiceMonitor that scrapes the placement replicas.
    placement_scrape: Json

    def ca(self) -> Path:
        """The sidecars' CA (their TLS Secret's ca.crt), as a file the clients read."""
        path = self.work / "ca.crt"
        path.write_bytes(self.secrets[f"{RELEASE}-sidecar-tls"]["ca.crt"])
        return path


def placement_up(pods: Pods) -> None:
    for p in pods.placement:
        pods.cleanup.callback(podman, "kube", "down", str(p.file), check=False)
        podman("pod", "rm", "-f", p.name, check=False)
        create_pod(p)
        start_pod(p)
    for p in pods.placement:
        wait_until(
            f"{p.name}'s readinessProbe",
            START_TIMEOUT,
            functools.partial(probe, p, "placement", "readinessProbe"),
        )


def app_up(pods: Pods) -> None:
    """The app pod started, registered and probed."""
    app = pods.app
    pods.cleanup.callback(lambda: podman("kube", "down", str(app.file), check=False))
    podman("pod", "rm", "-f", app.name, check=False)
    create_pod(app)
    follow: dict[str, Lines] = {}

    def follow_container(name: str) -> None:
        follow[name] = follow_logs(app, name)
        pods.cleanup.callback(follow[name].stop)

    start_pod(app, follow_container)
    sidecar_log, app_log = follow["troupe"], follow["app"]
    app_log.wait(
        "the app registered with its sidecar",
        lambda s: s.startswith("registered vehicle with the daemon at 127.0.0.1:"),
        START_TIMEOUT,
    )
    sidecar_log.wait(
        "the sidecar's 'host registered'",
        lambda s: "host registered" in s and "vehicle" in s,
        START_TIMEOUT,
    )
    # mTLS to placement with the chart's certificates, by the replicas' DNS names.
    sidecar_log.wait(
        "the sidecar's 'joined the cluster'", lambda s: "joined the cluster" in s, START_TIMEOUT
    )
    wait_until(
        "the sidecar's readinessProbe",
        START_TIMEOUT,
        lambda: probe(app, "troupe", "readinessProbe"),
    )
    assert probe(app, "troupe", "livenessProbe"), "the sidecar's livenessProbe failed"
    for kind in ("readinessProbe", "livenessProbe"):
        assert probe(app, "app", kind), f"the app's {kind} failed"


def calls(pods: Pods) -> None:
    """Calls from the host reach the actor through the sidecar; none without a token, none
    with the read-only token, which only inspects."""
    tokens = pods.secrets[f"{RELEASE}-tokens"]
    env = {
        **os.environ,
        "TROUPE_API_TOKEN": tokens["api-token"].decode(),
        "TROUPE_TLS_CA": str(pods.ca()),
        "TROUPE_ADDR": f"127.0.0.1:{pods.sidecar_port}",
    }
    invoke = [pods.binary, "invoke", "vehicle", "bus-1"]
    for n, (lat, lon) in enumerate([(48.85, 2.35), (48.86, 2.36)], start=1):
        data = json.dumps({"lat": lat, "lon": lon, "ts": 1000.0 + n})
        out = output(
            [*invoke, "report", "-o", "json", "--data", data], env=env, timeout=CALL_TIMEOUT
        )
        assert json.loads(out) == n, f"report {n} answered {out}"
    out = output([*invoke, "position", "-o", "json"], env=env, timeout=CALL_TIMEOUT)
    assert json.loads(out)["lat"] == 48.86, out
    # No token: refused (the chart's tokens are on).
    refused = subprocess.run(
        [*invoke, "position"],
        env={k: v for k, v in env.items() if k != "TROUPE_API_TOKEN"},
        capture_output=True,
        text=True,
        timeout=CALL_TIMEOUT,
        check=False,
    )
    assert refused.returncode != 0, "a call without the API token was answered"
    # The read-only token the chart generated and gave the sidecar (TROUPE_READ_TOKEN_FILE).
    read_env = {**env, "TROUPE_API_TOKEN": tokens["read-token"].decode()}
    output([pods.binary, "status", "-o", "json"], env=read_env, timeout=CALL_TIMEOUT)
    denied = subprocess.run(
        [*invoke, "position"],
        env=read_env,
        capture_output=True,
        text=True,
        timeout=CALL_TIMEOUT,
        check=False,
    )
    assert denied.returncode != 0 and "PERMISSION_DENIED" in denied.stderr, (
        f"invoke with the read-only token: exit {denied.returncode}: {denied.stderr}"
    )
    stored = psql(pods.pg_url, "SELECT count(*) FROM troupe_state WHERE actor_id = 'bus-1'")
    assert stored == [["0"]], f"state written before the drain: {stored}"


def scrape(pods: Pods, token: bytes | None) -> tuple[int, bytes]:
    """GET /metrics of the sidecar over HTTPS (checked against the CA) sending TOKEN, as
    the ServiceMonitor does: the status and the body."""
    context = ssl.create_default_context(cafile=str(pods.ca()))
    request = urllib.request.Request(f"https://127.0.0.1:{pods.metrics_port}/metrics")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token.decode()}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=CALL_TIMEOUT) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as e:
        return e.code, b""


def metrics(pods: Pods) -> None:
    """The read-only token scrapes the sidecar's /metrics; no token does not."""
    status, body = scrape(pods, pods.secrets[f"{RELEASE}-tokens"]["read-token"])
    assert status == 200 and b"# TYPE troupe_" in body, f"scrape with the read-only token: {status}"
    status, _ = scrape(pods, None)
    assert status == 401, f"scrape without a token: {status}"


def https_get(
    address: tuple[str, int], server_name: str, cafile: Path, token: bytes | None
) -> tuple[int, bytes]:
    """GET /metrics at ADDRESS over HTTPS, checking the certificate against CAFILE for
    SERVER_NAME (as a ServiceMonitor's tlsConfig.serverName: the address is a pod IP) and
    sending TOKEN: the status and the body."""
    context = ssl.create_default_context(cafile=str(cafile))
    with (
        socket.create_connection(address, timeout=CALL_TIMEOUT) as raw,
        context.wrap_socket(raw, server_hostname=server_name) as tls,
    ):
        connection = http.client.HTTPConnection(server_name, address[1], timeout=CALL_TIMEOUT)
        connection.sock = tls
        headers = {"Authorization": f"Bearer {token.decode().strip()}"} if token else {}
        connection.request("GET", "/metrics", headers=headers)
        response = connection.getresponse()
        return response.status, response.read()


def gauge(body: bytes, family: str) -> float:
    """The value of FAMILY (a gauge without labels) in an OpenMetrics text BODY."""
    for line in body.decode().splitlines():
        name, _, value = line.partition(" ")
        if name == family:
            return float(value.split()[0])
    raise AssertionError(f"no {family} in /metrics")


def placement_metrics(pods: Pods) -> None:
    """Each replica's /metrics scraped as the placement ServiceMonitor says: with its
    token, over HTTPS checked against its CA for its serverName; without the token, 401.
    Together the replicas report one leader."""
    endpoint = pods.placement_scrape
    assert endpoint["scheme"] == "https", endpoint
    tls = endpoint["tlsConfig"]
    ca_ref, credentials = tls["ca"]["secret"], endpoint["authorization"]["credentials"]
    cafile = pods.work / "placement-ca.crt"
    cafile.write_bytes(pods.secrets[ca_ref["name"]][ca_ref["key"]])
    token = pods.secrets[credentials["name"]][credentials["key"]]

    def scrape_all() -> list[bytes]:
        bodies = []
        for p in pods.placement:
            address = (p.ip, pods.metrics_port)
            status, body = https_get(address, tls["serverName"], cafile, token)
            assert status == 200 and b"# TYPE troupe_placement_raft_term" in body, (
                f"{p.name}: scrape with the ServiceMonitor's token: {status}"
            )
            status, _ = https_get(address, tls["serverName"], cafile, None)
            assert status == 401, f"{p.name}: scrape without a token: {status}"
            bodies.append(body)
        return bodies

    # The app joined through a leader already; a re-election would only take a moment.
    wait_until(
        "one placement leader in the replicas' /metrics",
        CALL_TIMEOUT,
        lambda: sum(gauge(b, "troupe_placement_raft_leader") for b in scrape_all()) == 1,
    )


def delete_app(pods: Pods) -> None:
    """The app stops first, the sidecar drains after it: the state is in PostgreSQL."""
    started = time.monotonic()
    deleted = delete_pod(pods.app)
    took = time.monotonic() - started
    assert took < pods.app.grace, f"deleting the pod took {took:.1f}s, past its grace"
    # Read once the sidecar had exited: all it wrote, which tells a hung drain from one
    # that finished.
    sidecar_log = deleted.logs["troupe"]
    if "troupe daemon stopped" not in sidecar_log:
        tail = "\n".join(sidecar_log.splitlines()[-30:])
        raise AssertionError(
            f"the sidecar never logged 'troupe daemon stopped'; deleting took {took:.1f}s;"
            f" it ended {deleted.states.get('troupe')}; its last lines:\n{tail}"
        )
    check_drain(deleted.states, sidecar_log)
    rows = psql(
        pods.pg_url,
        "SELECT key, convert_from(value, 'UTF8') FROM troupe_state "
        "WHERE actor_type = 'vehicle' AND actor_id = 'bus-1' ORDER BY key",
    )
    stored_state = {k: json.loads(v) for k, v in rows}
    assert stored_state.get("reports") == 2, f"state after the drain: {stored_state}"
    assert stored_state.get("position", {}).get("lat") == 48.86, stored_state
    assert len(stored_state.get("history", [])) == 2, stored_state
    reminders = psql(pods.pg_url, "SELECT name FROM troupe_reminders WHERE actor_id = 'bus-1'")
    assert reminders == [["parked"]], f"the durable reminder: {reminders}"


def placement_down(pods: Pods) -> None:
    """All replicas deleted at once, as `helm uninstall` would: each stops on SIGTERM
    within its grace (exit 0, not killed)."""
    with concurrent.futures.ThreadPoolExecutor(len(pods.placement)) as pool:
        stopped = list(pool.map(delete_pod, pods.placement))
    for p, deleted in zip(pods.placement, stopped, strict=True):
        code = deleted.states["placement"]["ExitCode"]
        assert code == 0, f"{p.name} exited {code} on SIGTERM (137: killed at its grace)"


def main() -> int:
    binary = daemon_binary(__doc__ or "")
    total = time.monotonic()
    timings: dict[str, float] = {}
    with contextlib.ExitStack() as cleanup:
        work = Path(tempfile.mkdtemp(prefix="troupe-pods-"))
        work.chmod(0o755)  # the containers' users read their Secret files below it
        cleanup.callback(shutil.rmtree, work, ignore_errors=True)

        with timed(timings, "images"):
            cleanup.callback(lambda: podman("rmi", "-f", DAEMON_TAG, APP_TAG, check=False))
            build_images(binary)

        with timed(timings, "postgres"):
            postgres = str(REPO / "scripts/postgres.sh")
            pg_dir = str(work / "pg")
            cleanup.callback(lambda: output([postgres, "stop", pg_dir], check=False))
            pg_url = output([postgres, "start", pg_dir], timeout=180)

        with timed(timings, "render and inject"):
            sidecar_port, health_port, metrics_port = free_port(), free_port(), free_port()
            docs = render(pg_url, sidecar_port, health_port, metrics_port)
            app_pod = deployment_pod(example_deployment(), APP_POD)
            for c in app_pod["spec"]["containers"]:
                c["image"] = APP_TAG  # the image a user builds and sets in the Deployment
            injector = cleanup.enter_context(injector_for(binary, docs, work / "injector"))
            patched = injector.mutate(app_pod)
            check_injected(patched, DAEMON_TAG)

        # A loopback /24 of this run's own for the replicas (they all listen on the
        # chart's ports); the app pod is 127.0.0.1, where TROUPE_ADDR points.
        net = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}"
        placement_pods = statefulset_pods(one(docs, "StatefulSet"))
        aliases = {stable_name(p): f"{net}.{i + 1}" for i, p in enumerate(placement_pods)}
        secrets = secrets_of(docs)
        config_maps = config_maps_of(docs)
        placement = [
            for_podman(p, f"{net}.{i + 1}", aliases, secrets, config_maps, work)
            for i, p in enumerate(placement_pods)
        ]
        app = for_podman(patched, "127.0.0.1", aliases, secrets, config_maps, work)
        placement_monitor = one(
            docs, "ServiceMonitor", lambda m: name_of(m) == f"{RELEASE}-placement-metrics"
        )
        pods = Pods(
            binary,
            cleanup,
            work,
            pg_url,
            secrets,
            placement,
            app,
            sidecar_port,
            metrics_port,
            placement_monitor["spec"]["endpoints"][0],
        )
        try:
            with timed(timings, "placement healthy"):
                placement_up(pods)
            with timed(timings, "app pod up"):
                app_up(pods)
            with timed(timings, "calls"):
                calls(pods)
            with timed(timings, "metrics"):
                metrics(pods)
                placement_metrics(pods)
            with timed(timings, "delete the app pod"):
                delete_app(pods)
            with timed(timings, "placement down"):
                placement_down(pods)
        except BaseException:
            for tail in tail_logs([*placement, app]):
                log(tail)
            raise

    timings["total"] = time.monotonic() - total
    print(
        "pods: placement x3 healthy, the injected sidecar served the app and a call from "
        "the host, the read-only token inspected and scraped but could not invoke, the "
        "placement replicas scraped as their ServiceMonitor says, probes "
        "answered, the sidecar drained after the app with state in "
        "PostgreSQL: ok (" + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()) + ")"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
