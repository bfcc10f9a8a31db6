"""Unit tests without a daemon: a Turn or Activate that starts after the placement lease it
was sent under ended is answered lease_expired and runs no user code."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

import troupe
from troupe._proto.troupe.v1 import app_pb2, common_pb2
from troupe._session import _Session

ran: list[str] = []


@troupe.actor("leased")
class Leased(troupe.Actor):
    def __init__(self) -> None:
        super().__init__()
        ran.append("__init__")

    async def on_activate(self) -> None:
        ran.append("on_activate")
        self.state["activated"] = True

    @troupe.method
    async def incr(self) -> int:
        ran.append("incr")
        self.state["n"] = self.state.get("n", 0) + 1
        return int(self.state["n"])

    async def on_alarm(self, data: Any) -> None:
        ran.append("on_alarm")


REF = common_pb2.ActorRef(type="leased", id="a1")


def _now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture
async def session() -> AsyncIterator[_Session]:
    ran.clear()
    app = troupe.App(actors=[Leased], address="127.0.0.1:1")
    channel = grpc.aio.insecure_channel("127.0.0.1:1")
    try:
        yield _Session(app, channel)
    finally:
        await channel.close(None)


async def _activate(session: _Session, lease_deadline_unix_ms: int) -> app_pb2.ActivateResult:
    await session._activate(
        app_pb2.Activate(call_id=3, actor=REF, lease_deadline_unix_ms=lease_deadline_unix_ms)
    )
    out = session.out.get_nowait()
    assert out.WhichOneof("kind") == "activated"
    return out.activated


def _turn(lease_deadline_unix_ms: int, **kw: Any) -> app_pb2.Turn:
    return app_pb2.Turn(
        call_id=7,
        actor=REF,
        kind=common_pb2.TURN_KIND_CALL,
        name="incr",
        lease_deadline_unix_ms=lease_deadline_unix_ms,
        **kw,
    )


async def _run_turn(session: _Session, msg: app_pb2.Turn) -> app_pb2.TurnResult:
    await session._turn(msg)
    out = session.out.get_nowait()
    assert out.WhichOneof("kind") == "turn_result"
    return out.turn_result


def _refusals(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "lease_expired" in r.getMessage()]


async def test_activate_after_the_lease_creates_no_instance(
    session: _Session, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="troupe")
    result = await _activate(session, _now_ms() - 2_000)
    assert result == app_pb2.ActivateResult(call_id=3, lease_expired=True)
    assert ran == []
    assert not session.instances
    (record,) = _refusals(caplog)
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert "leased/a1" in message
    late = int(message.split("ended ")[1].split(" ms")[0])
    assert 2_000 <= late < 60_000


async def test_turn_after_the_lease_runs_no_handler(
    session: _Session, caplog: pytest.LogCaptureFixture
) -> None:
    assert (await _activate(session, 0)).lease_expired is False
    ran.clear()
    caplog.set_level(logging.WARNING, logger="troupe")
    for kind, name in [(common_pb2.TURN_KIND_CALL, "incr"), (common_pb2.TURN_KIND_ALARM, "")]:
        result = await _run_turn(
            session,
            app_pb2.Turn(
                call_id=7,
                actor=REF,
                kind=kind,
                name=name,
                lease_deadline_unix_ms=_now_ms() - 500,
            ),
        )
        assert result == app_pb2.TurnResult(call_id=7, lease_expired=True)
        assert result.WhichOneof("outcome") is None
    assert ran == []
    assert session.instances[("leased", "a1")].state.get("n") is None
    messages = [r.getMessage() for r in _refusals(caplog)]
    assert len(messages) == 2
    assert "call incr of leased/a1" in messages[0]
    assert "alarm of leased/a1" in messages[1]


@pytest.mark.parametrize("lease", ["none", "future"])
async def test_within_the_lease_or_without_one_everything_runs(
    session: _Session, caplog: pytest.LogCaptureFixture, lease: str
) -> None:
    caplog.set_level(logging.WARNING, logger="troupe")

    def deadline() -> int:
        return 0 if lease == "none" else _now_ms() + 60_000

    activated = await _activate(session, deadline())
    assert not activated.lease_expired
    assert not activated.HasField("error")
    assert {c.key for c in activated.changes} == {"activated"}
    result = await _run_turn(session, _turn(deadline()))
    assert not result.lease_expired
    assert result.reply.data == b"1"
    assert {c.key: c.set for c in result.changes} == {"n": b"1"}
    assert ran == ["__init__", "on_activate", "incr"]
    assert not _refusals(caplog)


class _FakeCall:
    """The Attach stream as _read_loop sees it: one Turn, then the event loop is kept busy
    (as by a long synchronous handler) before the next read waits forever."""

    def __init__(self, msg: app_pb2.DaemonMessage, busy: float) -> None:
        self._msgs = [msg]
        self._busy = busy

    async def read(self) -> object:
        if self._msgs:
            return self._msgs.pop()
        time.sleep(self._busy)  # noqa: ASYNC251 -- blocks the loop on purpose
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_the_lease_is_checked_when_the_turn_starts_not_when_it_arrives(
    session: _Session, caplog: pytest.LogCaptureFixture
) -> None:
    await _activate(session, 0)
    ran.clear()
    caplog.set_level(logging.WARNING, logger="troupe")
    # Within the lease when read, past it by the time its task gets to run.
    msg = app_pb2.DaemonMessage(turn=_turn(_now_ms() + 50))
    reader = asyncio.create_task(session._read_loop(_FakeCall(msg, busy=0.2)))  # type: ignore[arg-type]
    try:
        out = await asyncio.wait_for(session.out.get(), 5)
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
    assert out.turn_result == app_pb2.TurnResult(call_id=7, lease_expired=True)
    assert ran == []
    assert len(_refusals(caplog)) == 1
