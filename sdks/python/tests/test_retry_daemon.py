"""Retries and idempotency keys against the real daemon: a call outlives a daemon restart,
and a key sent twice runs its call once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import troupe

from .conftest import Daemon, hosting


@troupe.actor("restart_counter")
class Counter(troupe.Actor):
    @troupe.method
    async def incr(self, by: int = 1) -> int:
        self.state["count"] = self.state.get("count", 0) + by
        return int(self.state["count"])


class _RetryLogged(logging.Handler):
    """Sets ``event`` when the SDK logs that it is about to retry a call."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.event = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        # The SDK logs from the event loop's thread, where the test awaits the event.
        if "same idempotency key" in record.getMessage():
            self.event.set()


@contextlib.contextmanager
def retry_logged() -> Iterator[asyncio.Event]:
    handler = _RetryLogged()
    logger = logging.getLogger("troupe")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield handler.event
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.fixture
async def patient_daemon(daemon_binary: Path, tmp_path: Path) -> AsyncIterator[Daemon]:
    """A daemon that, for 10 s after each start, holds calls to a type no app hosts yet
    instead of answering NOT_FOUND: a retry that reaches it before the app re-attached
    waits for the app rather than failing."""
    d = Daemon(
        binary=daemon_binary,
        data_dir=tmp_path / "data",
        log_path=tmp_path / "daemon.log",
        extra_args=["--host-wait", "10s"],
    )
    await d.start()
    try:
        yield d
    finally:
        await d.kill()


async def test_a_call_rides_out_a_daemon_restart(patient_daemon: Daemon) -> None:
    daemon = patient_daemon
    # With the default retry budget: a lone call still rides out a restart.
    async with (
        hosting(daemon.address, Counter) as app,
        troupe.Client(daemon.address, timeout=30) as client,
    ):
        assert await client.actor("restart_counter", "c").incr() == 1
        sessions = app.sessions
        assert await daemon.stop() == 0, daemon.log_tail()
        with retry_logged() as retrying:
            call = asyncio.create_task(client.actor("restart_counter", "c").incr())
            # The call failed against the stopped daemon and is waiting to retry.
            await asyncio.wait_for(retrying.wait(), 10)
        assert not call.done()
        await daemon.start()
        assert await asyncio.wait_for(call, 30) == 2, daemon.log_tail()
        await app.wait_registered(sessions=sessions + 1, timeout=15)
        assert await client.get_state("restart_counter", "c") == {"count": 2}


async def test_without_retries_a_stopped_daemon_fails_fast(daemon: Daemon) -> None:
    async with (
        hosting(daemon.address, Counter),
        troupe.Client(daemon.address, timeout=20, retry=False) as client,
    ):
        assert await client.actor("restart_counter", "c").incr() == 1
        assert await daemon.stop() == 0, daemon.log_tail()
        started = time.monotonic()
        with pytest.raises(troupe.Unavailable) as info:
            # Bounded here too, in case the SDK waited on regardless.
            await asyncio.wait_for(client.actor("restart_counter", "c").incr(), 10)
        elapsed = time.monotonic() - started
        assert elapsed < 5, f"took {elapsed:.1f}s of the 20s timeout"
        assert "; retried" not in str(info.value)


async def test_the_same_key_twice_runs_the_call_once(daemon: Daemon) -> None:
    key = f"pytest-{uuid.uuid4()}"
    async with hosting(daemon.address, Counter), troupe.Client(daemon.address, timeout=20) as c:
        first = await c.invoke("restart_counter", "once", "incr", {"by": 5}, idempotency_key=key)
        again = await c.invoke("restart_counter", "once", "incr", {"by": 5}, idempotency_key=key)
        assert (first, again) == (5, 5)
        assert await c.get_state("restart_counter", "once") == {"count": 5}
        # Another key is another call.
        assert await c.invoke("restart_counter", "once", "incr", {"by": 5}) == 10


async def test_a_durable_tell_sent_twice_with_its_key_is_stored_once(daemon: Daemon) -> None:
    marker = asyncio.Event()
    sums: list[int] = []

    @troupe.actor("keyed_inbox")
    class Inbox(troupe.Actor):
        @troupe.method
        async def add(self, n: int) -> None:
            self.state["sum"] = self.state.get("sum", 0) + n
            if n == 100:
                sums.append(self.state["sum"])
                marker.set()

    key = f"pytest-{uuid.uuid4()}"
    async with hosting(daemon.address, Inbox), troupe.Client(daemon.address, timeout=20) as c:
        for _ in range(2):
            await c.tell("keyed_inbox", "i", "add", [3], durable=True, idempotency_key=key)
        # Durable tells of one caller are first delivered in order: when this one runs,
        # whatever the two above stored has run.
        await c.tell("keyed_inbox", "i", "add", [100], durable=True)
        await asyncio.wait_for(marker.wait(), 15)
    assert sums == [103]
