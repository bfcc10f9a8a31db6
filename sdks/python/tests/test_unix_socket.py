"""An app and a client on the daemon's Unix domain socket (`troupe serve --listen-unix`)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import troupe

from .conftest import Daemon, hosting


@troupe.actor("unix-counter")
class UnixCounter(troupe.Actor):
    @troupe.method
    async def incr(self, by: int = 1) -> int:
        self.state["count"] = self.state.get("count", 0) + by
        return int(self.state["count"])


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # Short: a socket path must fit in 108 bytes, which pytest's tmp_path may not.
    path = Path(tempfile.mkdtemp(prefix="troupe-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def test_app_and_client_reach_the_daemon_over_its_unix_socket(
    daemon_binary: Path, tmp_path: Path, socket_dir: Path
) -> None:
    sock = socket_dir / "troupe.sock"
    daemon = Daemon(
        binary=daemon_binary,
        data_dir=tmp_path / "data",
        log_path=tmp_path / "daemon.log",
        extra_args=["--listen-unix", str(sock)],
    )
    await daemon.start()
    try:
        assert sock.is_socket()
        # Owner and group only.
        assert os.stat(sock).st_mode & 0o777 == 0o660
        address = f"unix:{sock}"
        async with hosting(address, UnixCounter):
            async with troupe.Client(address, timeout=20) as client:
                assert await client.invoke("unix-counter", "a", "incr", [2]) == 2
                assert await client.invoke("unix-counter", "a", "incr", [3]) == 5
            # gRPC's absolute form of the same address works too.
            async with troupe.Client(f"unix://{sock}", timeout=20) as client:
                assert await client.invoke("unix-counter", "a", "incr", [1]) == 6
        assert await daemon.stop() == 0
        assert not sock.exists(), "the daemon removes its socket file when it stops"
    finally:
        await daemon.kill()
