"""The SDK and the daemon agree on an app API version, or the app stops with
ApiVersionMismatch naming both; and the SDK's release is the package's, the daemon's
and the TypeScript SDK's."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import re
from collections.abc import AsyncIterable, AsyncIterator
from pathlib import Path

import grpc
import pytest

import troupe
from troupe import _app, _attach_errors
from troupe._proto.troupe.v1 import app_pb2, app_pb2_grpc

from .conftest import REPO_ROOT, Daemon, fake_server


@troupe.actor("versioned")
class Versioned(troupe.Actor):
    @troupe.method
    def get(self) -> int:
        return 1


def _toml_version(path: Path, section: str) -> str:
    """The ``version = "..."`` of ``[section]`` in a TOML file (no tomllib on 3.10)."""
    text = path.read_text()
    start = text.index(f"[{section}]\n")
    m = re.compile(r'^version = "([^"]+)"$', re.MULTILINE).search(text, start)
    assert m, f"no version in [{section}] of {path}"
    return m.group(1)


def test_the_sdk_release_is_the_package_version_and_the_daemons() -> None:
    # The wheel takes its version from the daemon's crate (maturin,
    # `dynamic = ["version"]`), so the installed package's metadata is it.
    daemon = _toml_version(REPO_ROOT / "Cargo.toml", "workspace.package")
    python = importlib.metadata.version("troupe")
    typescript = json.loads((REPO_ROOT / "sdks" / "typescript" / "package.json").read_text())[
        "version"
    ]
    assert troupe.__version__ == daemon, "troupe._address.SDK_VERSION != the workspace's version"
    assert (python, typescript) == (daemon, daemon), (
        "the SDKs ship with the daemon: keep package.json and Cargo.toml equal "
        "(the wheel's version is Cargo's)"
    )
    assert f"troupe-python/{python}" == _app.SDK_NAME


class _FakeDaemon(app_pb2_grpc.AppHostServicer):
    """An AppHost that answers every Register with a Registered of ``api_version``."""

    def __init__(self, api_version: int) -> None:
        self.api_version = api_version
        self.registers: list[app_pb2.Register] = []

    async def Attach(
        self,
        request_iterator: AsyncIterable[app_pb2.AppMessage],
        context: grpc.aio.ServicerContext[app_pb2.AppMessage, app_pb2.DaemonMessage],
    ) -> AsyncIterator[app_pb2.DaemonMessage]:
        requests = aiter(request_iterator)
        first = await anext(requests)
        self.registers.append(first.register)
        yield app_pb2.DaemonMessage(
            registered=app_pb2.Registered(
                types=first.register.types,
                daemon_version="9.9.9",
                api_version=self.api_version,
                accepts_batches=True,
            )
        )
        async for _ in requests:  # until the app hangs up
            pass


@pytest.fixture
async def fake_daemon(
    request: pytest.FixtureRequest,
) -> AsyncIterator[tuple[str, _FakeDaemon]]:
    """A fake daemon answering api_version ``request.param``, and its address."""
    servicer = _FakeDaemon(request.param)
    async with fake_server(app_pb2_grpc.add_AppHostServicer_to_server, servicer) as address:
        yield address, servicer


@pytest.mark.parametrize("fake_daemon", [2, 0], indirect=True, ids=["version 2", "no version"])
async def test_an_app_stops_on_a_daemon_of_another_api_version(
    fake_daemon: tuple[str, _FakeDaemon],
) -> None:
    address, servicer = fake_daemon
    app = troupe.App([Versioned], address=address, app_name="pytest")
    with pytest.raises(troupe.ApiVersionMismatch) as info:
        await asyncio.wait_for(app.run(), 10)
    error = info.value
    assert isinstance(error, troupe.FailedPrecondition)
    assert (error.sdk_api_version, error.daemon_api_version) == (1, servicer.api_version)
    message = str(error)
    assert "version 1" in message
    assert "install matching versions" in message
    assert "pip install troupe" in message
    assert "troupe 9.9.9" in message
    if servicer.api_version:
        assert f"app API version {servicer.api_version}" in message
    else:
        assert "from before app API versions" in message
    # Said once, not retried; the app never counted as registered.
    assert len(servicer.registers) == 1
    assert app.sessions == 0
    assert not app.registered
    # What the SDK told the daemon.
    register = servicer.registers[0]
    assert register.api_version == troupe.API_VERSION == 1
    assert register.sdk == f"troupe-python/{troupe.__version__}"


async def test_the_daemon_refuses_an_sdk_of_another_api_version(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    # This SDK as if it were a release of API version 2 meeting today's daemon.
    monkeypatch.setattr(_app, "API_VERSION", 2)  # what Register sends
    monkeypatch.setattr(_attach_errors, "API_VERSION", 2)  # what the refusal reports
    app = troupe.App([Versioned], address=daemon.address, app_name="pytest")
    with pytest.raises(troupe.ApiVersionMismatch) as info:
        await asyncio.wait_for(app.run(), 10)
    assert (info.value.sdk_api_version, info.value.daemon_api_version) == (2, 1)
    message = str(info.value)
    assert "app API version 2" in message
    assert "speaks version 1" in message
    assert f"troupe-python/{troupe.__version__}" in message
    assert "install matching versions" in message
    assert app.sessions == 0
