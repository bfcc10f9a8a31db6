"""Fixtures that run the real `troupe` daemon binary.

The binary is $TROUPE_BIN, else target/debug/troupe at the repository root. When
TROUPE_BIN is set and the file is missing the integration tests fail; when it is
unset and the default binary is missing they are skipped (build it with cargo).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.trace import TracerProvider

import troupe
from troupe._retry import DEFAULT_RETRY_BUDGET

REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_BIN = REPO_ROOT / "target" / "debug" / "troupe"


def troupe_bin() -> Path:
    explicit = os.environ.get("TROUPE_BIN")
    path = Path(explicit) if explicit else DEFAULT_BIN
    if not path.is_file():
        if explicit:
            pytest.fail(f"TROUPE_BIN={explicit} does not exist; build the daemon or fix the path")
        pytest.skip(f"daemon binary {path} not built; set TROUPE_BIN or run `cargo build`")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def wait_healthy(
    address: str,
    proc: asyncio.subprocess.Process,
    timeout: float = 20,
    credentials: grpc.ChannelCredentials | None = None,
) -> None:
    """Poll the gRPC health service until it answers SERVING (over TLS with ``credentials``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    channel_cm = (
        grpc.aio.insecure_channel(address)
        if credentials is None
        else grpc.aio.secure_channel(address, credentials)
    )
    async with channel_cm as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            if proc.returncode is not None:
                raise RuntimeError(f"daemon exited with {proc.returncode} before becoming healthy")
            try:
                resp = await stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if resp.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            if loop.time() > deadline:
                raise TimeoutError(f"daemon at {address} not healthy after {timeout}s")
            await asyncio.sleep(0.05)  # polling interval of the readiness probe


@dataclass
class Daemon:
    """A running `troupe serve` on a fixed port and data dir, restartable."""

    binary: Path
    data_dir: Path
    log_path: Path
    extra_args: Sequence[str] = ()
    # Added to this process's environment for the daemon.
    env: Mapping[str, str] = field(default_factory=dict)
    # How the readiness probe reaches a daemon with TLS on (None: plaintext).
    health_credentials: grpc.ChannelCredentials | None = None
    port: int = field(default_factory=free_port)
    proc: asyncio.subprocess.Process | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                str(self.binary),
                "serve",
                "--listen",
                self.address,
                "--data-dir",
                str(self.data_dir),
                *self.extra_args,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
            )
        await wait_healthy(self.address, self.proc, credentials=self.health_credentials)

    async def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal the daemon and wait for it to exit; returns its exit code."""
        proc, self.proc = self.proc, None
        if proc is None:
            return 0
        proc.send_signal(sig)
        try:
            return await asyncio.wait_for(proc.wait(), 20)
        except asyncio.TimeoutError:  # not yet the builtin TimeoutError on 3.10
            proc.kill()
            await proc.wait()
            raise

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        self.proc = None

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def _daemon_args(request: pytest.FixtureRequest) -> list[str]:
    marker = request.node.get_closest_marker("daemon_args")
    args = ["--host-wait", "200ms"]
    if marker is not None:
        args.extend(marker.args)
    return args


@contextlib.asynccontextmanager
async def fake_server(
    add_servicer: Callable[[Any, grpc.aio.Server], None], servicer: Any
) -> AsyncIterator[str]:
    """A grpc.aio server on a free loopback port serving ``servicer`` (added with its
    generated ``add_*_to_server``), for tests that script what the daemon answers; yields
    its address."""
    server = grpc.aio.server()
    add_servicer(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


@pytest.fixture(autouse=True)
def no_tls_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # Clients, apps and daemons read these; tests set them only through monkeypatch.
    for variable in ("TROUPE_TLS_CA", "TROUPE_TLS_CERT", "TROUPE_TLS_KEY"):
        monkeypatch.delenv(variable, raising=False)


@pytest.fixture
def daemon_binary() -> Path:
    return troupe_bin()


@pytest.fixture
async def daemon(
    daemon_binary: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Daemon]:
    """A fresh daemon per test; extra flags via @pytest.mark.daemon_args(...)."""
    d = Daemon(
        binary=daemon_binary,
        data_dir=tmp_path / "data",
        log_path=tmp_path / "daemon.log",
        extra_args=_daemon_args(request),
    )
    await d.start()
    try:
        yield d
    finally:
        await d.kill()
        if request.node.rep_call_failed if hasattr(request.node, "rep_call_failed") else False:
            print(f"--- daemon log ---\n{d.log_tail()}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call":
        item.rep_call_failed = report.failed  # type: ignore[attr-defined]


@contextlib.asynccontextmanager
async def hosting(
    address: str,
    *actors: type[troupe.Actor],
    timeout: float = 10,
    tracer_provider: TracerProvider | None = None,
    max_receive_bytes: int | None = None,
    token: str | None = None,
    token_file: str | os.PathLike[str] | None = None,
    tls_ca: str | os.PathLike[str] | None = None,
    tls_cert: str | os.PathLike[str] | None = None,
    tls_key: str | os.PathLike[str] | None = None,
    filters: Sequence[troupe.CallFilter] = (),
    retry_budget: troupe.RetryBudget | None = DEFAULT_RETRY_BUDGET,
) -> AsyncIterator[troupe.App]:
    """Run an App in this event loop for the duration of the block."""
    app = troupe.App(
        filters=filters,
        actors=list(actors),
        address=address,
        app_name="pytest",
        tracer_provider=tracer_provider,
        max_receive_bytes=max_receive_bytes,
        token=token,
        token_file=token_file,
        tls_ca=tls_ca,
        tls_cert=tls_cert,
        tls_key=tls_key,
        retry_budget=retry_budget,
    )
    task = asyncio.create_task(app.run())
    try:
        waiter = asyncio.create_task(app.wait_registered(timeout=timeout))
        done, _ = await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            waiter.cancel()
            task.result()
            raise RuntimeError("App.run() returned before registering")
        waiter.result()
        yield app
    finally:
        app.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)


@pytest.fixture
async def client(daemon: Daemon) -> AsyncIterator[troupe.Client]:
    async with troupe.Client(daemon.address, timeout=20) as c:
        yield c


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "daemon_args(*args): extra flags for `troupe serve`")
