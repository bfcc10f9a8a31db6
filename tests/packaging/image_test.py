"""The daemon's container image, run as a user would: built FROM scratch by
deploy/container/build-scratch.sh, started with podman on a published
loopback port, answering gRPC health, serving an actor to an app and a
client outside the container, as a non-root user, stopping gracefully.

    .venv/bin/python tests/packaging/image_test.py TROUPE_BINARY

Needs podman (the CI script installs it; containers.conf here holds the
settings it runs with on our machines) and the repo's .venv (the Python SDK
and grpcio-health-checking).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

import troupe

ROOT = Path(__file__).resolve().parents[2]
TAG = "localhost/troupe:packaging-test"
API_TOKEN = "image-test-api-token"
APP_TOKEN = "image-test-app-token"
STARTUP_TIMEOUT = 60.0


@troupe.actor("counter")
class Counter(troupe.Actor):
    @troupe.method
    async def incr(self, by: int = 1) -> int:
        self.state["count"] = self.state.get("count", 0) + by
        count: int = self.state["count"]
        return count


def podman_run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONTAINERS_CONF": podman_conf()}
    return subprocess.run(["podman", *args], capture_output=True, text=True, env=env, check=False)


def podman(*args: str, check: bool = True) -> str:
    done = podman_run(*args)
    if check and done.returncode != 0:
        raise SystemExit(f"podman {' '.join(args)} failed ({done.returncode}): {done.stderr}")
    return done.stdout.strip()


async def wait_serving(address: str) -> None:
    """Health answers SERVING; the daemon inside may still be starting."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    async with grpc.aio.insecure_channel(address) as channel:
        await asyncio.wait_for(channel.channel_ready(), STARTUP_TIMEOUT)
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            try:
                # No token: health stays open for probes.
                answer = await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
                if answer.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.2)


async def serve_and_call(address: str) -> int:
    app = troupe.App(actors=[Counter], address=address, app_name="image-test")
    runner = asyncio.create_task(app.run())
    try:
        await asyncio.wait_for(app.wait_registered(), STARTUP_TIMEOUT)
        client = troupe.Client(address)
        try:
            first: int = await client.actor("counter", "c1").incr(by=1)
            await client.actor("counter", "c1").incr(by=1)
        finally:
            await client.close()
        return first
    finally:
        app.stop()
        await runner


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    binary = sys.argv[1]
    built = subprocess.run(
        [str(ROOT / "deploy/container/build-scratch.sh"), binary, TAG],
        capture_output=True, text=True, check=False,
        env={**os.environ, "CONTAINERS_CONF": podman_conf()},
    )
    if built.returncode != 0:
        raise SystemExit(f"build-scratch.sh failed: {built.stderr}")
    size = json.loads(podman("image", "inspect", TAG))[0]["Size"]

    # No tokens on a published port: the image refuses to start, saying why.
    refused = subprocess.run(
        ["podman", "run", "--rm", TAG], capture_output=True, text=True, check=False,
        env={**os.environ, "CONTAINERS_CONF": podman_conf()},
    )
    assert refused.returncode != 0, "the image started with no tokens on 0.0.0.0"
    assert "TROUPE_API_TOKEN" in refused.stderr, refused.stderr

    # One CPU, as the Helm chart's sidecar is limited to: the daemon's
    # default thread count follows the cgroup's limit, not the host's CPUs;
    # and its memory bounds follow the memory limit (sled's cache and the
    # idempotency records' bound an eighth of it each).
    cid = podman(
        "run", "-d", "--cpus", "1", "--memory", "256m", "-p", "127.0.0.1::7420",
        "-e", f"TROUPE_API_TOKEN={API_TOKEN}", "-e", f"TROUPE_APP_TOKEN={APP_TOKEN}", TAG,
    )
    try:
        user = json.loads(podman("inspect", cid))[0]["Config"]["User"]
        assert user == "65532:65532", f"the container runs as {user!r}, not non-root 65532"
        port = podman("port", cid, "7420/tcp").rsplit(":", 1)[1]
        address = f"127.0.0.1:{port}"
        asyncio.run(wait_serving(address))
        os.environ["TROUPE_API_TOKEN"] = API_TOKEN
        os.environ["TROUPE_APP_TOKEN"] = APP_TOKEN
        first = asyncio.run(serve_and_call(address))
        assert first == 1, f"the first incr answered {first}"
        podman("stop", "--time", "20", cid)
        code = json.loads(podman("inspect", cid))[0]["State"]["ExitCode"]
        # The daemon logs to stderr, which `podman logs` replays on its own.
        replayed = podman_run("logs", cid)
        logs = replayed.stdout + replayed.stderr
        assert code == 0, f"the daemon exited {code} on SIGTERM:\n{logs}"
        assert re.search(r"\bthreads\W{1,3}1\b", logs), f"not on one thread with one CPU:\n{logs}"
        for field, value in [
            ("memory_limit", 256 << 20),
            ("sled_cache_bytes", 32 << 20),
            ("idempotency_memory_bytes", 32 << 20),
            # Sheds load from 80% of the limit, as the container's limit is seen.
            ("memory_shed_percent", 80),
        ]:
            assert re.search(rf"\b{field}\W{{1,3}}{value}\b", logs), (
                f"no {field} {value} under a 256 MiB limit:\n{logs}"
            )
    finally:
        podman("rm", "-f", cid, check=False)
    print(f"image: {TAG}, {size / 1e6:.0f} MB; health, an app and a client outside it, "
          "non-root, graceful stop, sized to its CPU and memory limits: ok")
    return 0


def podman_conf() -> str:
    """podman's settings for machines like the CI's: runc, cgroupfs, ulimits
    within the VM's hard limits (without them crun refuses hybrid cgroups)."""
    return os.environ.get("CONTAINERS_CONF", str(Path(__file__).with_name("containers.conf")))


if __name__ == "__main__":
    sys.exit(main())
