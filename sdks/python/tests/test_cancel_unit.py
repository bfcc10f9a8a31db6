"""Unit tests without a daemon: a turn the daemon cancels (CancelTurn) is answered as
cancelled, with its state changes undone, even when the cancel comes before the turn's
task took its first step."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

import troupe
from troupe._proto.troupe.v1 import app_pb2, common_pb2
from troupe._session import _Session

REF = common_pb2.ActorRef(type="sleeper", id="s1")
sleeping = asyncio.Event()


@troupe.actor("sleeper")
class Sleeper(troupe.Actor):
    @troupe.method
    async def sleep(self) -> None:
        self.state["slept"] = True
        sleeping.set()
        await asyncio.Event().wait()


@pytest.fixture
async def session() -> AsyncIterator[_Session]:
    app = troupe.App(actors=[Sleeper], address="127.0.0.1:1")
    channel = grpc.aio.insecure_channel("127.0.0.1:1")
    try:
        session = _Session(app, channel)
        await session._activate(app_pb2.Activate(call_id=1, actor=REF))
        assert session.out.get_nowait().WhichOneof("kind") == "activated"
        yield session
    finally:
        await channel.close(None)


def _message(**kind: object) -> app_pb2.DaemonMessage:
    return app_pb2.DaemonMessage(**kind)  # type: ignore[arg-type]


async def _answer(session: _Session) -> app_pb2.TurnResult:
    out = await asyncio.wait_for(session.out.get(), 5)
    assert out.WhichOneof("kind") == "turn_result"
    return out.turn_result


@pytest.mark.parametrize("started", [True, False])
async def test_a_cancelled_turn_is_answered_as_cancelled(session: _Session, started: bool) -> None:
    turn = app_pb2.Turn(call_id=7, actor=REF, kind=common_pb2.TURN_KIND_CALL, name="sleep")
    sleeping.clear()
    session._dispatch(_message(turn=turn))
    if started:
        await asyncio.wait_for(sleeping.wait(), 5)
    session._dispatch(_message(cancel=app_pb2.CancelTurn(call_id=7)))
    result = await _answer(session)
    assert result.call_id == 7
    assert result.error.type == "CancelledError"
    assert not result.changes
    assert session.instances[("sleeper", "s1")].state.get("slept") is None
    assert not session.turns and not session.cancelled
