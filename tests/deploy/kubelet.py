"""The kubelet's part, played with podman 4.3 (Debian's) for pods_test.py: a Pod (as the
controllers and the injector made it) turned into one `podman kube play` can run, its
probes run, its containers started and stopped in the kubelet's order.

What a kubelet does and podman 4.3 does not, done here, each step named where it happens
(`for_podman`, `start_pod`, `delete_pod`):

- Networking: no cluster DNS and no pod network here, so every pod runs with
  `hostNetwork: true` (podman kube play honours it) on a loopback address of its own
  (placement 127.X.Y.1-3, the app pod 127.0.0.1, where TROUPE_ADDR points); listen
  addresses 0.0.0.0 (in args and env) become the pod's address (only loopback traffic,
  and three replicas on one port) and status.podIP is the pod's address. The replicas'
  stable DNS names (what the headless Service's DNS would answer) go into each pod's
  /etc/hosts, which the test writes as the kubelet does (podman 4.3 drops hostAliases
  with hostNetwork).
- Native sidecars: podman 4.3 runs init containers to completion and refuses probes on
  them (containers/podman#20372), so the sidecar becomes the pod's first container and the
  test plays the kubelet: the sidecar starts, its startupProbe passes, then the app
  starts; on deletion the app gets SIGTERM and is waited for, then the sidecar, within
  terminationGracePeriodSeconds (podman's `pod stop` stops all containers at once).
- Probes: podman 4.3 turns only exec/httpGet/tcpSocket livenessProbes into systemd-timer
  health checks; the test runs each probe itself (gRPC health on the probe's port, the
  app's exec probe with `podman exec`).
- Secrets and ConfigMaps: podman 4.3's secret volumes ignore `items` (and need `optional`
  set), so the test writes each Secret and ConfigMap volume's files as the kubelet does
  (mode 0644) and mounts them
  with hostPath; secretKeyRef environment variables get the Secret's value; `$(VAR)` in
  args is expanded from the container's environment; emptyDirs and the claim templates
  are host directories (0777 as a kubelet's emptyDir; the claims owned by the fsGroup).

podman runs with CONTAINERS_CONF, or tests/packaging/containers.conf (the settings it
runs with here) when unset.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import grpc
import yaml
from chart import Json
from grpc_health.v1 import health_pb2, health_pb2_grpc
from runner import REPO, Lines, output, wait_until
from workloads import stable_name

START_TIMEOUT = 60.0


def podman_env() -> dict[str, str]:
    conf = os.environ.get("CONTAINERS_CONF") or str(REPO / "tests/packaging/containers.conf")
    return {**os.environ, "CONTAINERS_CONF": conf}


def podman(*args: str, check: bool = True, timeout: float = 120.0) -> str:
    return output(["podman", *args], check=check, timeout=timeout, env=podman_env())


def health_serving(address: str, service: str = "") -> bool:
    """One gRPC health check of `service` ("" for the whole server), as a kubelet `grpc:`
    probe asks."""
    try:
        with grpc.insecure_channel(address) as channel:
            answer = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=2
            )
        return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)
    except grpc.RpcError:
        return False


class Played:
    """A pod as podman runs it: its name, address, the probes the test runs, its grace,
    which containers are native sidecars (started first, stopped last) and the file."""

    def __init__(self, name: str, ip: str) -> None:
        self.name = name
        self.ip = ip
        self.sidecars: list[str] = []
        self.apps: list[str] = []
        self.probes: dict[str, dict[str, Json]] = {}
        self.grace = 30
        self.file = Path()

    def container(self, name: str) -> str:
        return f"{self.name}-{name}"


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in command and args ($$ escapes)."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", sub, value)


def write_items(where: Path, source: Json, data: dict[str, bytes]) -> None:
    """A Secret or ConfigMap volume's files, honouring `items` and `defaultMode`."""
    items = source.get("items") or [{"key": k, "path": k} for k in data]
    for item in items:
        path = where / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data[item["key"]])
        path.chmod(source.get("defaultMode", 0o644))


def for_podman(
    pod: Json,
    ip: str,
    aliases: dict[str, str],
    secrets: dict[str, dict[str, bytes]],
    config_maps: dict[str, dict[str, bytes]],
    work: Path,
) -> Played:
    """The pod as podman 4.3 can run it, doing what a kubelet would (module docstring)."""
    pod = copy.deepcopy(pod)
    name = pod["metadata"]["name"]
    played = Played(name, ip)
    spec = pod["spec"]
    played.grace = int(spec.pop("terminationGracePeriodSeconds", 30))
    inits = spec.pop("initContainers", [])
    sidecars = [c for c in inits if c.get("restartPolicy") == "Always"]
    assert len(sidecars) == len(inits), "only native sidecars among init containers here"
    for c in sidecars:
        del c["restartPolicy"]
    played.sidecars = [c["name"] for c in sidecars]
    played.apps = [c["name"] for c in spec["containers"]]
    spec["containers"] = sidecars + spec["containers"]
    spec["hostNetwork"] = True
    spec["restartPolicy"] = "Never"
    spec["hostAliases"] = [{"ip": a, "hostnames": [h]} for h, a in sorted(aliases.items())]
    for field in ("affinity", "serviceAccountName", "enableServiceLinks"):
        spec.pop(field, None)
    fs_group = int(spec.get("securityContext", {}).get("fsGroup", 0))

    volumes = []
    for vol in spec.get("volumes", []):
        where = work / "volumes" / name / vol["name"]
        where.mkdir(parents=True)
        if "secret" in vol:
            write_items(where, vol["secret"], secrets[vol["secret"]["secretName"]])
        elif "configMap" in vol:
            write_items(where, vol["configMap"], config_maps[vol["configMap"]["name"]])
        elif "emptyDir" in vol:
            where.chmod(0o777)
        elif "persistentVolumeClaim" in vol:
            os.chown(where, 0, fs_group)
            where.chmod(0o2770)
        else:
            raise AssertionError(f"pod {name}: volume {vol['name']} of an unexpected kind")
        volumes.append({"name": vol["name"], "hostPath": {"path": str(where), "type": "Directory"}})
    # The kubelet writes each pod's /etc/hosts (its own name, then hostAliases); podman 4.3
    # drops hostAliases with hostNetwork, so the test writes it the same way.
    hosts = work / "volumes" / name / "etc-hosts"
    own = spec.get("hostname", name)
    names = f"{stable_name(pod)} {own}" if "subdomain" in spec else own
    hosts.write_text(
        f"127.0.0.1\tlocalhost\n::1\tlocalhost\n{ip}\t{names}\n"
        + "# Entries added by HostAliases.\n"
        + "".join(f"{a}\t{h}\n" for h, a in sorted(aliases.items()))
    )
    hosts.chmod(0o644)
    volumes.append({"name": "etc-hosts", "hostPath": {"path": str(hosts), "type": "File"}})
    for c in spec["containers"]:
        c.setdefault("volumeMounts", []).append(
            {"name": "etc-hosts", "mountPath": "/etc/hosts", "readOnly": True}
        )
    spec["volumes"] = volumes

    for c in spec["containers"]:
        env: dict[str, str] = {}
        for var in c.get("env", []):
            ref = var.pop("valueFrom", None)
            if ref is None:
                var["value"] = str(var.get("value", "")).replace("0.0.0.0:", f"{ip}:")
            elif "secretKeyRef" in ref:
                key = ref["secretKeyRef"]
                var["value"] = secrets[key["name"]][key["key"]].decode()
            elif ref.get("fieldRef", {}).get("fieldPath") == "status.podIP":
                var["value"] = ip
            else:
                raise AssertionError(f"{name}/{c['name']}: env {var['name']}: {ref}")
            env[var["name"]] = var["value"]
        for key in ("command", "args"):
            if key in c:
                c[key] = [expand(a, env).replace("0.0.0.0:", f"{ip}:") for a in c[key]]
        played.probes[c["name"]] = {
            kind: c.pop(kind)
            for kind in ("startupProbe", "readinessProbe", "livenessProbe")
            if kind in c
        }
        c.pop("ports", None)
        c["imagePullPolicy"] = "Never"
    played.file = work / f"{name}.yaml"
    played.file.write_text(yaml.safe_dump(pod, sort_keys=False))
    return played


def probe(played: Played, container: str, kind: str) -> bool:
    """One run of a container's probe of `kind`, as the kubelet runs it."""
    spec = played.probes[container].get(kind)
    assert spec is not None, f"{played.name}/{container} has no {kind}"
    if "grpc" in spec:
        grpc_spec = spec["grpc"]
        return health_serving(f"{played.ip}:{grpc_spec['port']}", grpc_spec.get("service", ""))
    if "exec" in spec:
        done = subprocess.run(
            ["podman", "exec", played.container(container), *spec["exec"]["command"]],
            capture_output=True,
            env=podman_env(),
            timeout=30,
            check=False,
        )
        return done.returncode == 0
    raise AssertionError(f"{played.name}/{container}: a {kind} this test cannot run: {spec}")


def create_pod(played: Played) -> None:
    podman("kube", "play", "--start=false", str(played.file))


def start_pod(played: Played, on_start: Callable[[str], None] = lambda _: None) -> None:
    """Starts the pod's native sidecars and waits for their startupProbe (the kubelet's
    order), then starts the app containers. `on_start(container)` follows each start."""
    for name in played.sidecars:
        podman("start", played.container(name))
        on_start(name)
        wait_until(
            f"{played.name}/{name}'s startupProbe",
            START_TIMEOUT,
            functools.partial(probe, played, name, "startupProbe"),
        )
    for name in played.apps:
        podman("start", played.container(name))
        on_start(name)


def state(ctr: str) -> Json:
    inspected: Json = json.loads(podman("inspect", ctr))[0]["State"]
    return inspected


class Deleted(NamedTuple):
    """How each container of a deleted pod ended, and everything it logged."""

    states: dict[str, Json]
    logs: dict[str, str]


def full_log(ctr: str) -> str:
    """All a stopped container wrote, stdout and stderr in order."""
    return subprocess.run(
        ["podman", "logs", ctr],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=podman_env(),
        check=True,
        timeout=60,
    ).stdout


def delete_pod(played: Played) -> Deleted:
    """Deletes the pod as the kubelet does with native sidecars: SIGTERM to the app
    containers and wait for them, then to the sidecars (last started, first stopped),
    all within terminationGracePeriodSeconds. Returns each container's final state and
    its whole log, read before the pod is removed: a `podman logs -f` follower can
    lose the last lines to the removal."""
    deadline = time.monotonic() + played.grace
    for name in [*played.apps, *reversed(played.sidecars)]:
        left = max(1, int(deadline - time.monotonic()))
        podman("stop", "--time", str(left), played.container(name), timeout=left + 30)
    names = played.apps + played.sidecars
    states = {name: state(played.container(name)) for name in names}
    logs = {name: full_log(played.container(name)) for name in names}
    podman("kube", "down", str(played.file))
    return Deleted(states, logs)


def follow_logs(played: Played, name: str) -> Lines:
    """A container's log from its start on (`podman logs -f` prints what came before)."""
    return Lines(["podman", "logs", "-f", played.container(name)], env=podman_env())


def tail_logs(pods: list[Played]) -> list[str]:
    """The last log lines of each container of PODS: what a failure is diagnosed by."""
    tails = []
    for p in pods:
        for name in p.sidecars + p.apps:
            tail = subprocess.run(
                ["podman", "logs", "--tail", "25", p.container(name)],
                capture_output=True,
                text=True,
                env=podman_env(),
                check=False,
            )
            tails.append(f"--- {p.container(name)}:\n{tail.stdout}{tail.stderr}")
    return tails
